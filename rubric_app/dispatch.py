"""Starting work: the one place that sends a message to a worker, and the one place each task is named.

Every kind of work has one function that starts it, after the caller's transaction commits (a worker must never
look for a row that is not there yet): a decision (start_decision), a webhook delivery (start_delivery), giving queued
bisections to runners (start_assignment, on the coordinator). Two brokers (docs/deploy.md#runners): the dashboard's
(CELERY_BROKER_URL), which only its own processes reach, and the runners' (RUNNER_BROKER_URL), where each runner
reaches its own queues only. The coordinator sends a runner its job there (send_job); a runner sends its signed
reports and heartbeats to its reports queue (report), which the coordinator's gateway reads and, when authentic,
forwards to the coordinator's tasks on the dashboard's broker (forward). Tasks are sent by name: this module imports
no task, so the workflows that start work never import tasks.py (which imports them). `tests/test_dispatch.py`
checks that nothing else calls send_task, apply_async, delay or publish.
"""

from __future__ import annotations

import functools
import logging

from celery import Celery, current_app
from django.conf import settings
from django.db import transaction
from kombu import Exchange, Queue

from rubric_app.vocabulary import COORDINATOR_QUEUE, GITHUB_QUEUE

log = logging.getLogger(__name__)

APPLY_DECISION = "rubric_app.tasks.apply_decision_task"
PROCESS_WEBHOOK = "rubric_app.tasks.process_webhook_task"
# The coordinator's tasks (the `default` queue): giving queued runs to runners, and what a runner said (a report on
# its job, its heartbeat), forwarded by the gateway once authenticated.
ASSIGN_RUNS = "rubric_app.tasks.assign_runs_task"
PROVISION_RUNNER = "rubric_app.tasks.provision_runner_task"
RECORD_REPORT = "rubric_app.tasks.record_report_task"
RECORD_HEARTBEAT = "rubric_app.tasks.record_heartbeat_task"
# A runner's one task (triage_site/runner.py): a self-contained job (runs/jobs.py), on that runner's jobs queue. The
# dashboard's own workers do not know it.
RUN_JOB = "rubric_app.runner.run_job"


def _after_commit(name: str, args: tuple, **options) -> None:
    transaction.on_commit(lambda: current_app.send_task(name, args=args, **options))


def start_decision(decision_id: int, *, countdown: float = 0) -> None:
    """Send a decision to the `github` worker once this transaction commits; countdown: held that long (undo)."""
    _after_commit(APPLY_DECISION, (decision_id,), queue=GITHUB_QUEUE, countdown=countdown or None)


def start_delivery(delivery_id: int) -> None:
    """Send a stored webhook delivery to be applied to the mirror once this transaction commits."""
    _after_commit(PROCESS_WEBHOOK, (delivery_id,), queue=COORDINATOR_QUEUE)


def start_assignment() -> None:
    """Ask the coordinator, once this transaction commits, to give the queued runs to idle runners
    (runs/assignment.py): a run queued by a page or a sync starts without waiting for a runner's next beat."""
    _after_commit(ASSIGN_RUNS, (), queue=COORDINATOR_QUEUE)


def start_provisioning(runner_id: int) -> None:
    """Ask the coordinator, once this transaction commits, to make (or reset) a registered runner's broker user."""
    _after_commit(PROVISION_RUNNER, (runner_id,), queue=COORDINATOR_QUEUE)


@functools.cache
def _runners_broker() -> Celery:
    """The coordinator's way onto the runners' broker (RUNNER_BROKER_URL): it only sends jobs there."""
    app = Celery("to-runners", broker=settings.RUNNER_BROKER_URL, set_as_current=False)
    app.conf.update(
        broker_transport_options=settings.RUNNER_BROKER_TRANSPORT_OPTIONS,
        broker_connection_retry_on_startup=True,
        task_ignore_result=True,
        task_serializer="json",
    )
    return app


def send_job(job: dict, *, queue: str, message_id: str, expires: float) -> None:
    """Send a bisection job (runs/jobs.Job.as_message()) to the runner whose jobs queue is `queue`, now (the caller
    sends it on commit). message_id: the Celery task id, chosen by the coordinator: the runner's reports name it, so
    that the coordinator tells the message that claimed a run from a copy of it. expires: seconds after which the
    runner discards it unrun (the coordinator has given the run to another runner by then)."""
    # The default exchange routes by the queue's name alone: the job lands in the runner's queue whether or not the
    # runner has declared it yet (a named exchange with no binding would drop it).
    destination = Queue(queue, Exchange(""), routing_key=queue)
    _runners_broker().send_task(RUN_JOB, args=(job,), queue=destination, task_id=message_id, expires=expires)


def report(message: dict, *, queue: str) -> None:
    """A runner's signed message (runs/jobs.Envelope: a report on its job, or its heartbeat) to its reports queue,
    sent now, from the runner (its broker user may write nowhere else)."""
    with current_app.producer_or_acquire() as producer:
        producer.publish(message, exchange="", routing_key=queue, serializer="json", retry=True)


def forward(task: str, runner_id: int, body: dict) -> None:
    """What the gateway authenticated (runs/gateway.py), to the coordinator's task `task` (RECORD_REPORT or
    RECORD_HEARTBEAT) on the dashboard's broker, sent now, naming the registered runner that signed it."""
    current_app.send_task(task, args=(runner_id, body), queue=COORDINATOR_QUEUE)


def waiting(queue: str) -> int:
    """How many messages wait in `queue` (none taken yet) on this process's broker: on a runner, the jobs the
    coordinator gave it that it has not taken."""
    with current_app.connection_for_read() as connection:
        try:
            return connection.default_channel.queue_declare(queue=queue, passive=True).message_count
        except connection.channel_errors:  # a queue nobody ever sent to does not exist yet
            return 0
