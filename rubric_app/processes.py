"""Who holds a claim: this process as "host:pid", and whether the process holding one is gone.

A decision being applied (github/applying.py) and the history's backfill (github/history.py) record which process
holds them; runs/recovery.py takes over what a dead one held. Runs are held by runners, which have no database: the
coordinator tells theirs by their heartbeats instead (runs/coordinator.py).
"""

from __future__ import annotations

import os
import socket


def this_process() -> str:
    """This process as a claim records it: "host:pid"."""
    return f"{socket.gethostname()}:{os.getpid()}"


def holder(worker: str) -> tuple[str, int] | None:
    """(host, pid) of a claim ("host:pid", or "host:pid (cpu)"), or None when it names no process."""
    host, _, rest = worker.partition(" ")[0].rpartition(":")
    return (host, int(rest)) if host and rest.isdigit() else None


def is_dead(worker: str, live_hosts: set[str], here: str) -> bool:
    """Whether the process holding a claim is gone: on this host, its pid no longer exists; elsewhere, no worker
    of its host has beaten lately (a worker beats from a thread of its own, even mid-task)."""
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
