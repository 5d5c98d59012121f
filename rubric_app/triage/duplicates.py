"""The possible-duplicate mark on the mirror: for issues that arrived or changed, their best original when it clears
the calibrated threshold (rubric/likeness/duplicates.py), stored on the issue for the queue row and the issue page.

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

from rubric_app.models import Issue
from rubric_app.rubric.likeness import duplicates
from rubric_app.triage import similar
from rubric_app.triage.originals import ROW_FIELDS, closed_as_duplicates, mark_threshold, report_of

__all__ = ["MARK_FIELDS", "ROW_FIELDS", "mark", "mark_threshold", "marked_as_duplicates_of", "reports_near"]

MARK_FIELDS = ["possible_duplicate", "possible_duplicate_score", "possible_duplicate_reasons"]
_ROW_FIELDS = ROW_FIELDS


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
    # The original each candidate is a duplicate of: its thread's (said with standing), a recorded pair's, a decision's.
    closed_as = closed_as_duplicates(candidates.values())
    named = {row.named_original or closed_as.get(row.number, (None,))[0] for row in candidates.values()} - {None}
    originals = {row.number: row for row in Issue.objects.filter(number__in=named).only(*_ROW_FIELDS)} if named else {}
    unread = {row.pk for row in originals.values()} - vectors.keys()
    vectors.update(similar.stored_vectors(unread) if unread else {})
    threshold = mark_threshold()
    # Each row read once as the scoring reads it: a candidate is near many of the batch's issues.
    reports = {
        row.pk: report_of(row, vectors.get(row.pk, {}), closed_as)
        for row in (*issues, *candidates.values(), *originals.values())
    }
    for issue in issues:
        nearest = [candidates[pk] for pk, *_ in near.get(issue.pk, ()) if pk in candidates]
        older = [row for row in nearest if row.number < issue.number]
        older += [originals[n] for n in (reports[r.pk].named_original for r in older) if n in originals]
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
