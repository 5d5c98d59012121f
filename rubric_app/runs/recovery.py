"""Work a dead worker left, picked up within one heartbeat of a worker that holds the database noticing.

Every such worker (the coordinator, the github worker), when it starts and on each heartbeat (runs/workers.py):
- resumes the `applying` decisions whose holder is dead: on its own host, its pid is gone; elsewhere, no worker of its
  host has beaten within WORKER_HEARTBEAT_STALE_S. Resumed from what GitHub shows (applying.py never repeats a write
  blindly); each takeover is a conditional UPDATE on the holder, so one worker does it, once;
- ends *failed*, with the reason, the runs whose runner went silent (coordinator.fail_lost_runs; untrusted code runs
  again only when a person asks).
A github worker that starts also sends again every decision still pending (resend_pending): one held for its undo
window when the worker that had its message died is written when a worker comes back, not at the 15-minute sweep.
"""

from __future__ import annotations

import socket
from datetime import timedelta

from django.utils import timezone

from rubric_app import dispatch, processes
from rubric_app.models import TriageDecision, WorkerHeartbeat
from rubric_app.runs import coordinator


def recover_orphans(now=None) -> tuple[list[int], int]:
    """Take over the claims of dead processes and send the resumed decisions; returns (ids of the decisions resumed,
    runs ended)."""
    now = now or timezone.now()
    here = socket.gethostname()
    live_hosts = {name.rpartition("@")[2] for name in WorkerHeartbeat.objects.live(now).values_list("name", flat=True)}
    resumed = []
    applying = TriageDecision.objects.filter(status=TriageDecision.Status.APPLYING).exclude(worker="")
    for pk, worker in applying.values_list("pk", "worker"):
        if not processes.is_dead(worker, live_hosts, here):
            continue
        # An old heartbeat makes the decision abandoned: the task sent next resumes it (applying._claim).
        if TriageDecision.objects.filter(pk=pk, status=TriageDecision.Status.APPLYING, worker=worker).update(
            worker="", heartbeat_at=now - timedelta(days=1)
        ):
            resumed.append(pk)
            dispatch.start_decision(pk)
    return resumed, coordinator.fail_lost_runs(now)


def resend_pending(now=None) -> int:
    """Send again every pending decision (a github worker starting: the messages of a worker that died are lost or
    held until the broker's visibility timeout); each held one for what is left of its undo window. A copy is a
    no-op: the claim is a conditional UPDATE. Returns how many were sent."""
    now = now or timezone.now()
    pending = TriageDecision.objects.filter(status=TriageDecision.Status.PENDING).values_list("pk", "not_before")
    sent = 0
    for pk, not_before in pending:
        dispatch.start_decision(pk, countdown=max(0.0, (not_before - now).total_seconds()) if not_before else 0)
        sent += 1
    return sent
