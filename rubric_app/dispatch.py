"""Starting work: the one place that sends a Celery message, and the one place each task is named.

Every kind of work has one function that starts it, after the caller's transaction commits (a worker must never
look for a row that is not there yet): a decision (start_decision), a webhook delivery (start_delivery) and a job to
a bisection runner (start_job; runs/coordinator.start_run builds it from a run). A runner holds no database, so what
it sends back (report, heartbeat) goes at once, to the coordinator on the `default` queue. Tasks are sent by name:
this module imports no task, so the workflows that start work never import tasks.py (which imports them).
`tests/test_dispatch.py` checks that nothing else calls send_task, apply_async or delay.
"""

from __future__ import annotations

import logging

from celery import current_app
from django.db import transaction

from rubric_app.vocabulary import COORDINATOR_QUEUE, GITHUB_QUEUE

log = logging.getLogger(__name__)

APPLY_DECISION = "rubric_app.tasks.apply_decision_task"
PROCESS_WEBHOOK = "rubric_app.tasks.process_webhook_task"
# A runner's task: one self-contained job (runs/jobs.py), on a bisection queue (vocabulary.BISECTION_QUEUES).
RUN_JOB = "rubric_app.tasks.run_job_task"
# The coordinator's tasks (the `default` queue): what a runner says about a job, and that it is alive.
RECORD_REPORT = "rubric_app.tasks.record_report_task"
RECORD_HEARTBEAT = "rubric_app.tasks.record_heartbeat_task"


def _after_commit(name: str, args: tuple, **options) -> None:
    transaction.on_commit(lambda: current_app.send_task(name, args=args, **options))


def start_decision(decision_id: int, *, countdown: float = 0) -> None:
    """Send a decision to the `github` worker once this transaction commits; countdown: held that long (undo)."""
    _after_commit(APPLY_DECISION, (decision_id,), queue=GITHUB_QUEUE, countdown=countdown or None)


def start_delivery(delivery_id: int) -> None:
    """Send a stored webhook delivery to be applied to the mirror once this transaction commits."""
    _after_commit(PROCESS_WEBHOOK, (delivery_id,), queue=COORDINATOR_QUEUE)


def start_job(job: dict, *, queue: str, message_id: str) -> None:
    """Send a bisection job (runs/jobs.Job.as_message()) to a runner of `queue` once this transaction commits.

    message_id: the Celery task id, chosen by the coordinator: the runner's reports name it, so that the coordinator
    tells the message that claimed a run from a copy of it (and can stop that copy: cancel_job)."""
    _after_commit(RUN_JOB, (job,), queue=queue, task_id=message_id)


def cancel_job(message_id: str) -> None:
    """Stop a job's message wherever it is: discarded when it arrives, its process ended when it runs (Celery's
    revoke, broadcast to every worker). For a copy of a job the coordinator refused: it would run for nothing."""
    try:
        current_app.control.revoke(message_id, terminate=True)
    except Exception:  # noqa: BLE001 - best effort: its reports are refused anyway
        log.warning("could not revoke job message %s", message_id, exc_info=True)


def report(message: dict) -> None:
    """A runner's word on its job (runs/jobs.py: started, progress, result, failed, made way, put back), sent now."""
    current_app.send_task(RECORD_REPORT, args=(message,), queue=COORDINATOR_QUEUE)


def heartbeat(beat: dict) -> None:
    """A runner's heartbeat (runs/workers.py), sent now; one older than a beat's staleness is worth nothing."""
    current_app.send_task(RECORD_HEARTBEAT, args=(beat,), queue=COORDINATOR_QUEUE)


def waiting(queue: str) -> int:
    """How many messages wait in `queue` on the broker (none taken yet): whether a person's run waits for a runner."""
    with current_app.connection_for_read() as connection:
        try:
            return connection.default_channel.queue_declare(queue=queue, passive=True).message_count
        except connection.channel_errors:  # a queue nobody ever sent to does not exist yet
            return 0
