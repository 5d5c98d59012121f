"""Start a backend bisection of an issue's repro: a person's half of a bisection run (a runner runs it:
runner.py; the coordinator records what it reports: coordinator.py).

start_bisection() records a queued BisectionRun (the exact code) and sends its job to the device's queue after
commit (coordinator.start_run). Only a person with the run_bisection permission starts a run; automatic runs
(auto_bisect.py) are bounded by their own budgets.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied

from rubric_app import bisection
from rubric_app.bisection.builds import repro_hash
from rubric_app.models import BisectionRun
from rubric_app.runs import coordinator, repro_sources

QUEUES = BisectionRun.QUEUES


def queue_for(device: str) -> str:
    """The Celery queue whose workers serve device ("cpu" -> cpu, "cuda" or "both" -> gpu); ValueError for others."""
    try:
        return QUEUES[device]
    except KeyError:
        raise ValueError(f"unknown device {device!r}: choose cpu, cuda or both") from None


def start_bisection(
    *, issue, user, code: str, device: str, builds: list[str] | tuple[str, ...] = ("",)
) -> BisectionRun:
    """Record a queued BisectionRun with the exact code for each torch build asked for (a name of the workers'
    TORCH_BUILDS; "" for their first) and enqueue each on the device's queue after commit; return the first run.

    Several builds run the same repro on each: bisection.builds.compare() reads them together once they finish
    ("passes on 2.12.1, fails on 2.13.0" is a regression, R11). Raises PermissionDenied without
    rubric_app.run_bisection (checked here too: untrusted code must never run for someone without it) and
    ValueError for empty code, an unknown device or no build.
    """
    if user is None or not user.has_perm("rubric_app.run_bisection"):
        raise PermissionDenied("running a bisection needs the run_bisection permission")
    queue_for(device)  # an unknown device is refused before anything is recorded
    if not code.strip():
        raise ValueError("the repro is empty")
    if not builds:
        raise ValueError("choose at least one torch build")
    # Whose repro this is: another commenter's runs never conclude on their own (repro_sources.py).
    author, counts = repro_sources.standing(repro_sources.posted_repros(issue), code)
    runs = [
        BisectionRun.objects.create(
            issue=issue,
            requested_by=user,
            device=device,
            repro_code=code,
            repro_style=bisection.detect_style(code),
            repro_hash=repro_hash(code),
            build=build,
            repro_author=author,
            repro_counts=counts,
        )
        for build in dict.fromkeys(builds)
    ]
    for run in runs:
        coordinator.start_run(run)
    return runs[0]
