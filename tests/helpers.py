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
from pathlib import Path

import pytest
from django.db import connection

from rubric_app.models import WorkerHeartbeat

ROOT = Path(__file__).resolve().parent.parent


def bisect_here(run, *, consumed: frozenset[str] = frozenset(), runner: str = "runner@here"):
    """Run a queued run's job in this process: the runner's code (runs/runner.py) in the sandbox, each report recorded
    as the coordinator records a runner's message (triage/followups.runner_reported), only the broker left out (the
    worker tests take that path). Returns the run, refreshed."""
    import secrets

    from rubric_app.runs import coordinator, workers
    from rubric_app.runs import runner as runners
    from rubric_app.triage import followups

    if not run.job_token:
        run.job_token = secrets.token_urlsafe(24)
        run.save(update_fields=["job_token"])
    job = coordinator.job_for(run).as_message()
    message_id = f"here-{run.pk}-{secrets.token_hex(4)}"
    runners.run_job(
        job,
        message_id=message_id,
        runner=runner,
        boot=workers.boot,
        consumed=consumed,
        send=followups.runner_reported,
    )
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


def runner_env(var_dir, **settings) -> dict[str, str]:
    """The whole environment of a bisection runner: the broker's URL and its own settings, nothing else (no
    DATABASE_URL, SECRET_KEY, GitHub credential or TOKEN_ENCRYPTION_KEY). var_dir: its TRIAGE_VAR_DIR, where it must
    create no database."""
    return {
        "CELERY_BROKER_URL": os.environ["CELERY_BROKER_URL"],
        "TRIAGE_VAR_DIR": str(var_dir),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONUNBUFFERED": "1",
        **settings,
    }


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


class RunnerProcess:
    """A real bisection runner (`celery worker` on the bisection queues, prefork as deployed) in a session of its own,
    so that kill() ends its pool and fork servers with it, and start() brings it back under the same name: a test can
    kill the session's runner mid-run and restart it, as an operator would."""

    def __init__(self, name: str, queues: str, *, env: dict, log) -> None:
        self.name, self.queues, self.env, self.log = name, queues, env, log
        self.proc: subprocess.Popen | None = None

    def start(self) -> RunnerProcess:
        self.proc = subprocess.Popen(
            worker_command(self.name, self.queues, pool="prefork"),
            cwd=ROOT,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for_worker(self.name)
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
