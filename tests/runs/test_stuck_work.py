"""Work that gets stuck: a worker killed mid-decision, a runner killed mid-bisection, and work no worker takes.

The kill tests start their own `celery worker` processes on the real broker (Redis, and kombu's
filesystem broker of the embedded default), SIGKILL them mid-task, and let a worker that comes back (or the
coordinator that records what runners report) recover the row.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.utils import timezone
from kombu import Connection

from rubric_app import dispatch, processes
from rubric_app.github.applying import HEARTBEAT_STALE_AFTER, apply_decision
from rubric_app.models import BisectionRun, GitHubWrite, TriageDecision, WorkerHeartbeat
from rubric_app.runs import coordinator, recovery
from rubric_app.tasks import requeue_stuck_task
from tests.factories import make_issue, make_label, sleeping_repro
from tests.fakegithub import TOKEN, FakeGitHub
from tests.helpers import (
    ROOT,
    RegisteredRunner,
    RunnerProcess,
    child_database_url,
    only_this_tests_workers,
    runner_env,
    runner_name,
    wait_until,
    wait_until_finished,
    worker_command,
)
from triage_site.celery import app

# Every mode sleeps: the runner is surely mid-run when it is killed.
SLOW_REPRO = sleeping_repro(20)
Status = TriageDecision.Status
ADD = ["module: dynamo", "module: inductor", "triaged"]
SEEN = ["needs reproduction", "oncall: pt2"]


def _applying_decision(issue, user, **fields) -> TriageDecision:
    return TriageDecision.objects.create(
        issue=issue, user=user, labels_seen=SEEN, labels_added=ADD, labels_removed=["needs reproduction"], **fields
    )


@pytest.fixture
def awaiting_repro(sync_issue):
    """#5101, waiting for reproduction, on the fake GitHub and locally."""
    return sync_issue(5101, SEEN)


def _writes(fake) -> list[tuple[str, str]]:
    return [
        (r.method, r.path.rsplit("/", 1)[-1] if r.method == "DELETE" else r.sent)
        for r in fake.requests
        if r.method != "GET"
    ]


# --- resuming a decision from GitHub's state (domain, in process) ---------------------------------


@pytest.mark.django_db
def test_it_resumes_a_dead_workers_decision_writing_only_what_github_lacks(awaiting_repro, triager, fake_github):
    # The dead worker added `module: dynamo` (audited) and `module: inductor` (landed, never audited).
    fake_github.set_labels(5101, SEEN + ["module: dynamo", "module: inductor"])
    stale = timezone.now() - HEARTBEAT_STALE_AFTER - timedelta(seconds=5)
    decision = _applying_decision(awaiting_repro, triager, status=Status.APPLYING, heartbeat_at=stale)

    decision = apply_decision(decision.pk)

    assert decision.status == Status.APPLIED, decision.result_message
    assert fake_github.labels_of(5101) == ["module: dynamo", "module: inductor", "oncall: pt2", "triaged"]
    assert _writes(fake_github) == [("POST", '{"labels": ["triaged"]}'), ("DELETE", "needs reproduction")]
    assert (
        "GitHub already had: add label module: dynamo, add label module: inductor. "
        "Finished on GitHub: add label triaged, remove label needs reproduction."
    ) in decision.result_message
    assert list(decision.writes.values_list("action", "target", "ok")) == [
        ("read_labels", "#5101", True),
        ("read_label", "triaged", True),  # only the label it still adds is asked of GitHub
        ("add_label", "triaged", True),
        ("remove_label", "needs reproduction", True),
    ]
    assert awaiting_repro.label_names() == ["module: dynamo", "module: inductor", "oncall: pt2", "triaged"]


@pytest.mark.django_db
def test_it_leaves_a_decision_alone_while_its_worker_beats(awaiting_repro, triager, fake_github):
    decision = _applying_decision(awaiting_repro, triager, status=Status.APPLYING, heartbeat_at=timezone.now())

    assert apply_decision(decision.pk).status == Status.APPLYING
    assert fake_github.requests == []  # a live worker owns it: not even a read


@pytest.mark.django_db
def test_it_reports_exactly_what_landed_when_someone_else_changed_the_issue_meanwhile(
    awaiting_repro, triager, fake_github
):
    fake_github.set_labels(5101, SEEN + ["module: dynamo", "high priority"])
    decision = _applying_decision(
        awaiting_repro,
        triager,
        status=Status.APPLYING,
        heartbeat_at=None,
        created_at=timezone.now() - timedelta(hours=1),
    )

    decision = apply_decision(decision.pk)

    assert decision.status == Status.CONFLICT
    assert "someone else changed #5101 since (+high priority)" in decision.result_message
    assert "Of this decision GitHub has: add label module: dynamo. Nothing more was written" in decision.result_message
    assert _writes(fake_github) == []
    assert list(decision.writes.values_list("action", flat=True)) == ["read_labels"]  # the re-read is audited


@pytest.mark.django_db
def test_it_sweeps_up_only_decisions_whose_worker_went_silent(awaiting_repro, triager):
    long_ago = timezone.now() - HEARTBEAT_STALE_AFTER - timedelta(minutes=1)
    silent = _applying_decision(awaiting_repro, triager, status=Status.APPLYING, heartbeat_at=long_ago)
    _applying_decision(
        awaiting_repro, triager, status=Status.APPLYING, heartbeat_at=timezone.now(), created_at=long_ago
    )
    assert list(TriageDecision.objects.stuck(timezone.now() - HEARTBEAT_STALE_AFTER)) == [silent]


# --- work no worker takes ---------------------------------------------------------------------


@pytest.mark.django_db
def test_it_ends_work_no_worker_took_in_time_and_says_why(awaiting_repro, triager, settings):
    settings.QUEUE_WAIT_TIMEOUT_MINUTES = 30
    waited = timezone.now() - timedelta(minutes=31)
    only_this_tests_workers()
    WorkerHeartbeat.objects.create(name="cpu@box", queues=["cpu", "default"], device="cpu")
    gpu_run = BisectionRun.objects.create(issue=awaiting_repro, device="both", repro_code="x", created_at=waited)
    cpu_run = BisectionRun.objects.create(issue=awaiting_repro, device="cpu", repro_code="x", created_at=waited)
    fresh = BisectionRun.objects.create(issue=awaiting_repro, device="cuda", repro_code="x")
    decision = _applying_decision(awaiting_repro, triager, created_at=waited)  # pending: no github worker took it

    requeue_stuck_task()

    gpu_run.refresh_from_db(), cpu_run.refresh_from_db(), fresh.refresh_from_db(), decision.refresh_from_db()
    assert gpu_run.status == "failed" and gpu_run.finished_at
    assert "No worker of the gpu queue took this run within 30 min (no gpu worker is online)" in gpu_run.error
    assert cpu_run.status == "failed" and "(1 cpu worker(s) are online but none took it)" in cpu_run.error
    assert fresh.status == "queued"
    assert decision.status == Status.FAILED and decision.finished_at
    assert (
        "No worker of the github queue took this decision within 30 min (no github worker is online)"
        in decision.result_message
    )
    assert "Nothing was written" in decision.result_message


@pytest.mark.django_db
def test_it_ends_runs_left_running_past_their_limit_from_the_sweep(awaiting_repro):
    overdue = timezone.now() - coordinator.longest_run() - timedelta(minutes=1)
    dead = BisectionRun.objects.create(issue=awaiting_repro, repro_code="x", status="running", started_at=overdue)
    alive = BisectionRun.objects.create(
        issue=awaiting_repro, repro_code="x", status="running", started_at=timezone.now()
    )

    requeue_stuck_task()  # no other run starts: the sweep alone must end it

    dead.refresh_from_db(), alive.refresh_from_db()
    assert dead.status == "failed" and "stopped (killed or lost) without finishing" in dead.error
    assert alive.status == "running"


# --- real workers, killed ---------------------------------------------------------------------


@dataclass
class Broker:
    """One real broker the test's workers and the test itself talk to."""

    kind: str
    url: str
    transport_options: dict
    github: FakeGitHub
    env: dict = field(default_factory=dict)
    workers: list = field(default_factory=list)

    def send(self, task: str, args=(), *, queue: str, **options) -> None:
        """Publish a task message (by its name, dispatch.py) as the web process or beat would, on this broker."""
        with Connection(self.url, transport_options=self.transport_options) as conn:
            app.send_task(task, args, queue=queue, connection=conn, **options)

    def start_run(self, run: BisectionRun) -> None:
        """Queue a run as the page does: the coordinator (a worker of `default` on this broker) gives it to a runner."""
        self.send(dispatch.ASSIGN_RUNS, (), queue="default")

    def start_runner(self, registered: RegisteredRunner, *, var_dir: Path) -> subprocess.Popen:
        """Start a registered runner on this broker's runners' broker; returns its process once its beat arrived."""
        if self.kind == "redis":
            env = runner_env(var_dir, name=registered.name, secret=registered.secret())
        else:  # the embedded default's: a folder under TRIAGE_VAR_DIR, which the coordinator shares
            env = runner_env(
                var_dir, name=registered.name, secret=registered.secret(), RUNNER_BROKER_URL="filesystem://"
            )
            env["TRIAGE_VAR_DIR"] = self.env["TRIAGE_VAR_DIR"]
        env["WORKER_HEARTBEAT_S"] = "1"
        log_dir = ROOT / "var"
        log = open(log_dir / f"test-{registered.name}.log", "w") if log_dir.is_dir() else subprocess.DEVNULL
        proc = RunnerProcess(registered, env=env, log=log).start().proc
        self.workers.append(proc)
        return proc

    def start_worker(
        self, queues: list[str], *, pool: str = "solo", name: str = "", **env
    ) -> tuple[subprocess.Popen, str]:
        """Start `celery worker` on this broker and the test database; returns (process, name) once it is up."""
        name = name or f"stuck-{uuid.uuid4().hex[:8]}@{socket.gethostname()}"
        db_url = child_database_url()
        full_env = {
            **os.environ,
            "DATABASE_URL": db_url,
            "CELERY_BROKER_URL": self.url,
            "PYTHONUNBUFFERED": "1",
            "GITHUB_API_URL": self.github.url,
            "GITHUB_TOKEN": TOKEN,
            "GITHUB_REPO": self.github.repo,
            "GITHUB_WRITE_INTERVAL": "0.05",
            "WORKER_HEARTBEAT_S": "1",
            **self.env,
            **env,
        }
        log_dir = ROOT / "var"
        log = open(log_dir / f"test-{name.split('@')[0]}.log", "w") if log_dir.is_dir() else subprocess.DEVNULL
        proc = subprocess.Popen(
            worker_command(name, ",".join(queues), pool=pool),
            cwd=ROOT,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.workers.append(proc)
        # Its own heartbeat says it is consuming: the feature under test doubles as the readiness probe.
        wait_until(lambda: proc.poll() is not None or WorkerHeartbeat.objects.filter(name=name).exists(), timeout=90)
        assert proc.poll() is None, f"worker {name} exited with {proc.returncode}"
        return proc, name

    def kill(self, proc: subprocess.Popen) -> None:
        """SIGKILL the worker and everything in its process group: no warm shutdown, no ack, no restore."""
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


@pytest.fixture(params=["redis", "filesystem"])
def broker(request, tmp_path, fake_github_server):
    if request.param == "redis":
        found = Broker(
            "redis", os.environ["CELERY_BROKER_URL"], dict(settings.CELERY_BROKER_TRANSPORT_OPTIONS), fake_github_server
        )
    else:
        folders = {sub: tmp_path / "broker" / sub for sub in ("out", "processed", "control")}
        for folder in folders.values():
            folder.mkdir(parents=True)
        found = Broker(
            "filesystem",
            "filesystem://",
            {
                "data_folder_in": str(folders["out"]),
                "data_folder_out": str(folders["out"]),
                "processed_folder": str(folders["processed"]),
                "control_folder": str(folders["control"]),
                "store_processed": False,
            },
            fake_github_server,
            env={"TRIAGE_VAR_DIR": str(tmp_path)},
        )
    yield found
    for proc in found.workers:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def _private_queue() -> str:
    """A queue only this test's first worker consumes (the session's worker may share the Redis broker)."""
    return f"stuck-{uuid.uuid4().hex[:8]}"


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_finishes_a_decision_whose_worker_was_killed_mid_write_as_soon_as_a_worker_restarts(
    broker, fake_github, triager
):
    for name in ADD + SEEN:
        make_label(name, github=fake_github)
    fake_github.add_issue(5101, labels=SEEN)
    issue = make_issue(5101, labels=SEEN)
    decision = _applying_decision(issue, triager)  # pending
    gate = threading.Event()
    # The second write hangs until the worker is dead, then lands: GitHub applied it, nobody audited it.
    fake_github.inject("race", method="POST", path=r"/labels$", after=1, run=lambda: gate.wait(120))
    queue = _private_queue()
    first, _ = broker.start_worker([queue])

    broker.send(dispatch.APPLY_DECISION, (decision.pk,), queue=queue)
    wait_until(lambda: len(fake_github.requests_to(r"/labels$", "POST")) == 2, timeout=90)
    broker.kill(first)
    gate.set()
    wait_until(lambda: "module: inductor" in fake_github.labels_of(5101), timeout=30)
    # Started again: on its first heartbeat it sees the holder's process gone and resumes the decision from
    # what GitHub shows; no sweep, no waiting out the decision's heartbeat (rubric_app/runs/recovery.py).
    broker.start_worker(["default", "github"])

    wait_until_finished(decision, timeout=60)  # within a minute of the restart, as a triager waits
    assert decision.status == Status.APPLIED, decision.result_message
    assert fake_github.labels_of(5101) == ["module: dynamo", "module: inductor", "oncall: pt2", "triaged"]
    posts = [r.sent for r in fake_github.requests_to(r"/labels$", "POST")]
    assert posts == ['{"labels": ["module: dynamo"]}', '{"labels": ["module: inductor"]}', '{"labels": ["triaged"]}']
    assert "GitHub already had: add label module: dynamo, add label module: inductor" in decision.result_message
    assert "Finished on GitHub: add label triaged, remove label needs reproduction" in decision.result_message
    audit = list(GitHubWrite.objects.filter(decision=decision).order_by("at", "pk").values_list("action", "target"))
    assert audit == [
        ("read_labels", "#5101"),
        ("read_label", "module: dynamo"),  # the first worker's: GitHub has each label it adds (none is invented)
        ("read_label", "module: inductor"),
        ("read_label", "triaged"),
        ("add_label", "module: dynamo"),
        ("read_labels", "#5101"),
        ("read_label", "triaged"),  # the second's: only the label it still adds
        ("add_label", "triaged"),
        ("remove_label", "needs reproduction"),
    ]


@pytest.fixture
def registered(broker):
    """A registered runner of this test (its broker user made on Redis), forgotten afterwards."""
    found = RegisteredRunner(runner_name(f"stuck-{uuid.uuid4().hex[:6]}"))
    found.ensure()
    yield found
    found.forget()


@pytest.mark.torch
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_ends_a_bisection_whose_runner_was_killed_as_soon_as_the_runner_restarts(
    broker, registered, triager, tmp_path
):
    issue = make_issue(5201)
    run = BisectionRun.objects.create(issue=issue, requested_by=triager, repro_code=SLOW_REPRO, repro_style="module")
    broker.start_worker(["default"])  # the coordinator: gives the run, records what the runner reports
    first = broker.start_runner(registered, var_dir=tmp_path / "r1")

    broker.start_run(run)
    wait_until(
        lambda: BisectionRun.objects.filter(pk=run.pk, status="running").exclude(current_mode="").exists(), timeout=240
    )
    broker.kill(first)
    broker.start_runner(registered, var_dir=tmp_path / "r2")

    wait_until_finished(run, timeout=60)  # not the sweep, nor the run's time limit: the restart's first beat
    assert run.status == "failed"
    assert f"The runner {registered.name} was restarted while running this bisection" in run.error


@pytest.mark.torch
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_ends_a_bisection_whose_runner_went_silent(broker, registered, triager, settings, tmp_path):
    settings.WORKER_HEARTBEAT_STALE_S = 5
    issue = make_issue(5202)
    run = BisectionRun.objects.create(issue=issue, requested_by=triager, repro_code=SLOW_REPRO, repro_style="module")
    broker.start_worker(["default"], WORKER_HEARTBEAT_STALE_S="5")  # on each beat it looks for lost runs
    first = broker.start_runner(registered, var_dir=tmp_path)

    broker.start_run(run)
    wait_until(
        lambda: BisectionRun.objects.filter(pk=run.pk, status="running").exclude(current_mode="").exists(), timeout=240
    )
    broker.kill(first)  # and never started again

    wait_until_finished(run, timeout=60)
    assert run.status == "failed" and "stopped sending heartbeats for 5 s" in run.error


@pytest.mark.django_db
def test_it_tells_a_dead_holder_from_a_live_one(triager, awaiting_repro):
    here = socket.gethostname()
    gone = subprocess.Popen(["true"])
    gone.wait()  # reaped: its pid names no process now
    assert processes.holder(f"{here}:{os.getpid()} (cpu)") == (here, os.getpid())
    assert processes.holder("") is None and processes.holder("no pid") is None
    assert not processes.is_dead(f"{here}:{os.getpid()}", set(), here)  # this very process
    assert processes.is_dead(f"{here}:{gone.pid}", set(), here)
    assert not processes.is_dead("other-host:1", {"other-host"}, here)  # its host still beats
    assert processes.is_dead("other-host:1", set(), here)  # its host went silent
    alive = _applying_decision(awaiting_repro, triager, status="applying", worker=f"{here}:{os.getpid()}")
    dead = _applying_decision(awaiting_repro, triager, status="applying", worker=f"{here}:{gone.pid}")
    resumed, ended = recovery.recover_orphans()
    assert resumed == [dead.pk] and ended == 0
    assert recovery.recover_orphans() == ([], 0)  # taken over once
    alive.refresh_from_db()
    assert alive.worker == f"{here}:{os.getpid()}"


def _cmdline(pid: int) -> bytes:
    return Path(f"/proc/{pid}/cmdline").read_bytes()


def _children(pid: int) -> list[int]:
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found


@pytest.mark.torch
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_fails_a_run_whose_pool_process_died_when_its_message_comes_back(broker, registered, triager, tmp_path):
    issue = make_issue(5301)
    run = BisectionRun.objects.create(issue=issue, requested_by=triager, repro_code=SLOW_REPRO, repro_style="module")
    broker.start_worker(["default"])
    runner = broker.start_runner(registered, var_dir=tmp_path)

    broker.start_run(run)
    wait_until(
        lambda: BisectionRun.objects.filter(pk=run.pk, status="running").exclude(current_mode="").exists(), timeout=240
    )
    # Concurrency 1: one pool process, running the task (a fork of the runner: its command line; the heartbeat's
    # short probe of a build's torch version is a child too, with another).
    (child,) = [pid for pid in _children(runner.pid) if _cmdline(pid) == _cmdline(runner.pid)]
    os.kill(child, signal.SIGKILL)  # reject_on_worker_lost: the message goes back to the runner's queue

    # The same message run again by the runner's next pool process is another attempt of the claiming message: its
    # first attempt died. Whatever the broker's redelivered flag says (the filesystem broker sets none).
    wait_until_finished(run)
    assert run.status == "failed" and "died mid-run" in run.error


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_writes_a_held_decision_when_a_github_worker_comes_back_not_at_the_sweep(broker, fake_github, triager):
    for name in ADD + SEEN:
        make_label(name, github=fake_github)
    fake_github.add_issue(5401, labels=SEEN)
    decision = _applying_decision(
        make_issue(5401, labels=SEEN), triager, not_before=timezone.now() + timedelta(seconds=3)
    )  # a meeting's decision, held for its undo window
    queue = _private_queue()
    first, _ = broker.start_worker([queue])
    broker.send(dispatch.APPLY_DECISION, (decision.pk,), queue=queue, countdown=3)  # the worker holds it until then
    wait_until(lambda: first.poll() is None and broker.kind, timeout=5)
    broker.kill(first)  # with the message it held: lost (filesystem) or back only after the visibility timeout

    broker.start_worker(["github"])  # a github worker starting sends every pending decision again

    wait_until_finished(decision, timeout=60)
    assert decision.status == Status.APPLIED, decision.result_message
    assert fake_github.labels_of(5401) == ["module: dynamo", "module: inductor", "oncall: pt2", "triaged"]
