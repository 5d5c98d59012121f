"""The bisection runner's Celery app: `celery -A triage_site.runner worker` (docs/deploy.md#runners).

A runner is a Celery worker of this app, not of the dashboard's (triage_site/celery.py): it connects to the runners'
broker only (RUNNER_BROKER_URL, as its own broker user), consumes its own job queue only (runner.<RUNNER_NAME>.jobs),
knows one task (running a job) and signs what it sends with its RUNNER_SECRET (rubric_app/runs/runner.py). It takes
no remote control and sends no events: its broker user may not touch a channel, and nothing on the broker can
reconfigure it. It refuses to start holding anything it does not need (a database URL, SECRET_KEY, a GitHub
credential, the privileged broker's URL) and seals Django's database before its pool forks.
"""

import logging
import os
import sys
from functools import cached_property

from celery import Celery
from celery.app.registry import TaskRegistry
from celery.apps.worker import Worker
from celery.signals import worker_init, worker_ready
from kombu import Exchange, Queue

from rubric_app.dispatch import RUN_JOB

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "triage_site.settings")

log = logging.getLogger(__name__)


class RunnerWorker(Worker):
    """A worker that never gossips, mingles or sends events, whatever its command line says: those travel on broker
    channels a runner's user may not use, and would let runners reach each other."""

    def __init__(self, *args, **kwargs):
        kwargs.update(without_gossip=True, without_mingle=True, without_heartbeat=True, task_events=False)
        super().__init__(*args, **kwargs)


class RunnerCelery(Celery):
    @cached_property
    def Worker(self):  # noqa: N802 - Celery's name
        return self.subclass_with_self(RunnerWorker)


class OneTask(TaskRegistry):
    """The runner's task registry: its one task, and no other name, whoever registers it (the dashboard's shared
    tasks, Celery's built-ins such as starmap or chord_unlock): a message naming anything else is refused unrun."""

    def __setitem__(self, name, task) -> None:
        if name == RUN_JOB:
            super().__setitem__(name, task)


def _config() -> dict:
    from django.conf import settings

    from rubric_app.runs import broker

    name = settings.RUNNER_NAME or "unregistered"
    queue = broker.jobs_queue(name)
    return {
        "broker_url": settings.RUNNER_BROKER_URL,
        "broker_transport_options": broker.transport_options(name),
        "broker_connection_retry_on_startup": True,
        "task_queues": [Queue(queue, Exchange(queue), routing_key=queue)],
        "task_default_queue": queue,
        "task_default_exchange": queue,
        "task_default_routing_key": queue,
        "task_ignore_result": True,
        "worker_enable_remote_control": False,
        "worker_send_task_events": False,
        "worker_prefetch_multiplier": 1,
        "accept_content": ["json"],
        "task_serializer": "json",
    }


# Not the current app where it is merely imported (a test, the dashboard): only its own worker makes it so (below).
app = RunnerCelery("runner", set_as_current=False, tasks=OneTask())
app.conf.update(_config())


@app.task(name=RUN_JOB, bind=True, acks_late=True, reject_on_worker_lost=True)
def run_job_task(self, job: dict) -> None:
    """Run one bisection job on this runner's device, reporting to the coordinator as it goes.

    acks_late + reject_on_worker_lost: a runner killed mid-run leaves the message to be delivered again, and the
    coordinator, seeing the attempt that claimed the run replaced, ends the run saying its runner died. No retries: a
    triager decides whether to run untrusted code again."""
    from rubric_app.runs import runner, workers

    if not runner.sealed():
        # Only a runner's worker seals its database (below); a process holding one never runs a job, whoever sent it.
        log.error("refused to run a job: this process holds a database, so it is no runner")
        return
    runner.run_job(job, message_id=self.request.id or "", boot=workers.boot)


@worker_init.connect
def _refuse_what_a_runner_must_not_hold(sender, **kwargs) -> None:
    """Before the pool forks: no secret it does not need, its database sealed, one task known."""
    if sender.app is not app:
        return
    from rubric_app.runs import runner, workers

    try:
        runner.refuse_secrets(os.environ)
    except runner.HoldsSecrets as exc:
        sys.exit(f"refused to start: {exc}")  # an exception here would only be logged, and the worker would go on
    workers.begin_runner()
    # Every thread of this process (the heartbeat's too) sends on the runners' broker, never on another app's.
    app.set_default()
    app.set_current()
    log.info("runner %s: its job queue only, reports signed, no database", runner.name())


@worker_ready.connect
def _start_heartbeat(sender, **kwargs) -> None:
    if sender.app is not app:
        return
    from rubric_app.runs import workers

    workers.start_runner(sender.controller.concurrency)
