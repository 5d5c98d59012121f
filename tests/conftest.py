"""Shared fixtures: personas, issues, and a real Celery worker on the real broker."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from rubric_app.models import Issue, Label, WorkerHeartbeat
from rubric_app.roles import ensure_roles

# The fake GitHub server and its fixtures (fake_github_server, fake_github), for the whole suite.
pytest_plugins = ["tests.fakegithub"]

ROOT = Path(__file__).resolve().parent.parent


def _user(username: str, role: str | None):
    user = get_user_model().objects.create_user(username=username, password="password")
    if role:
        user.groups.add(ensure_roles()[role])
    return user


@pytest.fixture
def triager(db):
    """Can view, apply labels and run bisections."""
    return _user("tina-triager", "triager")


@pytest.fixture
def chair(db):
    """Runs the weekly meeting: may also record meeting decisions (high priority)."""
    return _user("carl-chair", "meeting chair")


@pytest.fixture
def viewer(db):
    """Reads everything, changes nothing."""
    return _user("vera-viewer", "viewer")


@pytest.fixture
def outsider(db):
    """Signed in, but holds no role."""
    return _user("olga-outsider", None)


def make_label(name: str, color: str = "ededed", allowed: bool = True) -> Label:
    return Label.objects.get_or_create(name=name, defaults={"color": color, "allowed_for_triage": allowed})[0]


def make_issue(
    number: int = 1001, title: str = "torch.compile fails", body: str = "", labels=("oncall: pt2",), **fields
) -> Issue:
    issue = Issue.objects.create(
        number=number,
        title=title,
        body=body,
        html_url=f"https://github.com/pytorch/pytorch/issues/{number}",
        updated_at=fields.pop("updated_at", timezone.now()),
        **fields,
    )
    issue.labels.set([make_label(name) for name in labels])
    return issue


@pytest.fixture
def issue(db) -> Issue:
    return make_issue()


def only_this_tests_workers() -> None:
    """No worker heartbeats but the ones this test writes, until it ends: the session's Celery worker (and
    any a test started) beats into the same database every few seconds, and a row of theirs changes what
    "N workers are online" says. On PostgreSQL the table is locked for the test's transaction, so a beat
    waits for it to end instead of landing between the statements under test."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"LOCK TABLE {WorkerHeartbeat._meta.db_table} IN SHARE ROW EXCLUSIVE MODE")
    WorkerHeartbeat.objects.all().delete()


@pytest.fixture(scope="session")
def celery_worker_process(django_db_setup, django_db_blocker, fake_github_server):
    """A real `celery worker` process consuming the test broker, writing to the test database.

    Tests that use it need `transactional_db`, so that the rows they create are
    committed and visible to the worker. It talks to the session's fake GitHub
    server, and paces GitHub writes at the real 1 s (GITHUB_WRITE_INTERVAL).
    """
    from tests.fakegithub import TOKEN

    with django_db_blocker.unblock():
        db_name = connection.settings_dict["NAME"]
    url = os.environ["DATABASE_URL"].rsplit("/", 1)[0] + "/" + db_name
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "PYTHONUNBUFFERED": "1",
        "GITHUB_API_URL": fake_github_server.url,
        "GITHUB_TOKEN": TOKEN,
        "GITHUB_REPO": fake_github_server.repo,
        "GITHUB_WRITE_INTERVAL": "1.0",
    }
    name = f"test-{os.getpid()}@{socket.gethostname()}"
    log = (
        open(ROOT / "var" / f"test-worker{os.environ.get('PYTEST_XDIST_WORKER', '')}.log", "w")
        if (ROOT / "var").is_dir()
        else subprocess.DEVNULL
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "triage_site",
            "worker",
            "-Q",
            "default,github,cpu,cpu_auto",
            "--concurrency",
            "1",
            "--pool",
            "solo",
            "--loglevel",
            "INFO",
            "-n",
            name,
        ],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    _wait_for_worker(name)
    yield proc
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def _wait_for_worker(name: str, timeout: float = 60) -> None:
    from triage_site.celery import app

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if app.control.ping(destination=[name], timeout=1.0):
            return
    raise RuntimeError("the Celery worker did not answer a ping within 60 s")


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


@pytest.fixture(autouse=True)
def _github_on_this_machine(settings):
    """Tests never reach api.github.com: with no token, GitHub is a local address (nothing listens
    there unless a test starts the fake), as in demo mode. Tests of the "off" mode set their own URL."""
    from rubric_app.github import is_local_url

    if not settings.GITHUB_TOKEN and not is_local_url(settings.GITHUB_API_URL):
        settings.GITHUB_API_URL = "http://127.0.0.1:9"
