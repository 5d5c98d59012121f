"""Start and run backend bisections for issues (Django side of rubric_app.bisection).

(Contract laid by the foundation; the bisection issue implements it.)
"""

from __future__ import annotations


def start_bisection(*, issue, user, code: str, device: str):
    """Record a queued BisectionRun and enqueue it on the device's queue; returns the run."""
    raise NotImplementedError


def run_bisection(run_id: int):
    """Run a queued BisectionRun in the sandbox, writing progress to its row."""
    raise NotImplementedError
