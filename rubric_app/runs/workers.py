"""Which Celery queues have a live worker: every worker beats, from a thread of its own, every WORKER_HEARTBEAT_S.

A worker holding the database upserts its own WorkerHeartbeat row (name, queues, BISECTION_DEVICE, torch builds,
hardware, boot, now) and takes over what a dead worker held (recovery.py); a runner (runs/runner.py), which holds no
database, sends the same beat to the coordinator as a message (coordinator.record_heartbeat). A thread, not the
worker's timer: a solo-pool worker's event loop is blocked for the whole of a bisection, and a busy worker is alive.
The dashboard reads the rows (one small query, no broker round trip) through WorkerHeartbeat.objects.queues(); a
killed worker's row simply goes stale. `boot` names this worker process's start, made before its pool forks: a
runner restarted under the same name beats with another boot, and the coordinator ends the runs the old one held.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid

from django.conf import settings
from django.db import connection
from django.utils import timezone

from rubric_app import dispatch
from rubric_app.models import WorkerHeartbeat
from rubric_app.runs import hardware, recovery, runner
from rubric_app.vocabulary import GITHUB_QUEUE, RUNNER_QUEUES

log = logging.getLogger(__name__)

_stop = threading.Event()
_thread: threading.Thread | None = None
_name = ""
_holds_database = True
boot = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


def begin(queues) -> bool:
    """At worker_init, before the pool forks: a new boot for this process, and a runner's database sealed. Returns
    whether this worker is a runner."""
    global boot, _holds_database
    boot = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    _holds_database = not runner.is_runner(queues)
    if not _holds_database:
        runner.seal_database()
    return not _holds_database


def payload(name: str, queues: list[str]) -> dict:
    """What a beat says of this worker. One that runs bisections says which torch builds it hosts, and their versions
    (re-read on each beat: a nightly upgraded in place shows up, and build_checks.py re-runs the open issues' repros
    on it), and its CPU's ISA and its GPU (a report naming hardware this machine lacks is not fixed by its pass)."""
    runs_bisections = not RUNNER_QUEUES.isdisjoint(queues)
    return {
        "name": name,
        "queues": sorted(queues),
        "device": settings.BISECTION_DEVICE,
        "builds": runner.hosted_versions() if runs_bisections else {},
        "hardware": hardware.this_machine() if runs_bisections else {},
        "boot": boot,
    }


def beat(name: str, queues: list[str]) -> None:
    """Record that worker `name`, consuming `queues`, is alive now: its row, or (a runner) a message."""
    beat_ = payload(name, queues)
    if not _holds_database:
        dispatch.heartbeat(beat_)
        return
    WorkerHeartbeat.objects.record(WorkerHeartbeat(**beat_, seen_at=timezone.now()))


def _loop(name: str, queues: list[str]) -> None:
    while True:
        try:
            beat(name, queues)
            if _holds_database:
                take_over_dead_claims()
        except Exception:  # noqa: BLE001 - a database or broker hiccup must not kill the worker; the next beat retries
            log.warning("worker heartbeat failed", exc_info=True)
        finally:
            if _holds_database:
                connection.close()  # this thread's own connection: never left open between beats
        if _stop.wait(settings.WORKER_HEARTBEAT_S):
            return


def take_over_dead_claims() -> None:
    """Resume the decisions and end the runs whose worker died (recovery.py), at start and on each beat: a restarted
    worker picks up what its predecessor held within seconds, not at the next sweep."""
    resumed, ended = recovery.recover_orphans()
    if resumed or ended:
        log.warning("took over from dead workers: %d decision(s) resumed, %d bisection(s) ended", len(resumed), ended)


def start(name: str, queues: list[str]) -> None:
    """Start this process's heartbeat thread (once); a github worker first sends the pending decisions again."""
    global _thread, _name
    if _thread is not None:
        return
    _name = name
    if _holds_database and GITHUB_QUEUE in queues:
        try:
            recovery.resend_pending()
        finally:
            connection.close()
    _stop.clear()
    _thread = threading.Thread(target=_loop, args=(name, list(queues)), name="worker-heartbeat", daemon=True)
    _thread.start()


def stop() -> None:
    """Stop the heartbeat and remove this worker's row: a clean shutdown is not a dead worker to wait for. (A runner
    holds no database: its last beat says it stopped, and the coordinator removes the row.)"""
    global _thread
    if _thread is None:
        return
    _stop.set()
    _thread.join(timeout=10)
    _thread = None
    if not _holds_database:
        try:
            dispatch.heartbeat({"name": _name, "boot": boot, "stopped": True})
        except Exception:  # noqa: BLE001 - at shutdown the row just goes stale instead
            log.warning("could not say this runner stopped", exc_info=True)
        return
    try:
        WorkerHeartbeat.objects.filter(name=_name).delete()
    except Exception:  # noqa: BLE001 - at shutdown the row just goes stale instead
        log.warning("could not remove the worker heartbeat", exc_info=True)
    finally:
        connection.close()
