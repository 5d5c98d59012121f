"""Start and run backend bisections for issues (the Django side of rubric_app.bisection).

start_bisection() records a queued BisectionRun (the exact code) and enqueues it
on the device's queue after commit; run_bisection() is what the Celery task
calls: claim, run the sandboxed harness writing progress to the row, store the
verdict, refresh the issue's suggestions. Only a person with the
run_bisection permission starts a run; the sync never does.
"""

from __future__ import annotations

import json
import logging
import os
import socket
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from . import bisection
from .models import BisectionRun

log = logging.getLogger(__name__)

QUEUES = {BisectionRun.Device.CPU: "cpu", BisectionRun.Device.CUDA: "gpu", BisectionRun.Device.BOTH: "gpu"}
# What a worker declaring BISECTION_DEVICE can run: a GPU box has a CPU too.
SERVES = {"cpu": {"cpu"}, "cuda": {"cuda", "both"}}


def queue_for(device: str) -> str:
    """The Celery queue whose workers serve device ("cpu" -> cpu, "cuda" or "both" -> gpu); ValueError for others."""
    try:
        return QUEUES[device]
    except KeyError:
        raise ValueError(f"unknown device {device!r}: choose cpu, cuda or both") from None


def limits() -> bisection.Limits:
    return bisection.Limits(timeout_s=settings.BISECTION_TIMEOUT_S, memory_mb=settings.BISECTION_MEMORY_MB)


def longest_run() -> timedelta:
    """An upper bound on one bisection: six modes plus four re-runs, each at most the timeout, plus slack."""
    return timedelta(seconds=10 * settings.BISECTION_TIMEOUT_S + 300)


def start_bisection(*, issue, user, code: str, device: str) -> BisectionRun:
    """Record a queued BisectionRun with the exact code and enqueue it on the device's queue; return the run.

    Raises PermissionDenied without rubric_app.run_bisection (checked here too:
    untrusted code must never run for someone without it) and ValueError for
    empty code or an unknown device.
    """
    if user is None or not user.has_perm("rubric_app.run_bisection"):
        raise PermissionDenied("running a bisection needs the run_bisection permission")
    queue = queue_for(device)
    if not code.strip():
        raise ValueError("the repro is empty")
    run = BisectionRun.objects.create(
        issue=issue, requested_by=user, device=device, repro_code=code, repro_style=bisection.detect_style(code)
    )
    from .tasks import run_bisection_task  # tasks imports this module

    run_bisection_task.apply_async_on_commit((run.pk,), queue=queue)
    return run


def fail_stale_runs() -> int:
    """Mark failed the runs left "running" by a worker that died; returns how many."""
    return BisectionRun.objects.filter(
        status=BisectionRun.Status.RUNNING, started_at__lt=timezone.now() - longest_run()
    ).update(
        status=BisectionRun.Status.FAILED, finished_at=timezone.now(),
        error="the worker running this bisection stopped before finishing; start it again",
    )


def run_bisection(run_id: int, *, redelivered: bool = False) -> BisectionRun:
    """Run a queued BisectionRun in the sandbox, writing progress to its row; return the run.

    The queued -> running claim is a conditional UPDATE: a second delivery of
    the same task finds the row claimed and does nothing, except that a
    redelivered message for a still "running" row means its worker died
    (acks_late): that run is marked failed rather than left running forever.
    """
    fail_stale_runs()
    worker = f"{socket.gethostname()}:{os.getpid()} ({settings.BISECTION_DEVICE})"
    claimed = BisectionRun.objects.filter(pk=run_id, status=BisectionRun.Status.QUEUED).update(
        status=BisectionRun.Status.RUNNING, started_at=timezone.now(), worker=worker
    )
    run = BisectionRun.objects.select_related("issue").get(pk=run_id)
    if not claimed:
        if redelivered and run.status == BisectionRun.Status.RUNNING:
            _finish(run, BisectionRun.Status.FAILED, error="the worker running this bisection died; start it again")
        return run
    if run.device not in SERVES.get(settings.BISECTION_DEVICE, ()):
        return _finish(run, BisectionRun.Status.FAILED,
                       error=f"this worker serves {settings.BISECTION_DEVICE}, the run asked for {run.device}")

    def progress(mode: str, results: list[dict]) -> None:
        run.current_mode, run.results = mode, capped_results(results)
        run.save(update_fields=["current_mode", "results"])

    try:
        # "both" bisects on CPU; on this GPU worker the harness re-runs an Inductor failure on cuda (R2.4).
        device = "cpu" if run.device == BisectionRun.Device.BOTH else run.device
        report = bisection.bisect(run.repro_code, device=device, style=run.repro_style, limits=limits(),
                                  on_progress=progress)
    except bisection.SandboxRefused as exc:
        # No isolation, no run: say why, and what isolation there was, on the run's page.
        run.sandbox_report = exc.report
        return _finish(run, BisectionRun.Status.FAILED, error=str(exc))
    except bisection.ForkServerError as exc:
        return _finish(run, BisectionRun.Status.FAILED, error=str(exc))
    run.results = capped_results(report.results)
    run.verdict_labels, run.verdict_summary = report.labels, report.summary
    run.torch_version, run.sandbox_report, run.log = report.torch_version, report.sandbox, report.log
    # The verdict feeds the rubric engine through Issue.as_issue_text(). One transaction: whoever
    # sees the run done (the issue page's poll) also sees the suggestions it produced.
    with transaction.atomic():
        _finish(run, BisectionRun.Status.DONE)
        run.issue.refresh_suggestions()
    return run


# The harness caps every field a child sends; this bounds the row whatever it holds, so no page
# that loads the results can be made slow by one run.
MAX_RESULTS_BYTES = 256 * 1024


def capped_results(results: list[dict]) -> list[dict]:
    """results as stored: unchanged if their JSON fits MAX_RESULTS_BYTES, else with messages and
    tracebacks cut (then dropped) until it does."""
    for cap in (2000, 500, 0):
        if len(json.dumps(results)) <= MAX_RESULTS_BYTES:
            return results
        results = [{**r, **{k: str(r[k])[:cap] for k in ("message", "traceback") if k in r}} for r in results]
    return results


FINISH_FIELDS = ["status", "error", "current_mode", "finished_at", "results", "verdict_labels", "verdict_summary",
                 "torch_version", "sandbox_report", "log"]


def _finish(run: BisectionRun, status: str, error: str = "") -> BisectionRun:
    run.status, run.error, run.current_mode, run.finished_at = status, error, "", timezone.now()
    run.save(update_fields=FINISH_FIELDS)
    return run
