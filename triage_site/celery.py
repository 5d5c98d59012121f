import logging
import os
import sys

from celery import Celery
from celery.signals import worker_init, worker_ready, worker_shutdown, worker_shutting_down

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "triage_site.settings")

app = Celery("triage_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _refuse_runner_lanes(sender, **kwargs) -> None:
    """Before the pool forks: a worker of the dashboard's app holds the database, so it never takes a runner's lane
    (a bisection runner is the runner app's worker: triage_site/runner.py)."""
    if sender.app is not app:
        return
    from rubric_app.runs import workers

    try:
        workers.begin(list(sender.app.amqp.queues.consume_from))
    except workers.NotForThisWorker as exc:
        sys.exit(f"refused to start: {exc}")  # an exception here would only be logged, and the worker would go on


@worker_ready.connect
def _start_heartbeat(sender, **kwargs) -> None:
    """Record this worker's queues and liveness for the dashboard (rubric_app.runs.workers); the coordinator (the
    `default` queue) also starts the gateway, which reads what the runners send (rubric_app.runs.gateway)."""
    if sender.app is not app:
        return
    from rubric_app.runs import gateway, workers
    from rubric_app.vocabulary import COORDINATOR_QUEUE

    queues = [queue.name for queue in sender.task_consumer.queues]
    workers.start(sender.hostname, queues)
    if COORDINATOR_QUEUE in queues:
        gateway.start()
        logging.getLogger(__name__).info("the runner gateway reads the registered runners' reports")


@worker_ready.connect
def _stop_within_seconds_on_sigterm(sender, **kwargs) -> None:
    """SIGTERM is a cold shutdown here (what SIGQUIT does), so that a worker stops within seconds, beat included.

    Celery's SIGTERM waits for the running tasks to end: a bisection takes minutes, and systemd, an orchestrator or
    `make run`'s Ctrl-C would kill the worker outright after their grace period, leaving its run "running". Cold, the
    running task is stopped and its message goes back to the broker (acks_late); a bisection stopped so puts its
    run back in the queue (runs/runner.py), and a decision resumes from what GitHub shows (applying.py).
    """
    from celery.apps.worker import install_worker_term_hard_handler
    from celery.concurrency.prefork import TaskPool

    # Only a pool of processes can stop its running task (a solo worker, the tests', runs it in its own thread).
    if isinstance(sender.pool, TaskPool):
        install_worker_term_hard_handler(sender.controller, sig="SIGTERM")


@worker_shutting_down.connect
@worker_shutdown.connect
def _stop_heartbeat(sender, **kwargs) -> None:
    """As any worker of this process starts stopping (a cold shutdown too, which sends no worker_shutdown) and once it
    has: its heartbeat says it stopped (rubric_app.runs.workers), the gateway stops reading."""
    from rubric_app.runs import gateway, workers

    gateway.stop()
    workers.stop()
