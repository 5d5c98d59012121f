"""Runners that hold no secrets (issue 42) and are strangers (issue 49): a bisection runner knows its broker user,
its registered name and secret and its job, nothing else; the coordinator gives each run to one registered runner and
records only that runner's reports.

The coordinator's rules are tested on its domain function (runs/coordinator.record, as its task calls it with the
runner the gateway authenticated); the runner once for real: the session's runner (tests/conftest.py) runs with a
scrubbed environment, takes a bisection started on the page to a verdict, and is killed mid-run and restarted. The
attacks of a process holding only a runner's credential are in test_runner_boundary.py.
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

from rubric_app.models import BisectionRun, Runner, WorkerHeartbeat
from rubric_app.runs import assignment, bisect_runs, coordinator, jobs
from rubric_app.vocabulary import BISECTION_QUEUES
from tests.factories import INDUCTOR_RAISED, PASSED, make_issue, make_label, sleeping_repro
from tests.helpers import ROOT, only_this_tests_workers, wait_until, wait_until_finished

HTMX = {"HX-Request": "true"}
GRAPH_BREAK = (Path(__file__).parent.parent / "repros" / "dynamo_graph_break.py").read_text()


@pytest.fixture
def gpu7(db) -> Runner:
    """A registered GPU runner."""
    return Runner.objects.create(name="gpu-7", device="cuda", registered_by="tests", salt="s7")


@pytest.fixture
def other(db) -> Runner:
    """Another registered runner."""
    return Runner.objects.create(name="other", device="cpu", registered_by="tests", salt="so")


def _given(issue, runner: Runner, **fields) -> BisectionRun:
    """A run the coordinator gave to `runner` (its token made), no runner having said anything yet."""
    return BisectionRun.objects.create(
        issue=issue, repro_code="import torch", job_token="the-assignment", assigned_to=runner, **fields
    )


def _report(run, kind, *, message="m1", attempt="a1", token=None, boot="b1", **body) -> dict:
    return jobs.Report(
        kind, run.pk, token or run.job_token, message, attempt, "whatever it says", boot, {"device": "cpu", **body}
    ).as_message()


def _record(runner, *reports):
    return [coordinator.record(runner, report) for report in reports]


def _beat(runner: Runner, *, sent_at: float | None = None, **beat) -> None:
    body = {"boot": "b1", "device": runner.device, "lanes": ["gpu", "gpu_auto"], "builds": {}, "hardware": {}, **beat}
    coordinator.record_heartbeat(runner, body, sent_at=sent_at or timezone.now().timestamp())


# --- the coordinator's rules -----------------------------------------------------------------------------------


def test_it_refuses_a_report_from_a_runner_the_run_was_not_given_to(issue, gpu7, other):
    run = _given(issue, gpu7)
    _record(other, _report(run, jobs.STARTED), _report(run, jobs.RESULT, results=PASSED))
    run.refresh_from_db()
    assert (run.status, run.results, run.worker) == ("queued", [], "")
    other.refresh_from_db()
    assert f"a result report for run {run.pk}, which is not given to it" in other.refused  # the last refused


def test_it_refuses_a_report_of_an_earlier_assignment(issue, gpu7):
    run = _given(issue, gpu7)
    _record(gpu7, _report(run, jobs.STARTED, token="an-older-assignment"))
    run.refresh_from_db()
    assert run.status == "queued"
    gpu7.refresh_from_db()
    assert "of an earlier assignment" in gpu7.refused


def test_it_refuses_every_report_for_a_run_given_to_no_runner(issue, gpu7):
    run = BisectionRun.objects.create(issue=issue, repro_code="import torch")  # queued, given to nobody yet
    assert coordinator.record(gpu7, _report(run, jobs.RESULT, token="", results=PASSED)) is None
    run.refresh_from_db()
    assert run.status == "queued"


def test_it_counts_only_the_first_result_and_decides_the_verdict_itself(issue, gpu7):
    make_label("module: inductor")
    run = _given(issue, gpu7)
    # The runner's own "labels" are not read: the coordinator decides the verdict from what ran (bisection/verdict.py).
    forged_labels = [{"label": "high priority", "rule_id": "R11", "evidence": "trust me"}]
    first = _report(run, jobs.RESULT, results=INDUCTOR_RAISED, torch_version="2.13.0", labels=forged_labels)
    later = _report(run, jobs.RESULT, results=PASSED, torch_version="9.9.9")
    done, again = _record(gpu7, _report(run, jobs.STARTED), first, later)[1:]
    assert done is not None and again is None
    run.refresh_from_db()
    assert (run.status, run.torch_version, run.outcome) == ("done", "2.13.0", "reproduced")
    assert [label["label"] for label in run.verdict_labels] == ["module: inductor"]
    assert issue.suggestions.filter(label="high priority").count() == 0


def test_it_records_the_registered_runner_never_the_name_a_report_gives(issue, gpu7):
    run = _given(issue, gpu7)
    _record(gpu7, _report(run, jobs.STARTED))
    run.refresh_from_db()
    assert (run.runner, run.worker) == ("gpu-7", "gpu-7 (cuda)")


def test_it_refuses_a_copy_of_the_job_while_the_first_message_runs_it(issue, gpu7):
    run = _given(issue, gpu7)
    _record(gpu7, _report(run, jobs.STARTED, message="m1"))
    _record(
        gpu7,
        _report(run, jobs.STARTED, message="m2"),  # a copy of the job
        _report(run, jobs.PROGRESS, message="m2", mode="aot_eager", results=PASSED[:2]),
        _report(run, jobs.RESULT, message="m2", results=PASSED),
    )
    run.refresh_from_db()
    assert (run.status, run.message_id, run.results) == ("running", "m1", [])


def test_it_ends_the_run_when_its_own_message_runs_again_as_its_runner_died(issue, gpu7):
    run = _given(issue, gpu7)
    _record(gpu7, _report(run, jobs.STARTED, message="m1", attempt="a1"))
    _record(gpu7, _report(run, jobs.STARTED, message="m1", attempt="a2"))  # acks_late: the broker gave the message back
    run.refresh_from_db()
    assert run.status == "failed" and "died mid-run (killed, or out of memory); start it again" in run.error
    assert coordinator.record(gpu7, _report(run, jobs.RESULT, message="m1", attempt="a2", results=PASSED)) is None


def test_it_keeps_the_newest_progress_when_reports_arrive_out_of_order(issue, gpu7):
    run = _given(issue, gpu7)
    _record(
        gpu7,
        _report(run, jobs.STARTED),
        _report(run, jobs.PROGRESS, mode="aot_eager", results=PASSED[:2]),
        _report(run, jobs.PROGRESS, mode="dynamo_eager", results=PASSED[:1]),  # sent earlier, arrived later
    )
    run.refresh_from_db()
    assert run.current_mode == "aot_eager" and len(run.results) == 2


def test_it_takes_a_result_that_overtook_its_start(issue, gpu7):
    run = _given(issue, gpu7)
    assert _record(gpu7, _report(run, jobs.RESULT, results=PASSED), _report(run, jobs.STARTED))[0] is not None
    run.refresh_from_db()
    assert run.status == "done" and run.worker == "gpu-7 (cuda)"


@pytest.mark.parametrize(
    "report",
    [
        "a string",
        {"kind": "result"},
        {"kind": "result", "run_id": "1", "token": "x", "message_id": "m", "attempt": "a"},
        {"kind": "delete everything", "run_id": 1, "token": "x", "message_id": "m", "attempt": "a"},
    ],
)
def test_it_refuses_a_malformed_report_whole(issue, gpu7, report):
    run = _given(issue, gpu7)
    assert coordinator.record(gpu7, report) is None
    run.refresh_from_db()
    assert run.status == "queued"
    gpu7.refresh_from_db()
    assert gpu7.refused.startswith("a malformed report: ")


@pytest.mark.parametrize(
    ("results", "why"),
    [
        ([{"status": "passed"}], "result 0 has no mode"),
        ([{"mode": "eager"}], "result 0 has no status"),
        (["eager passed"], "result 0 is not an object"),
        ({"mode": "eager"}, "results is not a list"),
    ],
)
def test_it_refuses_a_result_missing_a_field_with_its_reason_and_leaves_the_run_as_it_was(issue, gpu7, results, why):
    run = _given(issue, gpu7)
    _record(gpu7, _report(run, jobs.STARTED), _report(run, jobs.PROGRESS, mode="eager", results=PASSED[:1]))
    assert coordinator.record(gpu7, _report(run, jobs.RESULT, results=results)) is None
    run.refresh_from_db()
    assert (run.status, run.results, run.verdict_labels) == ("running", PASSED[:1], [])
    gpu7.refresh_from_db()
    assert why in gpu7.refused


def test_it_refuses_results_larger_than_any_run_makes(issue, gpu7):
    run = _given(issue, gpu7)
    huge = [{"mode": f"m{i}", "status": "raised", "phase": "x" * 9000} for i in range(60)]
    _record(gpu7, _report(run, jobs.STARTED), _report(run, jobs.RESULT, results=huge))
    run.refresh_from_db()
    assert run.status == "running" and run.results == []


def test_it_puts_a_run_that_made_way_back_in_the_queue_for_another_runner(issue, gpu7):
    run = _given(issue, gpu7, automatic=True)
    _record(gpu7, _report(run, jobs.STARTED))
    _record(gpu7, _report(run, jobs.MADE_WAY))
    run.refresh_from_db()
    assert (run.status, run.started_at, run.message_id, run.assigned_to, run.job_token) == (
        "queued",
        None,
        "",
        None,
        "",
    )
    assert coordinator.record(gpu7, _report(run, jobs.RESULT, token="the-assignment", results=PASSED)) is None


def test_it_puts_a_run_back_for_its_message_to_start_again_on_a_cold_shutdown(issue, gpu7):
    run = _given(issue, gpu7)
    _record(gpu7, _report(run, jobs.STARTED, message="m1", attempt="a1"), _report(run, jobs.PUT_BACK))
    run.refresh_from_db()
    assert (run.status, run.message_id, run.job_token, run.assigned_to) == ("queued", "", "the-assignment", gpu7)
    _record(gpu7, _report(run, jobs.STARTED, message="m1", attempt="a2"))  # the same message, given back by the broker
    run.refresh_from_db()
    assert run.status == "running" and run.attempt == "a2"


def test_it_ends_the_runs_of_a_runner_that_beats_again_after_a_restart(issue, gpu7):
    only_this_tests_workers()
    run = _given(issue, gpu7)
    _record(gpu7, _report(run, jobs.STARTED, boot="b1"))
    _beat(gpu7, boot="b1")
    run.refresh_from_db()
    assert run.status == "running"
    _beat(gpu7, boot="b2", hardware={"gpu": "NVIDIA H100 80GB HBM3"})
    run.refresh_from_db()
    assert run.status == "failed" and "gpu-7 was restarted while running this bisection" in run.error
    row = WorkerHeartbeat.objects.get(runner=gpu7)
    assert (row.name, row.boot, row.device, row.hardware) == ("gpu-7", "b2", "cuda", {"gpu": "NVIDIA H100 80GB HBM3"})


CANNOT_IMPORT = [
    {
        "mode": "eager",
        "status": "raised",
        "phase": "runtime",
        "exception": "ModuleNotFoundError",
        "message": "ModuleNotFoundError: No module named 'timm'",
        "blocker": {"kind": "missing_module", "name": "timm", "line": 0, "text": ""},
    }
]


def test_it_keeps_the_packages_a_runner_has_and_reads_them_in_a_verdict_that_cannot_run_here(issue, gpu7):
    """Issue 51: the heartbeat says what the runner has installed; a RESULT whose repro imports something else is
    "cannot run here" naming it, with G9's request, never a component."""
    only_this_tests_workers()
    _beat(gpu7, packages=["torch", "sympy"])
    _beat(gpu7, packages=["torch", "sympy", "numpy"], sent_at=timezone.now().timestamp() + 1)
    assert WorkerHeartbeat.objects.get(runner=gpu7).packages == ["torch", "sympy", "numpy"]

    run = _given(issue, gpu7)
    result = _report(run, jobs.RESULT, results=CANNOT_IMPORT, packages=["torch", "sympy", "numpy"])
    _record(gpu7, _report(run, jobs.STARTED), result)
    run.refresh_from_db()
    assert run.verdict_summary.startswith("Cannot run here: the repro imports timm")
    assert "not among the 3 packages it has installed" in run.verdict_summary
    assert [(x["label"], x["rule_id"]) for x in run.verdict_labels] == [("needs reproduction", "G9")]


def test_it_refuses_a_replayed_heartbeat(issue, gpu7):
    only_this_tests_workers()
    run = _given(issue, gpu7)
    _record(gpu7, _report(run, jobs.STARTED, boot="b2"))
    now = timezone.now().timestamp()
    _beat(gpu7, boot="b2", sent_at=now)
    _beat(gpu7, boot="b1", sent_at=now - 30)  # an old beat of the process before, sent again
    run.refresh_from_db()
    assert run.status == "running" and WorkerHeartbeat.objects.get(runner=gpu7).boot == "b2"
    gpu7.refresh_from_db()
    assert "not after the last one recorded (a replay)" in gpu7.refused


def test_it_removes_a_runners_row_when_that_runner_says_it_stopped(gpu7):
    only_this_tests_workers()
    now = timezone.now().timestamp()
    _beat(gpu7, boot="b2", sent_at=now - 2)
    coordinator.record_heartbeat(gpu7, {"boot": "b1", "stopped": True}, sent_at=now - 1)  # an older process's
    assert WorkerHeartbeat.objects.filter(runner=gpu7).exists()
    coordinator.record_heartbeat(gpu7, {"boot": "b2", "stopped": True}, sent_at=now)
    assert not WorkerHeartbeat.objects.filter(runner=gpu7).exists()


@pytest.mark.parametrize(
    ("beat", "why"),
    [
        ({"device": "cpu"}, "it says it serves 'cpu', and was registered for cuda"),
        ({"lanes": ["github"]}, "a cuda runner serves the lanes gpu, gpu_auto, gpu_recheck"),
        ({"lanes": ["gpu", "default"]}, "not ['gpu', 'default']"),
        ({"active": ["1"]}, "active is not a short list of run ids"),
        ({"slots": 0}, "waiting or slots"),
    ],
)
def test_it_takes_no_heartbeat_that_claims_what_the_runner_was_not_registered_for(gpu7, beat, why):
    only_this_tests_workers()
    _beat(gpu7, **beat)
    assert not WorkerHeartbeat.objects.exists()
    gpu7.refresh_from_db()
    assert why in gpu7.refused


def test_it_ends_the_runs_of_a_runner_gone_silent(issue, settings, gpu7, other):
    settings.WORKER_HEARTBEAT_STALE_S = 45
    only_this_tests_workers()
    long_ago = timezone.now() - timedelta(seconds=60)
    lost, held = _given(issue, gpu7), _given(issue, other)
    _record(gpu7, _report(lost, jobs.STARTED))
    _record(other, _report(held, jobs.STARTED))
    BisectionRun.objects.update(started_at=long_ago)
    WorkerHeartbeat.objects.create(name="gpu-7", runner=gpu7, queues=["gpu"], boot="b1", seen_at=long_ago)
    WorkerHeartbeat.objects.create(name="other", runner=other, queues=["cpu"], boot="b1")
    assert coordinator.fail_lost_runs() == 1
    lost.refresh_from_db(), held.refresh_from_db()
    assert lost.status == "failed" and "stopped sending heartbeats for 45 s" in lost.error
    assert held.status == "running"


# --- giving runs to runners ---------------------------------------------------------------------------------------


def _live(runner: Runner, *, lanes=None, builds=None, slots: int = 1, **fields) -> WorkerHeartbeat:
    lanes = lanes or sorted(BISECTION_QUEUES["gpu" if runner.device == "cuda" else "cpu"])
    return WorkerHeartbeat.objects.create(
        name=runner.name,
        runner=runner,
        queues=lanes,
        device=runner.device,
        builds=builds or {"default": "2.13.0"},
        boot="b1",
        slots=slots,
        sent_at=timezone.now(),
        **fields,
    )


def test_it_gives_a_persons_run_first_and_only_to_a_runner_that_serves_its_lane(
    issue, other, django_capture_on_commit_callbacks
):
    only_this_tests_workers()
    _live(other, lanes=["cpu_auto"])  # takes automatic runs only
    automatic = BisectionRun.objects.create(issue=issue, repro_code="x", automatic=True)
    person = BisectionRun.objects.create(issue=issue, repro_code="x")
    with django_capture_on_commit_callbacks() as sent:
        assert assignment.assign() == 1
    automatic.refresh_from_db(), person.refresh_from_db()
    assert (automatic.assigned_to, person.assigned_to) == (other, None) and len(sent) == 1
    assert automatic.job_token


def test_it_gives_a_runner_no_more_runs_than_its_slots_and_no_run_twice(issue, other, gpu7):
    only_this_tests_workers()
    _live(other)
    _live(gpu7)  # a GPU runner takes no cpu run
    runs = [BisectionRun.objects.create(issue=issue, repro_code="x") for _ in range(3)]
    assert assignment.assign() == 1
    assert assignment.assign() == 0
    assert [r.assigned_to_id for r in BisectionRun.objects.filter(pk__in=[r.pk for r in runs]).order_by("pk")] == [
        other.pk,
        None,
        None,
    ]


def test_it_gives_a_persons_run_to_a_runner_busy_with_an_automatic_one_which_makes_way(issue, other):
    only_this_tests_workers()
    _live(other)
    automatic = BisectionRun.objects.create(issue=issue, repro_code="x", automatic=True)
    assert assignment.assign() == 1
    person = BisectionRun.objects.create(issue=issue, repro_code="x")
    another = BisectionRun.objects.create(issue=issue, repro_code="x")
    assert assignment.assign() == 1  # the person's run waits in its queue; the automatic run makes way for it
    person.refresh_from_db(), another.refresh_from_db(), automatic.refresh_from_db()
    assert (person.assigned_to, another.assigned_to, automatic.assigned_to) == (other, None, other)


def test_it_gives_a_run_of_a_build_only_to_a_runner_hosting_it(issue, other):
    only_this_tests_workers()
    _live(other, builds={"default": "2.13.0"})
    run = BisectionRun.objects.create(issue=issue, repro_code="x", build="nightly")
    assert assignment.assign() == 0
    run.refresh_from_db()
    assert run.assigned_to is None


def test_it_gives_nothing_to_a_revoked_or_silent_runner(issue, other, gpu7, settings):
    only_this_tests_workers()
    _live(other, seen_at=timezone.now() - timedelta(seconds=settings.WORKER_HEARTBEAT_STALE_S + 5))
    Runner.objects.filter(pk=gpu7.pk).update(revoked_at=timezone.now())
    _live(gpu7)
    BisectionRun.objects.create(issue=issue, repro_code="x")
    BisectionRun.objects.create(issue=issue, repro_code="x", device="cuda")
    assert assignment.assign() == 0


def test_it_takes_back_a_job_its_runner_neither_holds_nor_waits_for(issue, other, settings):
    only_this_tests_workers()
    run = BisectionRun.objects.create(issue=issue, repro_code="x")
    _live(other)
    assignment.assign()
    BisectionRun.objects.filter(pk=run.pk).update(assigned_at=timezone.now() - timedelta(seconds=30))
    # Its beat: nothing held, nothing waiting in its queue: the job's message was lost on the broker.
    coordinator.record_heartbeat(
        other,
        {"boot": "b1", "device": "cpu", "lanes": ["cpu"], "builds": {"default": "2.13.0"}, "active": [], "waiting": 0},
        sent_at=timezone.now().timestamp(),
    )
    run.refresh_from_db()
    # Taken back, and given again at once (a new token: the lost message, should it come back, claims nothing).
    assert run.assigned_to == other and run.status == "queued"


def test_it_leaves_a_job_its_runner_holds_or_has_waiting(issue, other):
    only_this_tests_workers()
    run = BisectionRun.objects.create(issue=issue, repro_code="x")
    _live(other)
    assignment.assign()
    token = BisectionRun.objects.get(pk=run.pk).job_token
    BisectionRun.objects.filter(pk=run.pk).update(assigned_at=timezone.now() - timedelta(seconds=30))
    beat = {"boot": "b1", "device": "cpu", "lanes": ["cpu"], "builds": {"default": "2.13.0"}}
    coordinator.record_heartbeat(other, {**beat, "active": [run.pk], "waiting": 0}, sent_at=timezone.now().timestamp())
    coordinator.record_heartbeat(other, {**beat, "active": [], "waiting": 1}, sent_at=timezone.now().timestamp() + 1)
    assert BisectionRun.objects.get(pk=run.pk).job_token == token


def test_it_takes_back_the_jobs_of_a_silent_runner_for_a_live_one(issue, other, gpu7, settings):
    only_this_tests_workers()
    third = Runner.objects.create(name="third", device="cpu", registered_by="tests")
    stale = timezone.now() - timedelta(seconds=settings.WORKER_HEARTBEAT_STALE_S + 5)
    run = BisectionRun.objects.create(issue=issue, repro_code="x", assigned_to=other, assigned_at=stale, job_token="t")
    _live(other, seen_at=stale)
    _live(third)
    coordinator.fail_lost_runs()
    run.refresh_from_db()
    assert run.assigned_to == third and run.job_token != "t"


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


@pytest.mark.parametrize(
    ("extra", "refusal"),
    [
        ({"DATABASE_URL": "postgres://db/triage"}, "a runner must not hold DATABASE_URL"),
        (
            {"CELERY_BROKER_URL": "redis://broker/0", "SECRET_KEY": "k"},
            "a runner must not hold CELERY_BROKER_URL, SECRET_KEY",
        ),
        ({"RUNNER_SECRET": ""}, "RUNNER_NAME and RUNNER_SECRET are not set"),
    ],
)
def test_it_refuses_to_start_a_runner_holding_what_it_must_not(tmp_path, extra, refusal):
    env = {
        "RUNNER_BROKER_URL": "memory://",
        "RUNNER_NAME": "r",
        "RUNNER_SECRET": "s",
        "TRIAGE_VAR_DIR": str(tmp_path),
        "PATH": os.environ["PATH"],
        **extra,
    }
    command = [sys.executable, "-m", "celery", "-A", "triage_site.runner", "worker", "--pool", "solo", "-n", "r@x"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert refusal in result.stdout + result.stderr


def test_it_refuses_a_dashboard_worker_asked_to_read_a_runner_lane(tmp_path):
    env = {"TRIAGE_VAR_DIR": str(tmp_path), "PATH": os.environ["PATH"], "CELERY_BROKER_URL": "memory://"}
    command = [sys.executable, "-m", "celery", "-A", "triage_site", "worker", "-Q", "default,cpu", "--pool", "solo"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "would read the runner lanes cpu" in result.stdout + result.stderr


# --- a real runner, through the broker --------------------------------------------------------------------------

ALLOWED = {
    "RUNNER_BROKER_URL",
    "RUNNER_NAME",
    "RUNNER_SECRET",
    "TRIAGE_VAR_DIR",
    "TORCH_BUILDS",
    "WORKER_HEARTBEAT_S",
    "PATH",
    "PYTHONUNBUFFERED",
}


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
