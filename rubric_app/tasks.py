"""Celery tasks: thin. Each takes ids, loads rows and calls domain code.

Enqueue with `some_task.delay_on_commit(...)` so a worker never looks for a
row whose transaction has not committed yet.
"""

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from rubric_app.github import applying, events, history, signin, sync
from rubric_app.runs import auto_bisect, bisecting, build_checks
from rubric_app.triage import model_store

from .models import BisectionRun, TriageDecision, WebhookDelivery, WorkerHeartbeat

log = logging.getLogger(__name__)

# Longer than a message normally waits in a queue; older pending work is sent again.
STUCK_AFTER = timedelta(minutes=15)


@shared_task
def sync_queue_task(full: bool = False) -> None:
    """Sync the queue from GitHub (beat runs it incrementally every SYNC_INTERVAL_MINUTES).

    A GitHubError propagates to the worker's log; the saved resume point and
    high-water mark make the next run continue where this one stopped.
    """
    sync.sync_queue(full=full)


@shared_task
def sync_history_task() -> None:
    """Backfill the repository's history for at most HISTORY_BUDGET_MINUTES (its cursor saved), or, once it is done,
    fetch what changed since the last run (beat, every HISTORY_INTERVAL_MINUTES); a run holding the claim makes this
    one a no-op."""
    history.sync_history(budget_s=settings.HISTORY_BUDGET_MINUTES * 60)


@shared_task
def train_label_model_task() -> None:
    """Train a labeler on the history and promote it when the gate finds it at least as good as the one in use
    (beat, weekly): what train_label_model --from-db does, recorded on /rubric/models either way."""
    try:
        model_store.train_from_history(trained_by="the weekly task", out=log.info)
    except model_store.TooLittleHistory as exc:
        log.info("no labeler trained this week: %s", exc)


# Safe to retry: the delivery is claimed and marked processed in the same transaction.
@shared_task(autoretry_for=(DatabaseError,), retry_backoff=True, max_retries=5)
def process_webhook_task(delivery_id: int) -> None:
    """Apply one stored webhook delivery to the local mirror (a claim makes a redelivery a no-op)."""
    events.process_webhook(delivery_id)


# acks_late + reject_on_worker_lost: a worker killed mid-write leaves its message to be delivered
# again; apply_decision, seeing its own task id on the `applying` row, resumes at once from what
# GitHub shows (never repeating a write blindly). The filesystem broker loses such a message, so
# the sweep below resumes those decisions too, once their heartbeat is old.
@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True)
def apply_decision_task(self, decision_id: int) -> None:
    """Apply one pending decision to GitHub; routed to the single-concurrency `github` queue.

    No automatic retry: a write that failed may have half-landed, so it is reported, not repeated.
    """
    decision = applying.apply_decision(decision_id, task_id=self.request.id or "")
    wait = (decision.not_before - timezone.now()).total_seconds() if decision.is_held() else 0
    if wait > 0:  # delivered before its undo window ended (clocks apart): sent again for then
        apply_decision_task.apply_async((decision_id,), countdown=wait)


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True)
def run_bisection_task(self, run_id: int) -> None:
    """Run one queued bisection on this worker's device queue (cpu or gpu).

    acks_late + reject_on_worker_lost: if the worker dies mid-run the message is
    delivered again and run_bisection, seeing its own task id on a "running" row,
    marks the run failed. No retries: the triager decides whether to run untrusted code again.
    """
    consumed = frozenset(self.app.amqp.queues.consume_from)  # this worker's -Q: whether an automatic run makes way
    bisecting.run_bisection(run_id, task_id=self.request.id or "", consumed=consumed)


@shared_task
def requeue_stuck_task() -> None:
    """End or send again work that is stuck (periodic, beat).

    Sent again: decisions, bisections and webhook deliveries whose message never reached a
    worker, and decisions left `applying` by a worker that died (resumed from GitHub's state).
    Ended with the reason: bisections running longer than any run can last (their worker died),
    and bisections or decisions that no worker of their queue took within QUEUE_WAIT_TIMEOUT_MINUTES.
    Re-checked: repros an older torch build reproduced, once a worker hosts a newer one (build_checks.py).
    Sent: automatic runs of authors' first reports that waited for the hourly budget (auto_bisect.py).
    Each task claims its row with a conditional UPDATE, so a message that was only slow makes
    the second run a no-op.
    """
    now = timezone.now()
    live = WorkerHeartbeat.objects.queues(now)
    bisecting.fail_stale_runs(now)
    bisecting.fail_unclaimed_runs(live, now)
    applying.fail_unclaimed(live, now)
    before = now - STUCK_AFTER
    for pk in TriageDecision.objects.stuck(before).values_list("pk", flat=True):
        apply_decision_task.delay(pk)
    for pk, device in BisectionRun.objects.stuck(before).values_list("pk", "device"):
        run_bisection_task.apply_async((pk,), queue=BisectionRun.QUEUES[device])
    for pk in WebhookDelivery.objects.stuck(before).values_list("pk", flat=True):
        process_webhook_task.delay(pk)
    # A worker reporting a newer torch build: re-run what an older one reproduced (budgeted, lowest priority).
    build_checks.queue_rechecks(now)
    # Authors' first reports that waited for the hourly budget: sent as it frees.
    auto_bisect.release_waiting(now)


@shared_task
def refresh_github_roles_task() -> None:
    """Re-read every GitHub-linked user's role from their memberships (beat, daily)."""
    counts = signin.refresh_github_roles()
    log.info("GitHub roles re-read: %s", counts)
