"""Runners that hold no secrets (issue 42): a bisection runner knows the broker and its job, nothing else; the
coordinator records what it reports, and refuses what is forged, stale or a copy.

The coordinator's rules are tested on its domain function (runs/coordinator.record, as its worker calls it); the
runner once for real: the session's runner (tests/conftest.py) runs with a scrubbed environment, takes a bisection
started on the page to a verdict, and is killed mid-run and restarted.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.urls import reverse
from django.utils import timezone

from rubric_app import dispatch
from rubric_app.models import BisectionRun, WorkerHeartbeat
from rubric_app.runs import bisect_runs, coordinator, jobs
from tests.factories import INDUCTOR_RAISED, PASSED, make_issue, make_label, sleeping_repro
from tests.helpers import ROOT, only_this_tests_workers, wait_until, wait_until_finished

HTMX = {"HX-Request": "true"}
GRAPH_BREAK = (Path(__file__).parent / "repros" / "dynamo_graph_break.py").read_text()


def _sent(issue, **fields) -> BisectionRun:
    """A run whose job was sent (it has its token), no runner having said anything yet."""
    return BisectionRun.objects.create(issue=issue, repro_code="import torch", job_token="the-jobs-secret", **fields)


def _report(run, kind, *, message="m1", attempt="a1", token=None, runner="runner@gpu-7", boot="b1", **body) -> dict:
    return jobs.Report(
        kind, run.pk, token or run.job_token, message, attempt, runner, boot, {"device": "cpu", **body}
    ).as_message()


def _record(*reports):
    return [coordinator.record(report) for report in reports]


# --- the coordinator's rules -----------------------------------------------------------------------------------


def test_it_refuses_a_report_without_the_jobs_token(issue):
    run = _sent(issue)
    _record(_report(run, jobs.STARTED, token="guessed"), _report(run, jobs.RESULT, token="guessed", results=PASSED))
    run.refresh_from_db()
    assert (run.status, run.results, run.worker) == ("queued", [], "")


def test_it_refuses_every_report_for_a_run_whose_job_was_never_sent(issue):
    run = BisectionRun.objects.create(issue=issue, repro_code="import torch")  # no token yet: nothing can match it
    assert coordinator.record(_report(run, jobs.RESULT, token="", results=PASSED)) is None
    run.refresh_from_db()
    assert run.status == "queued"


def test_it_counts_only_the_first_result_and_decides_the_verdict_itself(issue):
    make_label("module: inductor")
    run = _sent(issue)
    # The runner's own "labels" are not read: the coordinator decides the verdict from what ran (bisection/verdict.py).
    forged_labels = [{"label": "high priority", "rule_id": "R11", "evidence": "trust me"}]
    first = _report(run, jobs.RESULT, results=INDUCTOR_RAISED, torch_version="2.13.0", labels=forged_labels)
    later = _report(run, jobs.RESULT, results=PASSED, torch_version="9.9.9")
    done, again = _record(_report(run, jobs.STARTED), first, later)[1:]
    assert done is not None and again is None
    run.refresh_from_db()
    assert (run.status, run.torch_version, run.outcome) == ("done", "2.13.0", "reproduced")
    assert [label["label"] for label in run.verdict_labels] == ["module: inductor"]
    assert issue.suggestions.filter(label="high priority").count() == 0


def test_it_refuses_a_copy_of_the_job_while_the_first_message_runs_it(issue):
    run = _sent(issue)
    _record(_report(run, jobs.STARTED, message="m1"))
    _record(
        _report(run, jobs.STARTED, message="m2", runner="runner@other"),  # the sweep sent the job again
        _report(run, jobs.PROGRESS, message="m2", mode="aot_eager", results=PASSED[:2]),
        _report(run, jobs.RESULT, message="m2", results=PASSED),
    )
    run.refresh_from_db()
    assert (run.status, run.message_id, run.runner, run.results) == ("running", "m1", "runner@gpu-7", [])


def test_it_ends_the_run_when_its_own_message_runs_again_as_its_runner_died(issue):
    run = _sent(issue)
    _record(_report(run, jobs.STARTED, message="m1", attempt="a1"))
    _record(_report(run, jobs.STARTED, message="m1", attempt="a2"))  # acks_late: the broker gave the message back
    run.refresh_from_db()
    assert run.status == "failed" and "died mid-run (killed, or out of memory); start it again" in run.error
    assert coordinator.record(_report(run, jobs.RESULT, message="m1", attempt="a2", results=PASSED)) is None


def test_it_keeps_the_newest_progress_when_reports_arrive_out_of_order(issue):
    run = _sent(issue)
    _record(
        _report(run, jobs.STARTED),
        _report(run, jobs.PROGRESS, mode="aot_eager", results=PASSED[:2]),
        _report(run, jobs.PROGRESS, mode="dynamo_eager", results=PASSED[:1]),  # sent earlier, arrived later
    )
    run.refresh_from_db()
    assert run.current_mode == "aot_eager" and len(run.results) == 2


def test_it_takes_a_result_that_overtook_its_start(issue):
    run = _sent(issue)
    assert _record(_report(run, jobs.RESULT, results=PASSED), _report(run, jobs.STARTED))[0] is not None
    run.refresh_from_db()
    assert run.status == "done" and run.worker == "runner@gpu-7 (cpu)"


@pytest.mark.parametrize(
    "report",
    [
        "a string",
        {"kind": "result"},
        {"kind": "result", "run_id": "1", "token": "x", "message_id": "m", "attempt": "a"},
        {"kind": "delete everything", "run_id": 1, "token": "x", "message_id": "m", "attempt": "a"},
    ],
)
def test_it_refuses_a_malformed_report_whole(issue, report):
    run = _sent(issue)
    assert coordinator.record(report) is None
    run.refresh_from_db()
    assert run.status == "queued"


def test_it_refuses_results_larger_than_any_run_makes(issue):
    run = _sent(issue)
    huge = [{"mode": f"m{i}", "status": "raised", "phase": "x" * 9000} for i in range(60)]
    _record(_report(run, jobs.STARTED), _report(run, jobs.RESULT, results=huge))
    run.refresh_from_db()
    assert run.status == "running" and run.results == []


def test_it_sends_a_run_that_made_way_back_to_its_queue_with_a_new_job(issue, django_capture_on_commit_callbacks):
    run = _sent(issue, automatic=True)
    _record(_report(run, jobs.STARTED))
    with django_capture_on_commit_callbacks() as sent:
        _record(_report(run, jobs.MADE_WAY))
    run.refresh_from_db()
    assert (run.status, run.started_at, run.message_id) == ("queued", None, "")
    assert run.job_token != "the-jobs-secret" and len(sent) == 1  # the old job's reports are stale now
    assert coordinator.record(_report(run, jobs.RESULT, token="the-jobs-secret", results=PASSED)) is None


def test_it_puts_a_run_back_for_its_message_to_start_again_on_a_cold_shutdown(issue):
    run = _sent(issue)
    _record(_report(run, jobs.STARTED, message="m1", attempt="a1"), _report(run, jobs.PUT_BACK))
    run.refresh_from_db()
    assert (run.status, run.message_id, run.job_token) == ("queued", "", "the-jobs-secret")
    _record(_report(run, jobs.STARTED, message="m1", attempt="a2"))  # the same message, given back by the broker
    run.refresh_from_db()
    assert run.status == "running" and run.attempt == "a2"


def test_it_ends_the_runs_of_a_runner_that_beats_again_after_a_restart(issue):
    only_this_tests_workers()
    run = _sent(issue)
    _record(_report(run, jobs.STARTED, runner="runner@gpu-7", boot="b1"))
    beat = {"name": "runner@gpu-7", "queues": ["gpu", "gpu_auto"], "device": "cuda", "builds": {}, "hardware": {}}
    coordinator.record_heartbeat({**beat, "boot": "b1"})
    run.refresh_from_db()
    assert run.status == "running"
    coordinator.record_heartbeat({**beat, "boot": "b2", "hardware": {"gpu": "NVIDIA H100 80GB HBM3"}})
    run.refresh_from_db()
    assert run.status == "failed" and "runner@gpu-7 was restarted while running this bisection" in run.error
    row = WorkerHeartbeat.objects.get(name="runner@gpu-7")
    assert (row.boot, row.device, row.hardware) == ("b2", "cuda", {"gpu": "NVIDIA H100 80GB HBM3"})


def test_it_removes_a_runners_row_when_that_runner_says_it_stopped(db):
    only_this_tests_workers()
    beat = {"name": "runner@gpu-7", "queues": ["gpu"], "device": "cuda", "boot": "b2"}
    coordinator.record_heartbeat(beat)
    coordinator.record_heartbeat({"name": "runner@gpu-7", "boot": "b1", "stopped": True})  # an older process's
    assert WorkerHeartbeat.objects.filter(name="runner@gpu-7").exists()
    coordinator.record_heartbeat({"name": "runner@gpu-7", "boot": "b2", "stopped": True})
    assert not WorkerHeartbeat.objects.filter(name="runner@gpu-7").exists()


def test_it_takes_no_runner_heartbeat_for_a_queue_that_is_not_a_runners(db):
    only_this_tests_workers()
    coordinator.record_heartbeat({"name": "x@y", "queues": ["github"], "device": "cpu", "boot": "b"})
    coordinator.record_heartbeat({"name": "x@y", "queues": ["cpu", "default"], "device": "cpu", "boot": "b"})
    coordinator.record_heartbeat("not a beat")
    assert not WorkerHeartbeat.objects.exists()


def test_it_ends_the_runs_of_a_runner_gone_silent(issue, settings):
    settings.WORKER_HEARTBEAT_STALE_S = 45
    only_this_tests_workers()
    long_ago = timezone.now() - timedelta(seconds=60)
    lost, held = _sent(issue), _sent(issue)
    _record(_report(lost, jobs.STARTED, runner="runner@gone"), _report(held, jobs.STARTED, runner="runner@here"))
    BisectionRun.objects.update(started_at=long_ago)
    WorkerHeartbeat.objects.create(name="runner@gone", queues=["cpu"], boot="b1", seen_at=long_ago)
    WorkerHeartbeat.objects.create(name="runner@here", queues=["cpu"], boot="b1")
    assert coordinator.fail_lost_runs() == 1
    lost.refresh_from_db(), held.refresh_from_db()
    assert lost.status == "failed" and "stopped sending heartbeats for 45 s" in lost.error
    assert held.status == "running"


# --- the runner holds nothing -------------------------------------------------------------------------------------


def test_it_imports_nothing_of_the_database_into_the_runner():
    # What a runner executes: the task's module aside (tasks.py), runner.py, jobs.py and what they import.
    for module in ("rubric_app/runs/runner.py", "rubric_app/runs/jobs.py", "rubric_app/runs/hardware.py"):
        tree = ast.parse((ROOT / module).read_text())
        imported = {
            node.module if isinstance(node, ast.ImportFrom) else alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        }
        assert not {m for m in imported if m and m.startswith(("rubric_app.models", "rubric_app.bookkeeping"))}, module
        assert not {m for m in imported if m and m.startswith(("rubric_app.triage", "rubric_app.github"))}, module


def test_it_seals_a_runners_database_so_no_query_and_no_sqlite_file_can_happen(tmp_path):
    code = (
        "import django; django.setup()\n"
        "from rubric_app.runs import runner; runner.seal_database()\n"
        "from rubric_app.models import Issue\n"
        "try:\n    Issue.objects.count()\nexcept Exception as exc:\n    print(type(exc).__name__, exc)\n"
    )
    env = {
        "TRIAGE_VAR_DIR": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "triage_site.settings",
        "PATH": os.environ["PATH"],
    }
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ImproperlyConfigured settings.DATABASES is improperly configured")
    assert not list(tmp_path.rglob("*.sqlite3"))


# --- a real runner, through the broker --------------------------------------------------------------------------

ALLOWED = {"CELERY_BROKER_URL", "TRIAGE_VAR_DIR", "TORCH_BUILDS", "PATH", "PYTHONUNBUFFERED"}


def _environment(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(entry.decode().split("=", 1) for entry in raw if b"=" in entry)


@pytest.mark.torch
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_takes_a_bisection_from_the_page_to_a_verdict_on_a_runner_that_holds_no_secrets(
    celery_worker_process, client, triager
):
    runner = celery_worker_process
    environment = _environment(runner.pid)
    assert set(environment) <= ALLOWED, set(environment) - ALLOWED  # no DATABASE_URL, SECRET_KEY, GITHUB_*, keys
    make_label("module: dynamo")
    issue = make_issue(4401)
    client.force_login(triager)

    client.post(reverse("rubric_app:bisect", args=[issue.number]), {"code": GRAPH_BREAK, "device": "cpu"})
    run = BisectionRun.objects.get(issue=issue)
    seen = []

    def finished():
        html = client.get(reverse("rubric_app:bisection", args=[run.pk]), headers=HTMX).content.decode()
        row = BisectionRun.objects.values("status", "current_mode", "results").get(pk=run.pk)
        seen.append((row["status"], row["current_mode"], len(row["results"]), "running" in html))
        return row["status"] in ("done", "failed")

    wait_until(finished, timeout=240, interval=0.1)
    run.refresh_from_db()
    assert run.status == "done", run.error
    assert any(status == "running" and mode and shown for status, mode, _, shown in seen), seen  # live progress
    assert any(status == "running" and results for status, _, results, _ in seen), seen  # results as they came
    assert run.worker == f"{runner.name} (cpu)" and run.verdict_labels[0]["label"] == "module: dynamo"
    assert run.hardware["device"] == "cpu" and run.hardware["isa"]
    assert issue.suggestions.filter(label="module: dynamo", source="bisection").exists()
    page = client.get(issue.get_absolute_url()).content.decode()
    assert "module: dynamo" in page and f"bisection run {run.pk}" in page  # the suggestion says where it came from
    # Its heartbeat reached the dashboard as a message: the machine, its ISA, the builds it hosts.
    beat = WorkerHeartbeat.objects.get(name=runner.name)
    assert beat.hardware["cpu"] and beat.hardware["isa"] and set(beat.builds) == {"default", "nightly"}
    # It created no database where its settings would have put one.
    assert not list(Path(environment["TRIAGE_VAR_DIR"]).rglob("*.sqlite3"))


@pytest.mark.torch
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_ends_a_run_whose_runner_was_killed_mid_run_when_the_runner_comes_back(celery_worker_process, triager):
    runner = celery_worker_process
    run = bisect_runs.start_bisection(issue=make_issue(4402), user=triager, code=sleeping_repro(30), device="cpu")
    wait_until(lambda: BisectionRun.objects.filter(pk=run.pk, status="running").exclude(current_mode="").exists(), 240)

    runner.kill()
    runner.start()  # the same name, another process: its first heartbeat ends what the killed one held

    wait_until_finished(run, timeout=60)
    assert run.status == "failed", run.error
    assert f"The runner {runner.name} was restarted while running this bisection (killed, or lost)" in run.error


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_refuses_a_forged_result_sent_through_the_broker(celery_worker_process, issue):
    run = _sent(issue)  # its job was never sent to a runner: only this test speaks for it
    dispatch.report(_report(run, jobs.RESULT, token="guessed", results=PASSED))
    dispatch.report(_report(run, jobs.RESULT, message="copy", attempt="x", token="guessed", results=INDUCTOR_RAISED))
    dispatch.report(_report(run, jobs.STARTED))  # the coordinator takes reports in order: once this one shows,
    wait_until(lambda: BisectionRun.objects.filter(pk=run.pk, status="running").exists(), timeout=60)
    run.refresh_from_db()
    assert (run.results, run.verdict_labels, run.finished_at) == ([], [], None)  # the forged ones changed nothing
