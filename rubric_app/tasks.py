"""Celery tasks: thin. Each takes ids, loads rows and calls domain code.

Enqueue with `some_task.delay_on_commit(...)` so a worker never looks for a
row whose transaction has not committed yet.
"""

from celery import shared_task

from .models import Issue


@shared_task
def refresh_suggestions_task(issue_id: int) -> None:
    """Recompute one issue's rubric suggestions (after a sync change or a finished bisection)."""
    issue = Issue.objects.filter(pk=issue_id).first()
    if issue is not None:  # the issue may have been deleted meanwhile: nothing to do
        issue.refresh_suggestions()
