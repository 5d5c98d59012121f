"""Celery tasks: thin. Each takes ids (or a message), loads rows and calls domain code, then what follows
(triage/followups.py). Every task is named in dispatch.py, which is also the only place that sends one."""

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import DatabaseError
from django.utils import timezone

from rubric_app import dispatch
from rubric_app.github import applying, events, history, signin, sync
from rubric_app.runs import auto_bisect, build_checks, coordinator, runner, workers
from rubric_app.triage import followups, model_store

from .models import TriageDecision, WebhookDelivery, WorkerHeartbeat

log = logging.getLogger(__name__)

# Longer than a message normally waits in a queue; older pending work is sent again.
STUCK_AFTER = timedelta(minutes=15)


@shared_task
def sync_queue_task(full: bool = False) -> None:
    """Sync the queue from GitHub (beat runs it incrementally every SYNC_INTERVAL_MINUTES).

    A GitHubError propagates to the worker's log; the saved resume point and
    high-water mark make the next run continue where this one stopped.
    """
    sync.sync_queue(full=full, on_changed=followups.issues_changed)


@shared_task
def sync_history_task() -> None:
    """Backfill the repository's history for at most HISTORY_BUDGET_MINUTES (its cursor saved), or, once it is done,
    fetch what changed since the last run (beat, every HISTORY_INTERVAL_MINUTES); a run holding the claim makes this
    one a no-op."""
    history.sync_history(budget_s=settings.HISTORY_BUDGET_MINUTES * 60, on_changed=followups.issues_changed)


@shared_task
def train_label_model_task() -> None:
    """Train a labeler on the history and promote it when the gate finds it at least as good as the one in use
    (beat, weekly): what train_label_model --from-db does, recorded on /rubric/models either way."""
    try:
        model_store.train_from_history(trained_by="the weekly task", out=log.info)
    except model_store.TooLittleHistory as exc:
        log.info("no labeler trained this week: %s", exc)


# Safe to retry: the delivery is claimed and marked processed in the same transaction.
@shared_task(name=dispatch.PROCESS_WEBHOOK, autoretry_for=(DatabaseError,), retry_backoff=True, max_retries=5)
def process_webhook_task(delivery_id: int) -> None:
    """Apply one stored webhook delivery to the local mirror (a claim makes a redelivery a no-op)."""
    followups.issues_changed(*events.process_webhook(delivery_id))


# acks_late + reject_on_worker_lost: a worker killed mid-write leaves its message to be delivered
# again; apply_decision, seeing its own task id on the `applying` row, resumes at once from what
# GitHub shows (never repeating a write blindly). The filesystem broker loses such a message, so
# the sweep below resumes those decisions too, once their heartbeat is old.
@shared_task(name=dispatch.APPLY_DECISION, bind=True, acks_late=True, reject_on_worker_lost=True)
def apply_decision_task(self, decision_id: int) -> None:
    """Apply one pending decision to GitHub; routed to the single-concurrency `github` queue.

    No automatic retry: a write that failed may have half-landed, so it is reported, not repeated.
    """
    decision = applying.apply_decision(decision_id, task_id=self.request.id or "")
    wait = (decision.not_before - timezone.now()).total_seconds() if decision.is_held() else 0
    if wait > 0:  # delivered before its undo window ended (clocks apart): sent again for then
        dispatch.start_decision(decision_id, countdown=wait)
    followups.decision_applied(decision)


# A runner's task: it holds no database (runs/runner.py). acks_late + reject_on_worker_lost: a runner killed mid-run
# leaves the message to be delivered again, and the coordinator, seeing the attempt that claimed the run replaced,
# ends the run saying its runner died. No retries: the triager decides whether to run untrusted code again.
@shared_task(name=dispatch.RUN_JOB, bind=True, acks_late=True, reject_on_worker_lost=True)
def run_job_task(self, job: dict) -> None:
    """Run one bisection job on this runner's device, reporting to the coordinator as it goes."""
    consumed = frozenset(self.app.amqp.queues.consume_from)  # this worker's -Q: whether an automatic run makes way
    runner.run_job(
        job, message_id=self.request.id or "", runner=self.request.hostname or "", boot=workers.boot, consumed=consumed
    )


# Safe to retry: each report is applied by a conditional UPDATE on the run's status, token and claim.
@shared_task(name=dispatch.RECORD_REPORT, autoretry_for=(DatabaseError,), retry_backoff=True, max_retries=5)
def record_report_task(message: dict) -> None:
    """Record what a runner says about its job (the coordinator's; runs/coordinator.py), and what follows a result."""
    followups.runner_reported(message)


@shared_task(name=dispatch.RECORD_HEARTBEAT)
def record_heartbeat_task(beat: dict) -> None:
    """Record a runner's heartbeat (it holds no database to write it to)."""
    coordinator.record_heartbeat(beat)


@shared_task
def requeue_stuck_task() -> None:
    """End or send again work that is stuck (periodic, beat).

    Sent again: decisions, bisections and webhook deliveries whose message never reached a
    worker, and decisions left `applying` by a worker that died (resumed from GitHub's state).
    Ended with the reason: bisections running longer than any run can last (their runner died),
    and bisections or decisions that no worker of their queue took within QUEUE_WAIT_TIMEOUT_MINUTES.
    Re-checked: repros an older torch build reproduced, once a runner hosts a newer one (build_checks.py).
    Sent: automatic runs of authors' first reports that waited for the hourly budget (auto_bisect.py).
    Each claim is a conditional UPDATE, so a message that was only slow makes the second run a no-op.
    """
    now = timezone.now()
    live = WorkerHeartbeat.objects.queues(now)
    coordinator.fail_stale_runs(now)
    coordinator.fail_unclaimed_runs(live, now)
    applying.fail_unclaimed(live, now)
    before = now - STUCK_AFTER
    for pk in TriageDecision.objects.stuck(before).values_list("pk", flat=True):
        dispatch.start_decision(pk)
    coordinator.resend_stuck(before)
    for pk in WebhookDelivery.objects.stuck(before).values_list("pk", flat=True):
        dispatch.start_delivery(pk)
    # A runner reporting a newer torch build: re-run what an older one reproduced (budgeted, lowest priority).
    build_checks.queue_rechecks(now)
    # Authors' first reports that waited for the hourly budget: sent as it frees.
    auto_bisect.release_waiting(now)


@shared_task
def refresh_github_roles_task() -> None:
    """Re-read every GitHub-linked user's role from their memberships (beat, daily)."""
    counts = signin.refresh_github_roles()
    log.info("GitHub roles re-read: %s", counts)
