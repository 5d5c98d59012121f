"""What follows a change of issues, in one place: after a sync's page, a webhook, the history, an applied decision
and a finished run. tasks.py (and the management commands) call these; github/ only reports which issues changed,
and runs/ only records what a runner said.

- Issues the queue shows: their runs across torch builds compared again (an edit may give the reporter's version),
  their suggestions refreshed (which reindexes their similar issues), then their possible-duplicate marks
  recomputed from that index (triage/duplicates.py; an issue that left the queue loses its mark).
- Issues of the history only: their signature and term vector reindexed (similar issues find them; suggestions are
  for issues someone will triage), before the queue issues of the same page are marked; the queue's reports near
  them are marked again (a closed original the history just brought may be their original).
- An applied decision: the issue's mark, and the marks naming it as the original (closed as a duplicate itself,
  it passes them to the one it names).
- Repros that arrived by a sync or a webhook: an automatic bisection, within its budgets (runs/auto_bisect.py).
"""

from __future__ import annotations

from rubric_app.models import BisectionRun, Issue, TriageDecision
from rubric_app.runs import auto_bisect, build_checks
from rubric_app.triage import duplicates, similar, suggestions

# Where an issue's text came from, and whether a repro in it is bisected on arrival.
BISECTED_ON_ARRIVAL = ("sync", "webhook")


def issues_changed(issue_ids: list[int], cause: str) -> None:
    """Follow up a change of these issues; cause: "sync", "webhook", "history", "departure" (a sync re-read an issue
    that left the queue), "skill" (the triage skill changed) or "label gone" (GitHub no longer has a label they
    carried): the last three refresh only."""
    if not issue_ids:
        return
    if cause == "history":
        queued = sorted(Issue.objects.filter(pk__in=issue_ids, in_queue=True).values_list("pk", flat=True))
        others = sorted(set(issue_ids) - set(queued))
        # The closed ones first: the queue issues' marks look for their originals among them.
        similar.reindex(Issue.objects.filter(pk__in=others))
        _refresh(queued)
        duplicates.mark(sorted(set(queued) | set(duplicates.reports_near(others))))
        return
    _refresh(issue_ids)
    if cause != "skill":  # the triage skill changes suggestions, not an issue's text
        duplicates.mark(issue_ids)
    if cause in BISECTED_ON_ARRIVAL:
        auto_bisect.queue_for_issues(issue_ids, cause=cause)


def _refresh(issue_ids: list[int]) -> None:
    if issue_ids:
        build_checks.compare_issues(issue_ids)
        suggestions.refresh(Issue.objects.filter(pk__in=issue_ids))


def issues_loaded(issue_ids: list[int]) -> None:
    """Issues written without GitHub (the demo's loader): their suggestions refreshed and marks computed; nothing
    compared or bisected."""
    suggestions.refresh(Issue.objects.filter(pk__in=issue_ids))
    duplicates.mark(issue_ids)


def queue_reindexed(batch: int = 500) -> tuple[int, int]:
    """After the whole mirror was indexed again (manage.py index_similar): every open queue issue's mark recomputed,
    `batch` at a time; returns (how many carry one, the queue's size)."""
    queued = list(Issue.objects.in_queue().order_by("pk").values_list("pk", flat=True))
    return sum(duplicates.mark(queued[i : i + batch]) for i in range(0, len(queued), batch)), len(queued)


def decision_applied(decision: TriageDecision) -> None:
    """An applied decision changed the issue's labels (or closed it): its suggestions and marks follow."""
    if decision.status == TriageDecision.Status.APPLIED:
        suggestions.refresh_issue(decision.issue)
        issue = decision.issue
        duplicates.mark([issue.pk, *duplicates.marked_as_duplicates_of(issue)], {issue.pk: similar.vector_of(issue)})


def run_finished(run: BisectionRun) -> None:
    """A run finished with a verdict: the issue's runs compared across torch builds, its suggestions refreshed and its
    mark recomputed (the run's output is in its text). The caller records the run in the same transaction, so whoever
    sees the run done (the issue page's poll) also sees the suggestions it produced."""
    build_checks.compare_issue(run.issue)
    suggestions.refresh_issue(run.issue)
    duplicates.mark([run.issue.pk], {run.issue.pk: similar.vector_of(run.issue)})  # the one just indexed
