"""Waiting on workers and processes, and running a test file on the embedded default's SQLite."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.db import connection
from django.test import override_settings

from rubric_app.models import WorkerHeartbeat
from rubric_app.runs import broker, registration

ROOT = Path(__file__).resolve().parent.parent


def bisect_here(run, *, name: str = "here"):
    """Run a queued run's job in this process: the runner's code (runs/runner.py) in the sandbox, the run given to a
    registered runner and each report recorded as the coordinator records that runner's authenticated message
    (record_report_task), only the broker and the gateway left out (the worker tests take that path). Returns the
    run, refreshed."""
    import secrets

    from django.db import transaction
    from django.utils import timezone

    from rubric_app.models import BisectionRun, Runner
    from rubric_app.runs import assignment, coordinator, jobs, workers
    from rubric_app.runs import runner as runners
    from rubric_app.triage import followups

    runner, _ = Runner.objects.get_or_create(name=name, defaults={"device": "cpu", "registered_by": "tests"})
    token = secrets.token_urlsafe(24)
    BisectionRun.objects.filter(pk=run.pk).update(assigned_to=runner, assigned_at=timezone.now(), job_token=token)
    run.refresh_from_db()

    def send(kind: str, body: dict) -> None:
        assert kind == jobs.REPORT
        with transaction.atomic():
            finished = coordinator.record(runner, body)
            if finished is not None:
                followups.run_finished(finished)

    job = assignment.job_for(run).as_message()
    runners.run_job(job, message_id=f"here-{run.pk}-{secrets.token_hex(4)}", boot=workers.boot, send=send)
    run.refresh_from_db()
    return run


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.1):
    """Poll predicate() until it returns a truthy value; return it, or fail after timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout} s")


def wait_until_finished(row, timeout: float = 90.0):
    """Poll a decision or bisection run (anything with is_finished) until a worker has ended it; return it."""

    def finished():
        row.refresh_from_db()
        return row.is_finished

    wait_until(finished, timeout=timeout)
    return row


def processes_with_cmdline(needle: bytes) -> list[int]:
    """Pids of the host's processes whose NUL-separated command line is exactly needle (escapee checks)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if fh.read() == needle:
                    found.append(int(pid))
        except OSError:
            continue
    return found


def passes_on_sqlite(test_file: str, tmp_path) -> None:
    """Run test_file again in a child pytest on a fresh SQLite database (the embedded default); fail with
    its output unless every test passed. Skipped when this run is on SQLite already."""
    if connection.vendor == "sqlite":
        pytest.skip("already running on SQLite")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DATABASE_URL", "CELERY_", "GITHUB_TOKEN", "PYTEST_XDIST_"))
    }
    env.update(
        DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}", CELERY_BROKER_URL="memory://", TRIAGE_VAR_DIR=str(tmp_path)
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", test_file, "-q", "-p", "no:cacheprovider", "-k", "not on_sqlite"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in summary and "failed" not in summary, summary


def child_database_url(name: str | None = None) -> str:
    """DATABASE_URL for a process a test starts (a worker, a server, a command): the test database this process
    uses (pytest-django's test_ name, xdist's suffix), not the one the environment names. name: when read before."""
    return os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + (name or connection.settings_dict["NAME"])


def only_this_tests_workers() -> None:
    """No worker heartbeats but the ones this test writes, until it ends: the session's Celery worker (and
    any a test started) beats into the same database every few seconds, and a row of theirs changes what
    "N workers are online" says. On PostgreSQL the table is locked for the test's transaction, so a beat
    waits for it to end instead of landing between the statements under test."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"LOCK TABLE {WorkerHeartbeat._meta.db_table} IN SHARE ROW EXCLUSIVE MODE")
    WorkerHeartbeat.objects.all().delete()


def runner_broker_url(name: str, secret: str) -> str:
    """The runners' broker URL of registered runner `name`: its own broker user (runs/broker.py) on the test broker."""
    parts = urlsplit(os.environ["CELERY_BROKER_URL"])
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{broker.broker_user(name)}:{secret}@{host}"))


def runner_env(var_dir, *, name: str, secret: str, **settings) -> dict[str, str]:
    """The whole environment of registered bisection runner `name`: its broker user's URL, its name and secret and its
    own settings, nothing else (no DATABASE_URL, SECRET_KEY, GitHub credential, TOKEN_ENCRYPTION_KEY, nor the
    dashboard's broker). var_dir: its TRIAGE_VAR_DIR, where it must create no database."""
    return {
        "RUNNER_BROKER_URL": runner_broker_url(name, secret),
        "RUNNER_NAME": name,
        "RUNNER_SECRET": secret,
        "TRIAGE_VAR_DIR": str(var_dir),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONUNBUFFERED": "1",
        **settings,
    }


@dataclass
class RegisteredRunner:
    """A runner the tests registered, kept registered across the test database's flushes (a transactional test
    truncates every table): the same row, salt and so secret each time, its broker user made once."""

    name: str
    device: str = "cpu"
    pk: int | None = None
    salt: str = ""

    def ensure(self):
        """The Runner row, made or put back as it was; returns it."""
        from rubric_app.models import Runner

        if self.pk is None:
            runner = registration.register(name=self.name, device=self.device, by="tests").runner
            self.pk, self.salt = runner.pk, runner.salt
            with override_settings(RUNNER_BROKER_ACL="manage"):
                registration.provision(runner)
            return runner
        runner, _ = Runner.objects.update_or_create(
            pk=self.pk,
            defaults={"name": self.name, "device": self.device, "salt": self.salt, "registered_by": "tests"},
        )
        Runner.objects.filter(pk=self.pk).update(revoked_at=None, revoked_by="")
        return runner

    def secret(self) -> str:
        from rubric_app.models import Runner

        return Runner(pk=self.pk, name=self.name, salt=self.salt).secret()

    def forget(self) -> None:
        """Delete its broker user (the session ends)."""
        with override_settings(RUNNER_BROKER_ACL="manage"):
            broker.remove(self.name)


def runner_name(role: str) -> str:
    """A runner name unique to this test process: broker users are the Redis server's, shared by every suite on it."""
    return f"t{os.getpid()}-{role}"


def wait_for_runner(name: str, since: float, timeout: float = 60) -> None:
    """Wait until runner `name`'s signed heartbeat, sent after `since` (time.time()), reached the database through the
    gateway: the whole path from the runner to the coordinator works."""
    from datetime import UTC, datetime

    after = datetime.fromtimestamp(since, tz=UTC)
    wait_until(
        lambda: WorkerHeartbeat.objects.filter(runner__name=name, sent_at__gte=after).exists(), timeout, interval=0.2
    )


def wait_for_worker(name: str, timeout: float = 60) -> None:
    from triage_site.celery import app

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if app.control.ping(destination=[name], timeout=1.0):
            return
    raise RuntimeError("the Celery worker did not answer a ping within 60 s")


def worker_command(
    name: str, queues: str, *, pool: str = "solo", loglevel: str = "INFO", concurrency: int = 1, beat_schedule: str = ""
) -> list[str]:
    """The command line of a real `celery worker` named `name` consuming `queues` ("a,b"), one task at a time unless
    concurrency says otherwise; beat_schedule: run beat in it too (-B, as `make run`'s cpu worker), keeping its
    schedule in that file."""
    return (
        [sys.executable, "-m", "celery", "-A", "triage_site", "worker", "-Q", queues]
        + ["--concurrency", str(concurrency), "--pool", pool, "--loglevel", loglevel, "-n", name]
        + (["-B", "-s", beat_schedule] if beat_schedule else [])
    )


def runner_command(name: str, *, loglevel: str = "INFO") -> list[str]:
    """The command line of a real bisection runner: a worker of the runner app, one job at a time."""
    return [sys.executable, "-m", "celery", "-A", "triage_site.runner", "worker"] + [
        "--concurrency",
        "1",
        "--pool",
        "prefork",
        "--loglevel",
        loglevel,
        "-n",
        f"{name}@%h",
    ]


class RunnerProcess:
    """A real bisection runner (`celery -A triage_site.runner worker`, prefork as deployed) of a registered runner, in a
    session of its own, so that kill() ends its pool and fork servers with it, and start() brings it back under the
    same name: a test can kill the session's runner mid-run and restart it, as an operator would."""

    def __init__(self, registered: RegisteredRunner, *, env: dict, log) -> None:
        self.registered, self.env, self.log = registered, env, log
        self.name = registered.name
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 90) -> RunnerProcess:
        """Start it; returns once its first signed heartbeat reached the database through the coordinator's gateway."""
        since = time.time()
        self.proc = subprocess.Popen(
            runner_command(self.name),
            cwd=ROOT,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for_runner(self.name, since, timeout)
        return self

    @property
    def args(self) -> list[str]:
        return self.proc.args

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL the runner and everything in its process group: no warm shutdown, no ack, no report."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.kill()


@contextmanager
def running_worker(name: str, queues: str, *, env: dict, log, loglevel: str = "INFO", **command):
    """Start a real worker (worker_command, with `command`'s options) writing to `log`, wait until it answers a ping,
    yield its process; stop it afterwards (SIGTERM, then SIGKILL after 20 s)."""
    proc = subprocess.Popen(
        worker_command(name, queues, loglevel=loglevel, **command),
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_for_worker(name)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


def preview_duplicate(client, number: int, original: int, labels_seen=("oncall: pt2",)) -> str:
    """What the issue page's htmx preview of closing #number as a duplicate of #original shows (changes nothing)."""
    from django.urls import reverse

    return client.post(
        reverse("rubric_app:issue_preview", args=[number]),
        {"route": "duplicate", "duplicate_of": str(original), "labels_seen": json.dumps(list(labels_seen))},
        headers={"HX-Request": "true"},
    ).content.decode()


def deliver_signed(client, event: str, body: bytes | dict, delivery: str, secret: str, *, process: bool = True):
    """POST a webhook delivery signed with `secret` (a dict is sent as GitHub's JSON) and, with `process`, apply it as
    the worker does; returns the response, or the stored WebhookDelivery once processed."""
    from rubric_app.github.events import process_webhook
    from rubric_app.models import WebhookDelivery

    body = json.dumps(body).encode() if isinstance(body, dict) else body
    signature = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": signature}
    response = client.post("/github/webhook", data=body, content_type="application/json", headers=headers)
    if not process:
        return response
    assert response.status_code == 202, response.content
    process_webhook(WebhookDelivery.objects.get(delivery_id=delivery).pk)
    return WebhookDelivery.objects.get(delivery_id=delivery)


def demo_synced(fake, tmp_path: Path, *numbers: int, labels: dict[int, list[str]] | None = None) -> None:
    """Only these demo issues (labels overridden where given), seeded on the fake GitHub as `make run` seeds it, then
    synced with the rubric's refresh (what a sync's follow-up does, without the automatic bisections)."""
    from rubric_app.demo.github_seeds import DEMO_FILE, seed_demo
    from rubric_app.github.sync import sync_queue
    from rubric_app.models import Issue
    from rubric_app.triage import suggestions

    demo = json.loads(DEMO_FILE.read_text(encoding="utf-8"))
    chosen = [dict(i) for i in demo["issues"] if i["number"] in numbers]
    for data in chosen:
        data["labels"] = (labels or {}).get(data["number"], data["labels"])
    path = tmp_path / "demo.json"
    path.write_text(json.dumps({**demo, "issues": chosen}), encoding="utf-8")
    seed_demo(fake, path)
    sync_queue(full=True, on_changed=lambda ids, cause: suggestions.refresh(Issue.objects.filter(pk__in=ids)))
    assert set(Issue.objects.filter(number__in=numbers).values_list("number", flat=True)) == set(numbers)
