"""What follows a change of issues, in one place: after a sync's page, a webhook, the history, an applied decision
and a finished run. tasks.py (and the management commands) call these; github/ only reports which issues changed,
and runs/ only records what a runner said.

- Issues the queue shows: their runs across torch builds compared again (an edit may give the reporter's version),
  their suggestions refreshed (which reindexes their similar issues).
- Issues of the history only: their signature and term vector reindexed (similar issues find them; suggestions are
  for issues someone will triage).
- Repros that arrived by a sync or a webhook: an automatic bisection, within its budgets (runs/auto_bisect.py).
"""

from __future__ import annotations

from django.db import transaction

from rubric_app.models import BisectionRun, Issue, TriageDecision
from rubric_app.runs import auto_bisect, build_checks, coordinator
from rubric_app.triage import similar, suggestions

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
        _refresh(queued)
        similar.reindex(Issue.objects.filter(pk__in=issue_ids).exclude(pk__in=queued))
        return
    _refresh(issue_ids)
    if cause in BISECTED_ON_ARRIVAL:
        auto_bisect.queue_for_issues(issue_ids, cause=cause)


def _refresh(issue_ids: list[int]) -> None:
    if issue_ids:
        build_checks.compare_issues(issue_ids)
        suggestions.refresh(Issue.objects.filter(pk__in=issue_ids))


def decision_applied(decision: TriageDecision) -> None:
    """An applied decision changed the issue's labels: its suggestions follow."""
    if decision.status == TriageDecision.Status.APPLIED:
        suggestions.refresh_issue(decision.issue)


def runner_reported(message: object) -> BisectionRun | None:
    """Record a runner's report (runs/coordinator.py); when it finished a run, compare the issue's runs across torch
    builds and refresh its suggestions in the same transaction: whoever sees the run done (the issue page's poll)
    also sees the suggestions it produced. Returns the finished run, or None."""
    with transaction.atomic():
        run = coordinator.record(message)
        if run is not None:
            build_checks.compare_issue(run.issue)
            suggestions.refresh_issue(run.issue)
    return run
