"""The coordinator: the database's side of a bisection run, on the `default` queue. Runners hold no database.

assignment.py gives a queued run to one registered runner and sends it the job. record applies what a runner
reports about it to the run's row; the gateway (gateway.py) has already checked that the runner whose queue the
report came from signed it, and names that runner. Each change is a conditional UPDATE on the run's status, its
assignment (the runner it was given to, and the token of that assignment) and the message that claimed it:
- a report from any runner but the one the run is given to, or with an earlier assignment's token, is refused:
  nothing recorded, whatever name or token it carries;
- the first message to start a run claims it; a copy of the job is refused, and the claiming message run again
  (another attempt) means its runner died: the run ends failed, saying so (untrusted code runs again only when a
  person asks);
- only the first result counts; the verdict is decided here from the results (bisection/verdict.py), not taken
  from the runner; a result that is not the harness's shape is refused whole;
- an automatic run that made way for a person's run, or whose runner is stopping (cold shutdown), goes back to the
  queue.
A runner restarted (its beat has another boot) or silent longer than WORKER_HEARTBEAT_STALE_S died with the runs it
held: they end failed with that reason (record_heartbeat, fail_lost_runs). fail_stale_runs and fail_unclaimed_runs
are the sweep's.
"""

from __future__ import annotations

import hmac
import json
import logging
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.utils import timezone

from rubric_app import dispatch
from rubric_app.bisection import builds, verdict
from rubric_app.bisection.harness import LOG_CAP
from rubric_app.models import BisectionRun, Runner, WorkerHeartbeat, queue_state
from rubric_app.runs import assignment, jobs
from rubric_app.vocabulary import BISECTION_QUEUES, RUN_QUEUES

log = logging.getLogger(__name__)

QUEUES = BisectionRun.QUEUES
# How long an automatic run may wait behind human runs before the sweep gives up on it.
AUTO_WAIT = timedelta(days=1)
# The harness caps every field a child sends; this bounds the row whatever it holds, so no page
# that loads the results can be made slow by one run (or by a runner that sends more than it should).
MAX_RESULTS_BYTES = 256 * 1024


longest_run = assignment.longest_run


def start_run(run: BisectionRun) -> None:
    """Queue the run for a runner (the one way a run starts): the coordinator gives it to one once this transaction
    commits (assignment.assign)."""
    dispatch.start_assignment()


def record(runner: Runner, message: object) -> BisectionRun | None:
    """Apply one report of `runner` (authenticated by the gateway) to its run (see the module); returns the run when
    this report finished it with a verdict (its follow-ups are the caller's: triage/followups.py), else None."""
    try:
        report = jobs.Report.from_message(message)
    except jobs.Malformed as exc:
        return _refused(runner, f"a malformed report: {exc}")
    run = BisectionRun.objects.filter(pk=report.run_id).only("pk", "job_token", "status", "assigned_to").first()
    if run is None or run.assigned_to_id != runner.pk:
        return _refused(runner, f"a {report.kind} report for run {report.run_id}, which is not given to it")
    if not run.job_token or not hmac.compare_digest(run.job_token, report.token):
        return _refused(runner, f"a {report.kind} report for run {report.run_id} of an earlier assignment")
    if report.kind == jobs.STARTED or run.status == BisectionRun.Status.QUEUED:
        if not _claim(runner, report):
            return None
    try:
        return RECORDERS[report.kind](runner, report)
    except jobs.Malformed as exc:
        return _refused(runner, f"a {report.kind} report for run {report.run_id}: {exc}")


def _refused(runner: Runner, why: str) -> None:
    """Log why a report of `runner` was refused and keep the last reason on its row (the runners page shows it)."""
    log.warning("refused from runner %s: %s", runner.name, why)
    Runner.objects.filter(pk=runner.pk).update(refused_at=timezone.now(), refused=why[:300])
    return None


def _held(runner: Runner, report: jobs.Report):
    """The run, while the attempt that claimed it is the one reporting: the only rows a report may change."""
    return BisectionRun.objects.filter(
        pk=report.run_id,
        assigned_to=runner,
        job_token=report.token,
        status=BisectionRun.Status.RUNNING,
        message_id=report.message_id,
        attempt=report.attempt,
    )


def _claim(runner: Runner, report: jobs.Report) -> bool:
    """The first message to report on a queued run claims it; returns whether this report's message holds it now."""
    now = timezone.now()
    claimed = BisectionRun.objects.filter(
        pk=report.run_id, assigned_to=runner, job_token=report.token, status=BisectionRun.Status.QUEUED
    ).update(
        status=BisectionRun.Status.RUNNING,
        started_at=now,
        # Who ran it is the registered runner, never a name a message chose.
        worker=f"{runner.name} ({runner.device})",
        runner=runner.name,
        runner_boot=report.boot,
        message_id=report.message_id,
        attempt=report.attempt,
        current_mode="",
        results=[],
    )
    if claimed or _held(runner, report).exists():
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
    log.info(
        "refused a %s report for run %s from runner %s: the run is %s", report.kind, run.pk, runner.name, run.status
    )
    return False


def _progress(runner: Runner, report: jobs.Report) -> None:
    results = capped_results(report.results())
    held = _held(runner, report)
    stored = held.values_list("results", flat=True).first()
    # Reports may arrive out of order: an older one (fewer results) never overwrites a newer one.
    if stored is not None and len(results) >= len(stored):
        held.update(current_mode=report.text("mode", 60), results=results)


def _result(runner: Runner, report: jobs.Report) -> BisectionRun | None:
    run = _held(runner, report).first()
    if run is None:
        return None
    results = capped_results(report.results())
    device = "cpu" if run.device == BisectionRun.Device.BOTH else run.device
    decided = verdict.decide(results, device, packages=report.names("packages"))
    now = timezone.now()
    done = _held(runner, report).update(
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


def _failed(runner: Runner, report: jobs.Report) -> None:
    fields = {"sandbox_report": report.mapping("sandbox")} if report.mapping("sandbox") else {}
    _end(
        _held(runner, report),
        report.text("error", 5000) or "The runner could not run this bisection.",
        build=report.text("build", 40),
        **fields,
    )


def _made_way(runner: Runner, report: jobs.Report) -> None:
    """Back to the queue with no runner (the old message is done): a person's run was given to its runner."""
    if _held(runner, report).update(**assignment.unassigned()):
        log.info("automatic run %s made way for a person's run on runner %s", report.run_id, runner.name)


def _put_back(runner: Runner, report: jobs.Report) -> None:
    """Its runner is stopping (cold shutdown) and gives the message back to the broker: the run waits for it, still
    given to that runner, and the message delivered again claims it afresh instead of reading as a runner that died
    mid-run (if the runner does not come back, assignment.release_silent gives it to another)."""
    _held(runner, report).update(
        status=BisectionRun.Status.QUEUED,
        started_at=None,
        message_id="",
        attempt="",
        current_mode="",
        results=[],
    )


RECORDERS = {
    jobs.STARTED: lambda runner, report: None,
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


def record_heartbeat(runner: Runner, beat: object, *, sent_at: float) -> None:
    """Record a heartbeat of `runner` (authenticated by the gateway; sent_at: when it signed it), end what an earlier
    process of that runner held, take back jobs it lost, and give it work.

    A beat speaks for its own runner only (the row is that runner's, whatever the beat says), for the device the
    runner was registered with (a cpu runner claiming a GPU is refused), and is never older than the one recorded (a
    replay is refused). Its last beat, on a clean shutdown, says it stopped: its row goes (that process's, not a newer
    one's)."""
    signed = datetime.fromtimestamp(sent_at, tz=UTC)
    row = WorkerHeartbeat.objects.filter(runner=runner).only("sent_at", "boot").first()
    if row is not None and row.sent_at is not None and signed <= row.sent_at:
        _refused(runner, f"a heartbeat signed at {signed:%H:%M:%S}, not after the last one recorded (a replay)")
        return
    if isinstance(beat, dict) and beat.get("stopped") is True:
        WorkerHeartbeat.objects.filter(runner=runner, boot=str(beat.get("boot", ""))).delete()
        return
    try:
        recorded = _heartbeat_row(runner, beat, signed)
    except (KeyError, TypeError, ValueError) as exc:
        _refused(runner, f"a heartbeat: {exc.__class__.__name__}: {exc}")
        return
    WorkerHeartbeat.objects.record(recorded)
    fail_runs_of_restarted(runner.name, recorded.boot)
    assignment.reconcile(runner, recorded)
    assignment.assign()


def _heartbeat_row(runner: Runner, beat: object, signed: datetime) -> WorkerHeartbeat:
    if not isinstance(beat, dict):
        raise TypeError("a heartbeat is a JSON object")
    if beat["device"] != runner.device:
        raise ValueError(f"it says it serves {beat['device']!r}, and was registered for {runner.device}")
    lanes, serves = beat["lanes"], BISECTION_QUEUES[RUN_QUEUES[runner.device]]
    if not isinstance(lanes, list) or not lanes or not set(lanes) <= serves:
        raise ValueError(f"a {runner.device} runner serves the lanes {', '.join(sorted(serves))}, not {lanes!r}")
    builds_ = beat.get("builds") or {}
    hardware = beat.get("hardware") or {}
    if not (isinstance(builds_, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in builds_.items())):
        raise TypeError("builds is not {name: version}")
    if not isinstance(hardware, dict) or len(json.dumps(hardware)) > 10_000:
        raise TypeError("hardware is not a small object")
    packages = beat.get("packages") or []
    if not (isinstance(packages, list) and len(packages) <= 2000 and all(isinstance(x, str) for x in packages)):
        raise TypeError("packages is not a list of at most 2000 names")
    active, waiting, slots = beat.get("active", []), beat.get("waiting", 0), beat.get("slots", 1)
    if not (isinstance(active, list) and len(active) <= 64 and all(type(pk) is int for pk in active)):
        raise TypeError("active is not a short list of run ids")
    if type(waiting) is not int or type(slots) is not int or waiting < 0 or not 1 <= slots <= 64:
        raise ValueError("waiting or slots")
    boot = beat["boot"]
    if not isinstance(boot, str) or not boot:
        raise TypeError("boot")
    return WorkerHeartbeat(
        name=runner.name,
        runner=runner,
        queues=sorted(lanes),
        device=runner.device,
        builds={k[:40]: v[:100] for k, v in list(builds_.items())[:20]},
        hardware=hardware,
        packages=[x[:100] for x in packages],
        boot=boot[:64],
        seen_at=timezone.now(),
        sent_at=signed,
        active=active,
        waiting=waiting,
        slots=slots,
    )


def fail_runs_of_restarted(runner: str, boot: str) -> int:
    """End the runs that an earlier process of `runner` held (it beats now with another boot): they died with it."""
    rows = BisectionRun.objects.filter(status=BisectionRun.Status.RUNNING, runner=runner).exclude(runner_boot=boot)
    return sum(_end_lost(run, _restarted) for run in rows.only("pk", "runner", "worker", "message_id"))


def fail_lost_runs(now=None) -> int:
    """End the runs whose runner died, saying so, and take back the jobs of silent runners not yet started; returns
    how many runs ended. Every worker holding the database calls it on each beat: a runner beating again with another
    boot was restarted (killed, or lost); one silent for WORKER_HEARTBEAT_STALE_S was killed, lost, or cut off from
    the broker."""
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
    if assignment.release_silent(now):
        assignment.assign(now)
    return ended


def _restarted(run: BisectionRun) -> str:
    return f"The runner {run.runner} was restarted while running this bisection (killed, or lost); start it again."


def _silent(run: BisectionRun) -> str:
    return (
        f"The runner running this bisection ({run.worker}) stopped sending heartbeats for "
        f"{settings.WORKER_HEARTBEAT_STALE_S:g} s (killed, lost, or cut off from the broker); start it again."
    )


def _end_lost(run: BisectionRun, why, now=None) -> int:
    # Conditional on the claim it had: a report recorded meanwhile wins. Its message, if the broker gives it back to
    # its runner, claims nothing: the run is over.
    held = BisectionRun.objects.filter(pk=run.pk, status=BisectionRun.Status.RUNNING, message_id=run.message_id)
    return _end(held, why(run), now)


def end_runs_of_revoked(runner: Runner) -> int:
    """A revoked runner's runs: those it runs end failed, those waiting for it go back to the queue."""
    ended = _end(
        BisectionRun.objects.filter(status=BisectionRun.Status.RUNNING, assigned_to=runner),
        f"The runner {runner.name} was revoked while running this bisection; start it again.",
    )
    assignment.take_back(BisectionRun.objects.filter(assigned_to=runner), f"runner {runner.name} was revoked")
    return ended


# --- the sweep ----------------------------------------------------------------------------------------------------


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
