"""Which Celery queues have a live worker: each worker writes its own heartbeat row.

A worker process starts a daemon thread when it is ready (triage_site/celery.py connects the
signals) that upserts a WorkerHeartbeat (name, queues, BISECTION_DEVICE, torch builds, now) every
WORKER_HEARTBEAT_S, and deletes it on a clean shutdown. A thread, not the worker's timer: a
solo-pool worker's event loop is blocked for the whole of a bisection, and a busy worker is alive.
The dashboard reads the rows (one small query, no broker round trip) through
WorkerHeartbeat.objects.queues(); a killed worker's row simply goes stale. On each beat the worker also takes
over what a dead worker held (recovery.py).
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import connection
from django.utils import timezone

from rubric_app.github import recovery
from rubric_app.models import WorkerHeartbeat
from rubric_app.runs import bisecting, hardware
from rubric_app.tasks import apply_decision_task
from rubric_app.vocabulary import BISECTION_QUEUES

log = logging.getLogger(__name__)

_stop = threading.Event()
_thread: threading.Thread | None = None
_name = ""


def beat(name: str, queues: list[str]) -> None:
    """Record that worker `name`, consuming `queues`, is alive now.

    One INSERT ... ON CONFLICT statement, no transaction around a read and a write: a periodic
    writer must never hold a lock while it asks for another (the test suite truncates tables).
    """
    # A worker that runs bisections says which torch builds it hosts, and their versions (re-read on each beat: a
    # nightly upgraded in place shows up, and build_checks.py re-runs the open issues' repros on it).
    runs_bisections = any(not served.isdisjoint(queues) for served in BISECTION_QUEUES.values())
    hosted = bisecting.hosted_versions() if runs_bisections else {}
    row = WorkerHeartbeat(
        name=name,
        queues=sorted(queues),
        device=settings.BISECTION_DEVICE,
        builds=hosted,
        # Its CPU's ISA and its GPU: a report naming hardware this machine lacks is not fixed by its pass (#36).
        hardware=hardware.this_machine() if runs_bisections else {},
        seen_at=timezone.now(),
    )
    WorkerHeartbeat.objects.bulk_create(
        [row],
        update_conflicts=True,
        unique_fields=["name"],
        update_fields=["queues", "device", "builds", "hardware", "seen_at"],
    )


def _loop(name: str, queues: list[str]) -> None:
    while True:
        try:
            beat(name, queues)
            take_over_dead_claims()
        except Exception:  # noqa: BLE001 - a database hiccup must not kill the worker; the next beat retries
            log.warning("worker heartbeat failed", exc_info=True)
        finally:
            connection.close()  # this thread's own connection: never left open between beats
        if _stop.wait(settings.WORKER_HEARTBEAT_S):
            return


def take_over_dead_claims() -> None:
    """Resume the decisions and end the runs whose worker died (rubric_app/github/recovery.py), at start and on each
    beat: a restarted worker picks up what its predecessor held within seconds, not at the next sweep."""
    resumed, ended = recovery.recover_orphans()
    for pk in resumed:
        apply_decision_task.delay(pk)
    if resumed or ended:
        log.warning("took over from dead workers: %d decision(s) resumed, %d bisection(s) ended", len(resumed), ended)


def start(name: str, queues: list[str]) -> None:
    """Start this process's heartbeat thread (once)."""
    global _thread, _name
    if _thread is not None:
        return
    _name = name
    _stop.clear()
    _thread = threading.Thread(target=_loop, args=(name, list(queues)), name="worker-heartbeat", daemon=True)
    _thread.start()


def stop() -> None:
    """Stop the heartbeat and remove this worker's row: a clean shutdown is not a dead worker to wait for."""
    global _thread
    if _thread is None:
        return
    _stop.set()
    _thread.join(timeout=10)
    _thread = None
    try:
        WorkerHeartbeat.objects.filter(name=_name).delete()
    except Exception:  # noqa: BLE001 - at shutdown the row just goes stale instead
        log.warning("could not remove the worker heartbeat", exc_info=True)
    finally:
        connection.close()
