"""Who an issue's original is, as the ranking reads the mirror: each row as a duplicates.Report (the original its thread
names and who said it, or the one a recorded pair or a dashboard decision names), the threshold the mark uses, and the
issue page's similar issues in the mark's order (ranked): one ranking for the page and the mark. No index lookups
here (triage/similar.py does them): this module is what both the page's list and the mark call.
"""

from __future__ import annotations

from rubric_app.models import DuplicatePair, Issue, TrainedModel, TriageDecision
from rubric_app.rubric.likeness import duplicates
from rubric_app.rubric.reading.types import IssueText

ROW_FIELDS = ["number", "title", "body", "state", "state_reason", "signature", "named_original", "named_original_by"]


def mark_threshold() -> float:
    """The mark's threshold in use: the one the weekly training calibrated on the repository's own pairs and promoted
    through the label model's gate (triage/mark_calibration.py), else the shipped calibration (duplicates.MARK_AT:
    the demo, a mirror with no history). One query."""
    promoted = TrainedModel.objects.in_use_order().filter(figures__mark__promoted=True)
    for figures in promoted.values_list("figures", flat=True)[:1]:
        return float(figures["mark"]["threshold"])
    return duplicates.MARK_AT


def closed_as_duplicates(rows) -> dict[int, tuple[int, str]]:
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


def ranked(issue: Issue, rows: list[Issue], vectors: dict[int, dict[str, float]]) -> list[duplicates.Match]:
    """The issue page's similar issues in the mark's order, with its reasons: one ranking (duplicates.rank) for both.
    rows: the candidates (ROW_FIELDS loaded), vectors: everyone's stored vector."""
    closed_as = closed_as_duplicates(rows)
    report = report_of(issue, vectors.get(issue.pk, {}), {})
    return duplicates.rank(report, [report_of(row, vectors.get(row.pk, {}), closed_as) for row in rows])
