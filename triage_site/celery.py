import os

from celery import Celery
from celery.signals import worker_ready, worker_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "triage_site.settings")

app = Celery("triage_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def _start_heartbeat(sender, **kwargs) -> None:
    """Record this worker's queues and liveness for the dashboard (rubric_app.runs.workers)."""
    from rubric_app.runs import workers

    workers.start(sender.hostname, [queue.name for queue in sender.task_consumer.queues])


@worker_shutdown.connect
def _stop_heartbeat(**kwargs) -> None:
    from rubric_app.runs import workers

    workers.stop()
