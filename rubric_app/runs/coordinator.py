"""The coordinator: the database's side of a bisection run, on the `default` queue. Runners hold no database.

start_run sends a run's job (runs/jobs.py) to a runner of its queue: the job carries everything a runner needs,
and a token only this run's job knows. record applies what a runner reports about it to the run's row, each change
a conditional UPDATE on the run's status, token and the message that claimed it:
- a report without the job's token is forged, one for a finished run is stale: refused, nothing recorded;
- the first message to start a run claims it; a copy of the job (the sweep sent it again) is refused and stopped
  (dispatch.cancel_job), and the claiming message run again (another attempt) means its runner died: the run ends
  failed, saying so (untrusted code runs again only when a person asks);
- only the first result counts; the verdict is decided here from the results (bisection/verdict.py), not taken
  from the runner;
- an automatic run that made way for a person's run goes back to its queue with a new job; one whose runner is
  stopping (cold shutdown) waits for its message to come back.
A runner restarted under the same name (another boot) or silent longer than WORKER_HEARTBEAT_STALE_S died with the
runs it held: they end failed with that reason (record_heartbeat, fail_lost_runs). fail_stale_runs and
fail_unclaimed_runs are the sweep's.
"""

from __future__ import annotations

import hmac
import json
import logging
import secrets
import uuid
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from rubric_app import dispatch
from rubric_app.bisection import builds, verdict
from rubric_app.bisection.harness import LOG_CAP
from rubric_app.models import BisectionRun, WorkerHeartbeat, queue_state
from rubric_app.runs import jobs
from rubric_app.vocabulary import RUNNER_QUEUES

log = logging.getLogger(__name__)

QUEUES = BisectionRun.QUEUES
# How long an automatic run may wait behind human runs before the sweep gives up on it.
AUTO_WAIT = timedelta(days=1)
# The harness caps every field a child sends; this bounds the row whatever it holds, so no page
# that loads the results can be made slow by one run (or by a runner that sends more than it should).
MAX_RESULTS_BYTES = 256 * 1024


def longest_run() -> timedelta:
    """An upper bound on one bisection: six modes plus four re-runs, each at most the timeout, plus slack."""
    return timedelta(seconds=10 * settings.BISECTION_TIMEOUT_S + 300)


def job_for(run: BisectionRun) -> jobs.Job:
    """The self-contained job of a run: the repro, its modes' device, the build, the limits, whether it makes way."""
    # Untrusted code nobody asked for: its compile modes share one budget (auto_bisect.py, issue 35). A re-check on a
    # newer build re-runs a repro that already reproduced, with the limits its first run had.
    budget = settings.AUTO_BISECT_BUDGET_S if run.automatic and not run.recheck_of_id else None
    return jobs.Job(
        run_id=run.pk,
        token=run.job_token,
        repro=run.repro_code,
        style=run.repro_style if run.repro_style in ("script", "module") else "script",
        device=run.device,
        build=run.build,
        limits=jobs.Limits(
            timeout_s=settings.BISECTION_TIMEOUT_S, memory_mb=settings.BISECTION_MEMORY_MB, budget_s=budget
        ),
        may_make_way=run.automatic,
    )


def start_run(run: BisectionRun) -> None:
    """Send the run's job to a runner of its queue once this transaction commits (the one way a run starts).

    The run's token is made on its first send and kept when the job is sent again (the sweep); each message gets an
    id of its own, so that the coordinator knows which one claimed the run."""
    if not run.job_token:
        run.job_token = secrets.token_urlsafe(24)
        BisectionRun.objects.filter(pk=run.pk).update(job_token=run.job_token)
    dispatch.start_job(job_for(run).as_message(), queue=run.queue_name, message_id=str(uuid.uuid4()))


def record(message: object) -> BisectionRun | None:
    """Apply one runner report to its run (see the module); returns the run when this report finished it with a
    verdict (its follow-ups are the caller's: triage/followups.py), else None."""
    try:
        report = jobs.Report.from_message(message)
    except jobs.Malformed as exc:
        log.warning("refused a runner report: %s", exc)
        return None
    run = BisectionRun.objects.filter(pk=report.run_id).only("pk", "job_token", "status", "message_id").first()
    if run is None or not run.job_token or not hmac.compare_digest(run.job_token, report.token):
        log.warning(
            "refused a %s report for run %s: not its job's token (forged, or a run since removed)",
            report.kind,
            report.run_id,
        )
        return None
    if report.kind == jobs.STARTED or run.status == BisectionRun.Status.QUEUED:
        if not _claim(report):
            return None
    try:
        return RECORDERS[report.kind](report)
    except jobs.Malformed as exc:
        log.warning("refused a %s report for run %s: %s", report.kind, report.run_id, exc)
        return None


def _held(report: jobs.Report):
    """The run, while the attempt that claimed it is the one reporting: the only rows a report may change."""
    return BisectionRun.objects.filter(
        pk=report.run_id,
        job_token=report.token,
        status=BisectionRun.Status.RUNNING,
        message_id=report.message_id,
        attempt=report.attempt,
    )


def _claim(report: jobs.Report) -> bool:
    """The first message to report on a queued run claims it; returns whether this report's message holds it now."""
    now = timezone.now()
    device = report.body.get("device") if report.body.get("device") in ("cpu", "cuda") else "?"
    claimed = BisectionRun.objects.filter(
        pk=report.run_id, job_token=report.token, status=BisectionRun.Status.QUEUED
    ).update(
        status=BisectionRun.Status.RUNNING,
        started_at=now,
        worker=f"{report.runner} ({device})"[:200],
        runner=report.runner,
        runner_boot=report.boot,
        message_id=report.message_id,
        attempt=report.attempt,
        current_mode="",
        results=[],
    )
    if claimed or _held(report).exists():
        return True
    run = BisectionRun.objects.get(pk=report.run_id)
    if run.status == BisectionRun.Status.RUNNING and run.message_id == report.message_id:
        # Its own message run again (acks_late: the broker gave it back): the attempt that took it died mid-run.
        _end(
            BisectionRun.objects.filter(pk=run.pk, status=BisectionRun.Status.RUNNING, message_id=run.message_id),
            f"The runner running this bisection ({run.worker}) died mid-run (killed, or out of memory); "
            "start it again.",
            now,
        )
    log.info("refused a %s report for run %s: the run is %s", report.kind, run.pk, run.status)
    dispatch.cancel_job(report.message_id)  # a copy or a redelivery: nothing it runs would be recorded
    return False


def _progress(report: jobs.Report) -> None:
    results = capped_results(report.results())
    held = _held(report)
    stored = held.values_list("results", flat=True).first()
    # Reports may arrive out of order: an older one (fewer results) never overwrites a newer one.
    if stored is not None and len(results) >= len(stored):
        held.update(current_mode=report.text("mode", 60), results=results)


def _result(report: jobs.Report) -> BisectionRun | None:
    run = _held(report).first()
    if run is None:
        return None
    results = capped_results(report.results())
    device = "cpu" if run.device == BisectionRun.Device.BOTH else run.device
    decided = verdict.decide(results, device)
    now = timezone.now()
    done = _held(report).update(
        status=BisectionRun.Status.DONE,
        finished_at=now,
        current_mode="",
        error="",
        build=report.text("build", 40) or run.build,
        results=results,
        outcome=builds.outcome(results),
        verdict_labels=decided.labels,
        verdict_summary=decided.summary,
        torch_version=report.text("torch_version", 100),
        sandbox_report=report.mapping("sandbox"),
        log=report.text("log", LOG_CAP),
        # Which device and ISA ran it: a report naming hardware the run lacked is not fixed by its pass (build_checks).
        hardware=report.mapping("hardware"),
    )
    return BisectionRun.objects.select_related("issue").get(pk=run.pk) if done else None


def _failed(report: jobs.Report) -> None:
    fields = {"sandbox_report": report.mapping("sandbox")} if report.mapping("sandbox") else {}
    _end(
        _held(report),
        report.text("error", 5000) or "The runner could not run this bisection.",
        build=report.text("build", 40),
        **fields,
    )


def _made_way(report: jobs.Report) -> None:
    """Back to its queue with a new job (the old message is done): a person's run waited on the runner's queue."""
    if _held(report).update(**_requeued(job_token=secrets.token_urlsafe(24))):
        run = BisectionRun.objects.get(pk=report.run_id)
        start_run(run)
        log.info("automatic run %s made way for a person's run on %s", run.pk, QUEUES[run.device])


def _put_back(report: jobs.Report) -> None:
    """Its runner is stopping (cold shutdown) and gives the message back to the broker: the run waits for it, and the
    message delivered again claims it afresh instead of reading as a runner that died mid-run."""
    _held(report).update(**_requeued())


def _requeued(**fields) -> dict:
    return dict(
        status=BisectionRun.Status.QUEUED,
        started_at=None,
        worker="",
        runner="",
        runner_boot="",
        message_id="",
        attempt="",
        current_mode="",
        results=[],
        **fields,
    )


RECORDERS = {
    jobs.STARTED: lambda report: None,
    jobs.PROGRESS: _progress,
    jobs.RESULT: _result,
    jobs.FAILED: _failed,
    jobs.MADE_WAY: _made_way,
    jobs.PUT_BACK: _put_back,
}


def _end(rows, error: str, now=None, **fields) -> int:
    return rows.update(
        status=BisectionRun.Status.FAILED, finished_at=now or timezone.now(), current_mode="", error=error, **fields
    )


def capped_results(results: list[dict]) -> list[dict]:
    """results as stored: unchanged if their JSON fits MAX_RESULTS_BYTES, else with messages and
    tracebacks cut (then dropped) until it does."""
    for cap in (2000, 500, 0):
        if len(json.dumps(results)) <= MAX_RESULTS_BYTES:
            return results
        results = [{**r, **{k: str(r[k])[:cap] for k in ("message", "traceback") if k in r}} for r in results]
    if len(json.dumps(results)) > MAX_RESULTS_BYTES:  # only a runner sending more than the harness does gets here
        raise jobs.Malformed(f"results larger than {MAX_RESULTS_BYTES} bytes")
    return results


# --- runners' heartbeats and deaths -------------------------------------------------------------------------------


def record_heartbeat(beat: object) -> None:
    """Record a runner's heartbeat (runs/workers.runner_beat) and end what an earlier process of the same runner held.

    A runner may only say it serves the bisection queues: the github or default queue's liveness is never a
    runner's word. Its last beat, on a clean shutdown, says it stopped: its row goes (this process's, not a newer
    one's under the same name)."""
    if isinstance(beat, dict) and beat.get("stopped") is True:
        WorkerHeartbeat.objects.filter(name=str(beat.get("name", "")), boot=str(beat.get("boot", ""))).delete()
        return
    try:
        row = _heartbeat_row(beat)
    except (KeyError, TypeError, ValueError) as exc:
        log.warning("refused a runner heartbeat: %s: %s", exc.__class__.__name__, exc)
        return
    WorkerHeartbeat.objects.record(row)
    fail_runs_of_restarted(row.name, row.boot)


def _heartbeat_row(beat: object) -> WorkerHeartbeat:
    if not isinstance(beat, dict):
        raise TypeError("a heartbeat is a JSON object")
    queues = beat["queues"]
    if not isinstance(queues, list) or not queues or not set(queues) <= RUNNER_QUEUES:
        raise ValueError(f"a runner serves bisection queues only, not {queues!r}")
    builds_ = beat.get("builds") or {}
    hardware = beat.get("hardware") or {}
    if not (isinstance(builds_, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in builds_.items())):
        raise TypeError("builds is not {name: version}")
    if not isinstance(hardware, dict) or len(json.dumps(hardware)) > 10_000:
        raise TypeError("hardware is not a small object")
    name, boot, device = beat["name"], beat["boot"], beat["device"]
    if not (isinstance(name, str) and isinstance(boot, str) and device in ("cpu", "cuda")):
        raise TypeError("name, boot or device")
    return WorkerHeartbeat(
        name=name[:200],
        queues=sorted(queues),
        device=device,
        builds={k[:40]: v[:100] for k, v in list(builds_.items())[:20]},
        hardware=hardware,
        boot=boot[:64],
        seen_at=timezone.now(),
    )


def fail_runs_of_restarted(runner: str, boot: str) -> int:
    """End the runs that an earlier process of `runner` held (it beats now with another boot): they died with it."""
    rows = BisectionRun.objects.filter(status=BisectionRun.Status.RUNNING, runner=runner).exclude(runner_boot=boot)
    return sum(_end_lost(run, _restarted) for run in rows.only("pk", "runner", "worker", "message_id"))


def fail_lost_runs(now=None) -> int:
    """End the runs whose runner died, saying so; returns how many. Every worker holding the database calls it on
    each beat: a runner beating again with another boot was restarted (killed, or lost); one silent for
    WORKER_HEARTBEAT_STALE_S was killed, lost, or cut off from the broker."""
    now = now or timezone.now()
    live = dict(WorkerHeartbeat.objects.live(now).values_list("name", "boot"))
    # A run just claimed may come before its runner's first beat is recorded: it gets one staleness to show up.
    grace = now - timedelta(seconds=settings.WORKER_HEARTBEAT_STALE_S)
    ended = 0
    running = BisectionRun.objects.filter(status=BisectionRun.Status.RUNNING).exclude(runner="")
    for run in running.only("pk", "runner", "runner_boot", "worker", "message_id", "started_at"):
        boot = live.get(run.runner)
        if boot is not None and boot != run.runner_boot:
            ended += _end_lost(run, _restarted, now)
        elif boot is None and run.started_at and run.started_at < grace:
            ended += _end_lost(run, _silent, now)
    return ended


def _restarted(run: BisectionRun) -> str:
    return f"The runner {run.runner} was restarted while running this bisection (killed, or lost); start it again."


def _silent(run: BisectionRun) -> str:
    return (
        f"The runner running this bisection ({run.worker}) stopped sending heartbeats for "
        f"{settings.WORKER_HEARTBEAT_STALE_S:g} s (killed, lost, or cut off from the broker); start it again."
    )


def _end_lost(run: BisectionRun, why, now=None) -> int:
    # Conditional on the claim it had: a report recorded meanwhile wins.
    held = BisectionRun.objects.filter(pk=run.pk, status=BisectionRun.Status.RUNNING, message_id=run.message_id)
    if not _end(held, why(run), now):
        return 0
    dispatch.cancel_job(run.message_id)  # its message comes back to a runner later: it must not run again
    return 1


# --- the sweep ----------------------------------------------------------------------------------------------------


def resend_stuck(before) -> int:
    """Send again the job of each person's run still queued since before `before` (its message may never have reached
    a runner); returns how many. The same token, a new message: whichever arrives first claims the run."""
    runs = list(BisectionRun.objects.stuck(before))
    for run in runs:
        start_run(run)
    return len(runs)


def fail_stale_runs(now=None) -> int:
    """Mark failed the runs left "running" longer than any run can last (their runner died); returns how many."""
    now = now or timezone.now()
    minutes = round(longest_run().total_seconds() / 60)
    return _end(
        BisectionRun.objects.overdue(now - longest_run()),
        f"The runner running this bisection stopped (killed or lost) without finishing: no result after "
        f"{minutes} min, the longest a run can take. Start it again.",
        now,
    )


def fail_unclaimed_runs(live: dict[str, list[str]], now=None) -> int:
    """End the runs no runner has taken within QUEUE_WAIT_TIMEOUT_MINUTES, saying why; returns how many.

    live: WorkerHeartbeat.objects.queues(), to say whether the queue had no runner at all or only busy ones.
    """
    now = now or timezone.now()
    minutes = settings.QUEUE_WAIT_TIMEOUT_MINUTES
    ended = 0
    for queue in sorted(set(QUEUES.values())):
        devices = [device for device, name in QUEUES.items() if name == queue]
        state = queue_state(live, queue)
        ended += _end(
            BisectionRun.objects.stuck(now - timedelta(minutes=minutes)).filter(device__in=devices),
            f"No worker of the {queue} queue took this run within {minutes:g} min ({state}). "
            f"Nothing ran; start it again once a {queue} worker is up, or pick another device.",
            now,
        )
    ended += _end(
        BisectionRun.objects.abandoned(now - AUTO_WAIT),
        f"No worker reached this automatic run within {AUTO_WAIT.days} day (automatic runs wait behind every "
        "run a person asks for). A triager can start it by hand.",
        now,
    )
    return ended
