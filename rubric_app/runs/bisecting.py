"""Running a bisection on a worker: the worker half of a bisection run (the web half is bisect_runs.py).

run_bisection is what the Celery task calls: claim the queued BisectionRun, run the sandboxed harness
writing progress to the row, store the verdict, refresh the issue's suggestions. fail_stale_runs and
fail_unclaimed_runs are the sweep's: they end runs whose worker died or that no worker took, saying why.
"""

from __future__ import annotations

import json
import logging
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rubric_app import bisection
from rubric_app.bisection import builds
from rubric_app.github import recovery
from rubric_app.models import BisectionRun, queue_state
from rubric_app.runs import build_checks, hardware
from rubric_app.triage import suggestions

log = logging.getLogger(__name__)

QUEUES = BisectionRun.QUEUES
TASK = "rubric_app.tasks.run_bisection_task"
# What a worker declaring BISECTION_DEVICE can run: a GPU box has a CPU too.
SERVES = {"cpu": {"cpu"}, "cuda": {"cuda", "both"}}


def limits() -> bisection.Limits:
    return bisection.Limits(timeout_s=settings.BISECTION_TIMEOUT_S, memory_mb=settings.BISECTION_MEMORY_MB)


def longest_run() -> timedelta:
    """An upper bound on one bisection: six modes plus four re-runs, each at most the timeout, plus slack."""
    return timedelta(seconds=10 * settings.BISECTION_TIMEOUT_S + 300)


def fail_stale_runs(now=None) -> int:
    """Mark failed the runs left "running" longer than any run can last (their worker died); returns how many.

    A worker killed outright loses its message on the filesystem broker, and on Redis it comes
    back only after the visibility timeout: only this sweep ends such a run.
    """
    now = now or timezone.now()
    minutes = round(longest_run().total_seconds() / 60)
    return BisectionRun.objects.overdue(now - longest_run()).update(
        status=BisectionRun.Status.FAILED,
        finished_at=now,
        current_mode="",
        error=f"The worker running this bisection stopped (killed or lost) without finishing: no result after "
        f"{minutes} min, the longest a run can take. Start it again.",
    )


def fail_unclaimed_runs(live: dict[str, list[str]], now=None) -> int:
    """End the runs no worker has taken within QUEUE_WAIT_TIMEOUT_MINUTES, saying why; returns how many.

    live: WorkerHeartbeat.objects.queues(), to say whether the queue had no worker at all or only busy ones.
    """
    now = now or timezone.now()
    minutes = settings.QUEUE_WAIT_TIMEOUT_MINUTES
    ended = 0
    for queue in sorted(set(QUEUES.values())):
        devices = [device for device, name in QUEUES.items() if name == queue]
        state = queue_state(live, queue)
        ended += (
            BisectionRun.objects.stuck(now - timedelta(minutes=minutes))
            .filter(device__in=devices)
            .update(
                status=BisectionRun.Status.FAILED,
                finished_at=now,
                error=f"No worker of the {queue} queue took this run within {minutes:g} min ({state}). "
                f"Nothing ran; start it again once a {queue} worker is up, or pick another device.",
            )
        )
    ended += BisectionRun.objects.abandoned(now - AUTO_WAIT).update(
        status=BisectionRun.Status.FAILED,
        finished_at=now,
        error=f"No worker reached this automatic run within {AUTO_WAIT.days} day (automatic runs wait behind every "
        "run a person asks for). A triager can start it by hand.",
    )
    return ended


# How long an automatic run may wait behind human runs before the sweep gives up on it.
AUTO_WAIT = timedelta(days=1)


class MakeWay(Exception):
    """An automatic run stops at a mode's boundary for a run a person asked for (see run_bisection)."""


# A person's run queued this long with no taker means every worker of its queue is busy (an idle one takes it at once).
MAKE_WAY_AFTER = timedelta(seconds=2)


def person_waiting(queue: str, now=None) -> bool:
    """Whether a run a person asked for has waited MAKE_WAY_AFTER on `queue` (cpu, gpu) with no worker taking it."""
    now = now or timezone.now()
    devices = [device for device, name in QUEUES.items() if name == queue]
    return BisectionRun.objects.filter(
        status=BisectionRun.Status.QUEUED, automatic=False, device__in=devices, created_at__lte=now - MAKE_WAY_AFTER
    ).exists()


def run_bisection(run_id: int, *, task_id: str = "", consumed: frozenset[str] = frozenset()) -> BisectionRun:
    """Run a queued BisectionRun in the sandbox, writing progress to its row; return the run.

    The queued -> running claim is a conditional UPDATE that records the claiming task's id:
    a second message for the same run (the sweep re-sent it) finds the row claimed and does
    nothing, but the same message delivered again while the row is "running" means that the
    worker which took it died (acks_late + reject_on_worker_lost): that run is marked failed
    rather than left running forever. The task id is compared, not a broker's redelivered flag:
    kombu's filesystem transport does not put that flag where Celery reads it.

    consumed: the queues this worker reads. An automatic run on a worker that also reads the person's queue of its
    device makes way for a person's run waiting there: at its next mode boundary it goes back to its own queue (a new
    message) and the worker takes the person's run, so a triager waits at most one mode, not a whole run (issue 35).
    """
    worker = f"{recovery.this_process()} ({settings.BISECTION_DEVICE})"
    claimed = BisectionRun.objects.filter(pk=run_id, status=BisectionRun.Status.QUEUED).update(
        status=BisectionRun.Status.RUNNING, started_at=timezone.now(), worker=worker, task_id=task_id
    )
    run = BisectionRun.objects.select_related("issue").get(pk=run_id)
    if not claimed:
        if task_id and run.task_id == task_id and run.status == BisectionRun.Status.RUNNING:
            _finish(
                run,
                BisectionRun.Status.FAILED,
                error=f"The worker running this bisection ({run.worker}) died mid-run (killed, or out of memory); "
                "start it again.",
            )
        return run
    if run.device not in SERVES.get(settings.BISECTION_DEVICE, ()):
        return _finish(
            run,
            BisectionRun.Status.FAILED,
            error=f"this worker serves {settings.BISECTION_DEVICE}, the run asked for {run.device}",
        )

    hosted = settings.TORCH_BUILDS
    build = run.build or next(iter(hosted))
    if build not in hosted:
        return _finish(
            run,
            BisectionRun.Status.FAILED,
            error=f"this worker hosts the torch builds {', '.join(hosted)} (TORCH_BUILDS); the run asked for "
            f"{build!r}. Every worker of a queue should host the same builds.",
        )
    run.build = build

    makes_way = run.automatic and QUEUES[run.device] in consumed

    def progress(mode: str, results: list[dict]) -> None:
        if makes_way and person_waiting(QUEUES[run.device]):
            raise MakeWay
        run.current_mode, run.results = mode, capped_results(results)
        run.save(update_fields=["current_mode", "results"])

    try:
        # "both" bisects on CPU; on this GPU worker the harness re-runs an Inductor failure on cuda (R2.4).
        device = "cpu" if run.device == BisectionRun.Device.BOTH else run.device
        report = bisection.bisect(
            run.repro_code,
            device=device,
            style=run.repro_style,
            limits=limits(),
            on_progress=progress,
            server=server_for(hosted[build]),
            # Untrusted code nobody asked for: its compile modes share one budget (auto_bisect.py, issue 35). A re-check
            # on a newer build re-runs a repro that already reproduced, with the limits its first run had.
            budget_s=settings.AUTO_BISECT_BUDGET_S if run.automatic and not run.recheck_of_id else None,
        )
    except bisection.SandboxRefused as exc:
        # No isolation, no run: say why, and what isolation there was, on the run's page.
        run.sandbox_report = exc.report
        return _finish(run, BisectionRun.Status.FAILED, error=str(exc))
    except bisection.ForkServerError as exc:
        return _finish(run, BisectionRun.Status.FAILED, error=str(exc))
    except MakeWay:
        with transaction.atomic():
            BisectionRun.objects.filter(pk=run.pk, status=BisectionRun.Status.RUNNING, task_id=task_id).update(
                status=BisectionRun.Status.QUEUED, started_at=None, worker="", task_id="", current_mode="", results=[]
            )
            queue = run.queue_name
            # By name, as auto_bisect.py sends it (the task module imports this one).
            transaction.on_commit(lambda: current_app.send_task(TASK, args=(run.pk,), queue=queue))
        log.info("automatic run %s made way for a person's run on %s", run.pk, QUEUES[run.device])
        run.refresh_from_db()
        return run
    except (SystemExit, KeyboardInterrupt):
        # The worker is stopping (SIGTERM: a cold shutdown, triage_site/celery.py) and gives the message back to the
        # broker: the run goes back in the queue, so the message delivered again starts it afresh instead of
        # reading "running" with its own task id as a worker that died mid-run.
        BisectionRun.objects.filter(pk=run.pk, status=BisectionRun.Status.RUNNING, task_id=task_id).update(
            status=BisectionRun.Status.QUEUED, started_at=None, worker="", task_id="", current_mode="", results=[]
        )
        raise
    run.results = capped_results(report.results)
    # Which device and ISA ran it: a report naming hardware the run lacked is not fixed by its pass (build_checks).
    run.hardware = {"device": "cuda" if device == "cuda" else "cpu", **hardware.this_machine()}
    run.verdict_labels, run.verdict_summary = report.labels, report.summary
    run.torch_version, run.sandbox_report, run.log = report.torch_version, report.sandbox, report.log
    run.outcome = builds.outcome(report.results)
    # The verdict feeds the rubric engine through Issue.as_issue_text(), and so does what this run says next to
    # the same repro's runs on other builds (a regression). One transaction: whoever sees the run done (the
    # issue page's poll) also sees the suggestions it produced.
    with transaction.atomic():
        _finish(run, BisectionRun.Status.DONE)
        build_checks.compare_issue(run.issue)
        suggestions.refresh_issue(run.issue)
    return run


def server_for(python: str) -> bisection.ForkServer:
    """The warm fork server of the build at `python`, restarted first when that build was upgraded in place (a
    new nightly installed under a running worker): a run must record, and run on, the torch installed now."""
    server = bisection.shared_server(python)
    if server.alive and server.installed != builds.installed_version(python):
        server.close()
    return server


def hosted_versions() -> dict[str, str]:
    """{build name: installed torch version} for this worker's TORCH_BUILDS, for its heartbeat."""
    return {name: builds.installed_version(python) for name, python in settings.TORCH_BUILDS.items()}


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


FINISH_FIELDS = [
    "status",
    "build",
    "outcome",
    "error",
    "current_mode",
    "finished_at",
    "results",
    "verdict_labels",
    "verdict_summary",
    "torch_version",
    "sandbox_report",
    "log",
    "hardware",
]


def _finish(run: BisectionRun, status: str, error: str = "") -> BisectionRun:
    run.status, run.error, run.current_mode, run.finished_at = status, error, "", timezone.now()
    run.save(update_fields=FINISH_FIELDS)
    return run
