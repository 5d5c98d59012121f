import logging
import os

from celery import Celery
from celery.signals import worker_init, worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "triage_site.settings")

app = Celery("triage_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_init.connect
def _runner_holds_no_database(sender, **kwargs) -> None:
    """Before the pool forks: a worker that reads only the bisection queues is a runner, and its database is sealed
    (rubric_app.runs.runner): it may run on a host that holds nothing but the broker's URL."""
    from rubric_app.runs import workers

    if workers.begin(list(sender.app.amqp.queues.consume_from)):
        logging.getLogger(__name__).info("a bisection runner: no database, reports go to the coordinator")


@worker_ready.connect
def _start_heartbeat(sender, **kwargs) -> None:
    """Record this worker's queues and liveness for the dashboard (rubric_app.runs.workers)."""
    from rubric_app.runs import workers

    workers.start(sender.hostname, [queue.name for queue in sender.task_consumer.queues])


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


@worker_shutdown.connect
def _stop_heartbeat(**kwargs) -> None:
    from rubric_app.runs import workers

    workers.stop()
