"""Work claimed by a worker that died, picked up within one heartbeat of another worker noticing.

A decision being applied and a bisection being run each record which process holds them ("host:pid"). Every
worker, when it starts and on each heartbeat (rubric_app/runs/workers.py), looks at the `applying` decisions and
`running` runs: a holder on its own host whose process is gone, or on a host from which no worker has beaten
within WORKER_HEARTBEAT_STALE_S, is dead. Its decision is resumed from what GitHub shows (applying.py never
repeats a write blindly), and its run ends *failed* with the reason (untrusted code runs again only when a
person asks). Each takeover is a conditional UPDATE on the holder, so one worker does it, once. Without this,
the 5-minute sweep and a decision's 5-minute heartbeat were the only way back: a triager watched a restarted
worker's decision stay `applying` for ten minutes.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

from django.utils import timezone

from rubric_app.models import BisectionRun, TriageDecision, WorkerHeartbeat


def this_process() -> str:
    """This process as a claim records it: "host:pid"."""
    return f"{socket.gethostname()}:{os.getpid()}"


def holder(worker: str) -> tuple[str, int] | None:
    """(host, pid) of a claim ("host:pid", or "host:pid (cpu)" on a run), or None when it names no process."""
    host, _, rest = worker.partition(" ")[0].rpartition(":")
    return (host, int(rest)) if host and rest.isdigit() else None


def is_dead(worker: str, live_hosts: set[str], here: str) -> bool:
    """Whether the process holding a claim is gone: on this host, its pid no longer exists; elsewhere, no worker
    of its host has beaten lately (a worker beats from a thread of its own, even mid-run)."""
    found = holder(worker)
    if found is None:
        return False
    host, pid = found
    if host != here:
        return host not in live_hosts
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: alive
        return False
    return False


def recover_orphans(now=None) -> tuple[list[int], int]:
    """Take over the claims of dead processes; returns (ids of the decisions to resume, runs ended).

    The caller enqueues the decisions (workers.py): this module only decides and records.
    """
    now = now or timezone.now()
    here = socket.gethostname()
    live_hosts = {name.rpartition("@")[2] for name in WorkerHeartbeat.objects.live(now).values_list("name", flat=True)}
    resumed = []
    applying = TriageDecision.objects.filter(status=TriageDecision.Status.APPLYING).exclude(worker="")
    for pk, worker in applying.values_list("pk", "worker"):
        if not is_dead(worker, live_hosts, here):
            continue
        # An old heartbeat makes the decision abandoned: the task sent next resumes it (applying._claim).
        if TriageDecision.objects.filter(pk=pk, status=TriageDecision.Status.APPLYING, worker=worker).update(
            worker="", heartbeat_at=now - timedelta(days=1)
        ):
            resumed.append(pk)
    ended = 0
    running = BisectionRun.objects.filter(status=BisectionRun.Status.RUNNING).exclude(worker="")
    for pk, worker in running.values_list("pk", "worker"):
        if is_dead(worker, live_hosts, here):
            ended += BisectionRun.objects.filter(pk=pk, status=BisectionRun.Status.RUNNING, worker=worker).update(
                status=BisectionRun.Status.FAILED,
                finished_at=now,
                current_mode="",
                error=f"The worker running this bisection ({worker}) died mid-run (killed, or out of memory); "
                "start it again.",
            )
    return resumed, ended
