"""The possible-duplicate mark on the mirror: for issues that arrived or changed, their best original when it clears
the calibrated threshold (rubric/duplicates.py), stored on the issue for the queue row and the issue page.

mark() takes issue ids, as every follow-up of a change of issues does (triage/followups.py: after a sync's page, a
webhook, the history, an applied decision, a finished run): the open queue issues among them are looked
up in the similar issues' index (similar.rank: the heads of their terms' lists, the best candidates scored exactly),
the candidates filed before them are scored again as originals (titles, failure signature, the names both use; an
issue closed as a duplicate passes its score to the original it names, an issue's own duplicates are left out),
and the best one is stored with its score and reasons, or the mark cleared below the threshold. Nothing is ever
closed here: the mark offers a triager the preview of the close, which they apply or not. A few queries per batch,
none per issue.
"""

from __future__ import annotations

from rubric_app.models import DuplicatePair, Issue, TrainedModel, TriageDecision
from rubric_app.rubric import duplicates
from rubric_app.rubric.types import IssueText
from rubric_app.triage import similar

MARK_FIELDS = ["possible_duplicate", "possible_duplicate_score", "possible_duplicate_reasons"]
ROW_FIELDS = ["number", "title", "body", "state", "state_reason", "signature", "named_original", "named_original_by"]
_ROW_FIELDS = ROW_FIELDS


def mark_threshold() -> float:
    """The mark's threshold in use: the one the weekly training calibrated on the repository's own pairs and promoted
    through the label model's gate (triage/mark_calibration.py), else the shipped calibration (duplicates.MARK_AT:
    the demo, a mirror with no history). One query."""
    promoted = TrainedModel.objects.in_use_order().filter(figures__mark__promoted=True)
    for figures in promoted.values_list("figures", flat=True)[:1]:
        return float(figures["mark"]["threshold"])
    return duplicates.MARK_AT


def mark(issue_ids: list[int], vectors: dict[int, dict[str, float]] | None = None) -> int:
    """Recompute the possible-duplicate mark of the open queue issues among `issue_ids` (the others, gone from the
    queue, lose theirs); returns how many of them carry one.

    vectors: their term vectors when the caller has them at hand, else read."""
    rows = list(Issue.objects.filter(pk__in=issue_ids).only(*_ROW_FIELDS, *MARK_FIELDS, "in_queue").order_by("pk"))
    issues = [row for row in rows if row.in_queue and row.state == Issue.State.OPEN]
    changed = [
        row for row in rows if not (row.in_queue and row.state == Issue.State.OPEN) and row.possible_duplicate_id
    ]
    for row in changed:
        row.possible_duplicate_id, row.possible_duplicate_score, row.possible_duplicate_reasons = None, None, []
    vectors = dict(vectors or {})
    missing = {issue.pk for issue in issues if issue.pk not in vectors}
    vectors.update(similar.stored_vectors(missing) if missing else {})
    near = similar.rank({issue.pk: vectors.get(issue.pk, {}) for issue in issues}, loaded=vectors) if issues else {}
    found = {pk for others in near.values() for pk, *_ in others}
    candidates = {row.pk: row for row in Issue.objects.filter(pk__in=found).only(*_ROW_FIELDS)} if found else {}
    named = {row.named_original for row in candidates.values() if row.named_original}
    originals = {row.number: row for row in Issue.objects.filter(number__in=named).only(*_ROW_FIELDS)} if named else {}
    unread = {row.pk for row in originals.values()} - vectors.keys()
    vectors.update(similar.stored_vectors(unread) if unread else {})
    closed_as_duplicates = _closed_as_duplicates(candidates.values())
    threshold = mark_threshold()
    # Each row read once as the scoring reads it: a candidate is near many of the batch's issues.
    reports = {
        row.pk: _report(row, vectors, closed_as_duplicates)
        for row in (*issues, *candidates.values(), *originals.values())
    }
    for issue in issues:
        nearest = [candidates[pk] for pk, *_ in near.get(issue.pk, ()) if pk in candidates]
        older = [row for row in nearest if row.number < issue.number]
        older += [originals[r.named_original] for r in older if r.named_original in originals]
        best = duplicates.best_original(
            reports[issue.pk], [reports[pk] for pk in {row.pk: row for row in older}], threshold=threshold
        )
        target = None
        if best is not None:
            target = originals.get(best.number) or next((r for r in older if r.number == best.number), None)
        mark = (target.pk, best.score, best.reasons) if target is not None and best is not None else (None, None, [])
        if mark != (issue.possible_duplicate_id, issue.possible_duplicate_score, issue.possible_duplicate_reasons):
            issue.possible_duplicate_id, issue.possible_duplicate_score, issue.possible_duplicate_reasons = mark
            changed.append(issue)
    if changed:
        Issue.objects.bulk_update(changed, MARK_FIELDS)
    return sum(1 for issue in issues if issue.possible_duplicate_id)


def reports_near(issue_ids: list[int]) -> list[int]:
    """The open queue issues among the nearest of these (closed originals the history just indexed): the reports whose
    best original may now be one of them, to mark again. Three queries, none without issues."""
    vectors = similar.stored_vectors(set(issue_ids)) if issue_ids else {}
    near = similar.rank(vectors, queued=True)
    return sorted({pk for others in near.values() for pk, *_ in others} - set(issue_ids))


def marked_as_duplicates_of(issue: Issue) -> list[int]:
    """The open queue issues marked possible duplicates of `issue` (a decision just closed it, perhaps as a duplicate
    itself: their best original may now be the one it names)."""
    return list(Issue.objects.in_queue().filter(possible_duplicate=issue).values_list("pk", flat=True))


def _closed_as_duplicates(rows) -> dict[int, tuple[int, str]]:
    """{number: (the original, who said it)} for the rows whose thread names none yet but that are known duplicates:
    a pair the history sync recorded (GitHub's marked_as_duplicate event, its closed-as-duplicate state), or a
    dashboard decision that closed it as a duplicate (before the thread's "Duplicate of #N" is synced). Two queries,
    none without such rows."""
    numbers = [row.number for row in rows if not row.named_original]
    if not numbers:
        return {}
    found = {}
    for number, original, source, by in DuplicatePair.objects.filter(duplicate__number__in=numbers).values_list(
        "duplicate__number", "original", "source", "said_by"
    ):
        found[number] = (original, f"@{by} ({DuplicatePair.Source(source).label})" if by else "GitHub")
    closing = [row.number for row in rows if row.state_reason == "duplicate" and row.number not in found]
    if closing:
        applied = TriageDecision.objects.filter(
            issue__number__in=closing, status=TriageDecision.Status.APPLIED, duplicate_of__isnull=False
        )
        for number, original, by in applied.values_list("issue__number", "duplicate_of", "user__username"):
            found[number] = (original, f"@{by} (closed from the dashboard)")
    return found


def report_of(row: Issue, vector: dict[str, float], closed_as: dict[int, tuple[int, str]]) -> duplicates.Report:
    """The row (ROW_FIELDS loaded) as the ranking reads it."""
    named, by = (
        (row.named_original, row.named_original_by) if row.named_original else closed_as.get(row.number, (None, ""))
    )
    return duplicates.Report(
        number=row.number,
        vector=vector,
        title=row.title,
        names=duplicates.names_of(IssueText(number=row.number, title=row.title, body=row.body)),
        signature=row.signature,
        state=row.state,
        named_original=named,
        named_by=by,
        state_reason=row.state_reason,
    )


def _report(row: Issue, vectors: dict[int, dict[str, float]], closed_as) -> duplicates.Report:
    return report_of(row, vectors.get(row.pk, {}), closed_as)


def ranked(issue: Issue, rows: list[Issue], vectors: dict[int, dict[str, float]]) -> list[duplicates.Match]:
    """The issue page's similar issues in the mark's order, with its reasons: one ranking (duplicates.rank) for both.
    rows: the candidates (ROW_FIELDS loaded), vectors: everyone's stored vector."""
    closed_as = _closed_as_duplicates(rows)
    report = report_of(issue, vectors.get(issue.pk, {}), {})
    return duplicates.rank(report, [_report(row, vectors, closed_as) for row in rows])
