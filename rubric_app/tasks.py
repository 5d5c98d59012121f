"""Celery tasks: thin. Each takes ids (or a message), loads rows and calls domain code, then what follows
(triage/followups.py). Every task is named in dispatch.py, which is also the only place that sends one."""

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from rubric_app import dispatch
from rubric_app.github import applying, events, history, signin, sync
from rubric_app.runs import assignment, auto_bisect, build_checks, coordinator, registration
from rubric_app.triage import followups, model_store

from .models import Runner, TriageDecision, WebhookDelivery, WorkerHeartbeat

log = logging.getLogger(__name__)


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


@shared_task(name=dispatch.ASSIGN_RUNS, autoretry_for=(DatabaseError,), retry_backoff=True, max_retries=5)
def assign_runs_task() -> None:
    """Give the queued runs to idle runners (runs/assignment.py), each job sent on commit."""
    assignment.assign()


# Safe to retry: each report is applied by a conditional UPDATE on the run's assignment, status and claim. The gateway
# sends only what the runner named by runner_id signed (runs/gateway.py).
@shared_task(name=dispatch.RECORD_REPORT, autoretry_for=(DatabaseError,), retry_backoff=True, max_retries=5)
def record_report_task(runner_id: int, report: dict) -> None:
    """Record what a registered runner says about its job (runs/coordinator.py), what follows a result, and give the
    queued runs to a runner this one freed."""
    runner = Runner.objects.active().filter(pk=runner_id).first()
    if runner is None:
        log.warning("refused a report of runner %s: no such registered runner (revoked since?)", runner_id)
        return
    with transaction.atomic():
        run = coordinator.record(runner, report)
        if run is not None:
            followups.run_finished(run)
    assignment.assign()


@shared_task(name=dispatch.RECORD_HEARTBEAT)
def record_heartbeat_task(runner_id: int, heartbeat: dict) -> None:
    """Record a registered runner's heartbeat (it holds no database to write it to), and give it work."""
    runner = Runner.objects.active().filter(pk=runner_id).first()
    if runner is not None and isinstance(heartbeat, dict) and isinstance(heartbeat.get("sent_at"), float):
        coordinator.record_heartbeat(runner, heartbeat.get("beat"), sent_at=heartbeat["sent_at"])


@shared_task(name=dispatch.PROVISION_RUNNER)
def provision_runner_task(runner_id: int) -> None:
    """Make a registered runner's broker user, with its current secret (RUNNER_BROKER_ACL=manage; runs/broker.py)."""
    runner = Runner.objects.filter(pk=runner_id).first()
    if runner is not None:
        registration.provision(runner)


@shared_task
def requeue_stuck_task() -> None:
    """End or send again work that is stuck (periodic, beat, every SWEEP_MINUTES).

    Sent again: decisions and webhook deliveries still waiting RESEND_AFTER_S after they were due (their message
    vanished, or waits behind others: a copy is a no-op, each claim being a conditional UPDATE), and decisions left
    `applying` by a worker that died (resumed from GitHub's state). Given again: runs whose runner went silent before
    starting them; every queued run a runner can take. Ended with the reason: bisections running longer than any run
    can last (their runner died), and bisections or decisions that no worker of their queue took within
    QUEUE_WAIT_TIMEOUT_MINUTES. Re-checked: repros an older torch build reproduced, once a runner hosts a newer one
    (build_checks.py). Sent: automatic runs of authors' first reports that waited for the hourly budget
    (auto_bisect.py). The runners' broker users put back where the broker lost them.
    """
    now = timezone.now()
    live = WorkerHeartbeat.objects.queues(now)
    coordinator.fail_stale_runs(now)
    coordinator.fail_unclaimed_runs(live, now)
    applying.fail_unclaimed(live, now)
    before = now - timedelta(seconds=settings.RESEND_AFTER_S)
    # A decision being written beats as it goes: one applying and silent longer than a GitHub call can take lost its
    # worker.
    abandoned = TriageDecision.objects.abandoned(now - applying.HEARTBEAT_STALE_AFTER)
    for pk in (TriageDecision.objects.due(before) | abandoned).values_list("pk", flat=True):
        dispatch.start_decision(pk)
    for pk in WebhookDelivery.objects.stuck(before).values_list("pk", flat=True):
        dispatch.start_delivery(pk)
    coordinator.fail_lost_runs(now)
    # A runner reporting a newer torch build: re-run what an older one reproduced (budgeted, lowest priority).
    build_checks.queue_rechecks(now)
    # Authors' first reports that waited for the hourly budget: sent as it frees.
    auto_bisect.release_waiting(now)
    assignment.assign(now)
    registration.provision_missing()


@shared_task
def refresh_github_roles_task() -> None:
    """Re-read every GitHub-linked user's role from their memberships (beat, daily)."""
    counts = signin.refresh_github_roles()
    log.info("GitHub roles re-read: %s", counts)
