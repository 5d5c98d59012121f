"""Which workers are alive: every worker beats, from a thread of its own, every WORKER_HEARTBEAT_S.

A worker holding the database (the coordinator, the GitHub writer) upserts its own WorkerHeartbeat row (name, queues,
boot, now) and takes over what a dead worker held (recovery.py). A registered runner (runs/runner.py), which holds no
database, sends its beat to the coordinator as a signed message (runner.heartbeat): what it serves, the runs it holds
and the jobs waiting in its queue; the coordinator records it for that runner only (coordinator.record_heartbeat). A
thread, not the worker's timer: a solo-pool worker's event loop is blocked for the whole of a bisection, and a busy
worker is alive. The dashboard reads the rows (one small query, no broker round trip) through
WorkerHeartbeat.objects.queues(); a killed worker's row simply goes stale. `boot` names this worker process's start,
made before its pool forks: a runner restarted under the same name beats with another boot, and the coordinator ends
the runs the old one held.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid

from django.conf import settings
from django.db import connection
from django.utils import timezone

from rubric_app.models import WorkerHeartbeat
from rubric_app.runs import jobs, recovery, runner
from rubric_app.vocabulary import GITHUB_QUEUE, RUNNER_QUEUES

log = logging.getLogger(__name__)

_stop = threading.Event()
_thread: threading.Thread | None = None
boot = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


class NotForThisWorker(RuntimeError):
    """A dashboard worker asked to take runner lanes: runners are the runner app's workers."""


def begin(queues) -> None:
    """At a dashboard worker's worker_init, before the pool forks: a new boot for this process. A worker of the
    dashboard's app holds the database and never runs a job: asked to read a runner's lane, it does not start."""
    global boot
    lanes = sorted(RUNNER_QUEUES.intersection(queues))
    if lanes:
        raise NotForThisWorker(
            f"this worker holds the database and would read the runner lanes {', '.join(lanes)}: a bisection runner "
            "is started with `celery -A triage_site.runner worker` (docs/deploy.md#runners)"
        )
    boot = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"


def begin_runner() -> None:
    """At a runner's worker_init, before its pool forks: a new boot, and its database sealed."""
    global boot
    boot = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    runner.seal_database()


def beat(name: str, queues: list[str]) -> None:
    """Record that dashboard worker `name`, consuming `queues`, is alive now, and take over what dead ones held."""
    WorkerHeartbeat.objects.record(WorkerHeartbeat(name=name, queues=sorted(queues), boot=boot, seen_at=timezone.now()))
    take_over_dead_claims()


def _loop(beat, last) -> None:
    while True:
        try:
            beat()
        except Exception:  # noqa: BLE001 - a database or broker hiccup must not kill the worker; the next beat retries
            log.warning("worker heartbeat failed", exc_info=True)
        finally:
            if not runner.sealed():
                connection.close()  # this thread's own connection: never left open between beats
        if _stop.wait(settings.WORKER_HEARTBEAT_S):
            break
    # Its last word, from this thread (never from the signal handler that stops the worker): it stopped.
    try:
        last()
    except Exception:  # noqa: BLE001 - at shutdown the row just goes stale instead
        log.warning("could not say this worker stopped", exc_info=True)
    finally:
        if not runner.sealed():
            connection.close()


def take_over_dead_claims() -> None:
    """Resume the decisions and end the runs whose worker died (recovery.py), at start and on each beat: a restarted
    worker picks up what its predecessor held within seconds, not at the next sweep."""
    resumed, ended = recovery.recover_orphans()
    if resumed or ended:
        log.warning("took over from dead workers: %d decision(s) resumed, %d bisection(s) ended", len(resumed), ended)


def start(name: str, queues: list[str]) -> None:
    """Start a dashboard worker's heartbeat thread (once); a github worker first sends the pending decisions again."""
    if _thread is not None:
        return
    if GITHUB_QUEUE in queues:
        try:
            recovery.resend_pending()
        finally:
            connection.close()
    _start(lambda: beat(name, list(queues)), lambda: WorkerHeartbeat.objects.filter(name=name).delete())


def start_runner(slots: int) -> None:
    """Start a runner's heartbeat thread (once): a signed beat to the coordinator every WORKER_HEARTBEAT_S."""
    if _thread is not None:
        return
    send = runner.sender()
    _start(
        lambda: send(jobs.HEARTBEAT, runner.heartbeat(boot=boot, slots=slots, active=held_runs())),
        lambda: send(jobs.HEARTBEAT, runner.heartbeat(boot=boot, slots=slots, active=[], stopped=True)),
    )


def held_runs() -> list[int]:
    """The runs this runner's worker holds now: the jobs its pool runs and the one it prefetched (the worker's main
    process keeps them, and this thread runs there)."""
    from celery.worker import state

    held = []
    for request in [*state.active_requests, *state.reserved_requests]:
        job = request.args[0] if request.args else None
        if isinstance(job, dict) and isinstance(job.get("run_id"), int):
            held.append(job["run_id"])
    return sorted(held)


def _start(beat, last) -> None:
    global _thread
    _stop.clear()
    _thread = threading.Thread(target=_loop, args=(beat, last), name="worker-heartbeat", daemon=True)
    _thread.start()


def stop() -> None:
    """Stop the heartbeat, which says so as its last beat: a dashboard worker removes its row, a runner's last beat
    says it stopped (the coordinator removes its row): a clean shutdown is not a dead worker to wait for. Called as
    the worker starts shutting down (a cold shutdown included: SIGTERM) and when it has; the second call is a no-op."""
    global _thread
    if _thread is None:
        return
    _stop.set()
    _thread.join(timeout=5)
    _thread = None
