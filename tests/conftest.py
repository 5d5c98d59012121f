"""Shared fixtures: personas, issues, and a real Celery worker on the real broker."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from contextlib import contextmanager

import pytest
from django.db import connection

from rubric_app.demo.loading import load_catalog_labels
from rubric_app.models import Issue
from tests.factories import make_issue, make_label, make_user
from tests.helpers import (
    ROOT,
    RegisteredRunner,
    RunnerProcess,
    child_database_url,
    runner_env,
    runner_name,
    running_worker,
)
from tests.torch_builds import make_patched_build

# The fake GitHub server and its fixtures (fake_github_server, fake_github), for the whole suite.
pytest_plugins = ["tests.fakegithub"]


# Fixtures that start a real worker, a browser or torch in the sandbox: a test that uses one carries the marker
# (pytest.ini), so `make test-fast` (-m "not (worker or browser or torch)") leaves it out whatever its file says.
NEEDS = {
    "_workers": "worker",
    "celery_worker_process": "worker",
    "signed_in_worker": "worker",
    "browser": "browser",
    "make_page": "browser",
    "patched_build": "torch",
}


def pytest_configure(config):
    from django.conf import settings

    # Django's "speeding up the tests": PBKDF2's million rounds cost 0.3 s per persona and per password sign-in.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    # GitHub's 5xx answers are retried as in production, without production's 7.5 s of waits between the tries
    # (also for the workers and servers the tests start, which inherit the environment).
    os.environ["GITHUB_RETRY_BACKOFF"] = "0.001"
    settings.GITHUB_RETRY_BACKOFF = 0.001


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    for item in items:
        for fixture, marker in NEEDS.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(marker)


@pytest.fixture
def triager(db):
    """Can view, apply labels and run bisections."""
    return make_user("tina-triager", "triager")


@pytest.fixture
def chair(db):
    """Runs the weekly meeting: may also record meeting decisions (high priority)."""
    return make_user("carl-chair", "meeting chair")


@pytest.fixture
def viewer(db):
    """Reads everything, changes nothing."""
    return make_user("vera-viewer", "viewer")


@pytest.fixture
def outsider(db):
    """Signed in, but holds no role."""
    return make_user("olga-outsider", None)


@pytest.fixture
def issue(db) -> Issue:
    return make_issue()


# The labels the decisions in the tests name, in the local catalog (what Label.objects.triage_catalog() offers).
DECISION_LABELS = (
    "module: dynamo",
    "module: dynamic shapes",
    "module: inductor",
    "triaged",
    "triage review",
    "oncall: cpu inductor",
    "oncall: export",
    "high priority",
    "low priority",
    "needs reproduction",
)


@pytest.fixture
def sync_issue(fake_github, settings):
    """Put an issue on the fake GitHub and in the mirror with the same labels: sync_issue(number, labels)."""
    # Pacing is proven by the worker tests at the real 1 s; here it would only slow things.
    settings.GITHUB_WRITE_INTERVAL = 0.01
    for name in DECISION_LABELS:
        make_label(name, github=fake_github)

    def sync(number: int = 1001, labels=("oncall: pt2",)) -> Issue:
        fake_github.add_issue(number, labels=list(labels))
        return make_issue(number, labels=tuple(labels))

    return sync


@pytest.fixture
def synced(sync_issue) -> Issue:
    """#1001 on the fake GitHub and locally, oncall: pt2 and nothing else."""
    return sync_issue()


# The labels the triage bot left on #1001 (bot_issue).
BOT_LABELS = ("oncall: pt2", "module: inductor", "triaged", "bot-triaged")


@pytest.fixture
def bot_issue(fake_github, settings):
    """#1001, labelled by the bot, on the fake GitHub and locally; the repo has both feedback labels."""
    settings.GITHUB_WRITE_INTERVAL = 0.01
    for name in ("module: dynamo", "module: inductor", "triaged"):
        make_label(name, github=fake_github)
    for name in ("bot-triaged", "bot-mislabeled", "repro:agent:h100:incorrect"):
        make_label(name, allowed=False, github=fake_github)  # on GitHub, not in the shipped catalog
    fake_github.add_issue(1001, labels=list(BOT_LABELS))
    return make_issue(1001, labels=BOT_LABELS)


@pytest.fixture
def catalog(db) -> int:
    """The shipped catalog as Label rows: the engine suggests and `a` applies only what it allows (G7)."""
    return load_catalog_labels()


# The health endpoint's probe token (not a secret), and the headers of a probe that holds it.
HEALTH_TOKEN = "health-token-not-a-secret-7c1e"
PROBE = {"Authorization": f"Bearer {HEALTH_TOKEN}"}


@pytest.fixture
def health_token(settings) -> dict:
    """The health endpoint's token set; the probe's headers."""
    settings.HEALTH_TOKEN = HEALTH_TOKEN
    return PROBE


@pytest.fixture(scope="session")
def patched_build(tmp_path_factory) -> str:
    """A second torch build (tests/torch_builds.py): the interpreter of a virtualenv whose torch reports a newer
    nightly and whose Inductor refuses torch.sin."""
    return make_patched_build(tmp_path_factory.mktemp("torch-nightly") / "venv")


@pytest.fixture(scope="session")
def _workers(django_db_setup, django_db_blocker, fake_github_server, patched_build, tmp_path_factory):
    """Real Celery workers, as production splits them; yields the runner (a RunnerProcess).

    The coordinator (`default,github`, on the dashboard's broker) holds the test database: it gives runs to runners,
    reads what they send through its gateway and writes to the session's fake GitHub, pacing writes at the real 1 s
    (GITHUB_WRITE_INTERVAL). The runner is a registered runner (tests.helpers.RegisteredRunner) with a broker user of
    its own (RUNNER_BROKER_ACL=manage) on the runners' broker, holding nothing but that user's URL, its name and secret
    and its own settings (tests.helpers.runner_env): no database, no GitHub token, no dashboard broker. It hosts two
    torch builds (TORCH_BUILDS): "default", this interpreter, first; and "nightly", the patched build.
    """
    from tests.fakegithub import TOKEN

    with django_db_blocker.unblock():
        db_name = connection.settings_dict["NAME"]
        registered = RegisteredRunner(runner_name("cpu"))
        registered.ensure()
    env = {
        **os.environ,
        "DATABASE_URL": child_database_url(db_name),
        "PYTHONUNBUFFERED": "1",
        "GITHUB_API_URL": fake_github_server.url,
        "GITHUB_TOKEN": TOKEN,
        "GITHUB_REPO": fake_github_server.repo,
        "GITHUB_WRITE_INTERVAL": "1.0",
        "RUNNER_BROKER_ACL": "manage",
    }
    runner = runner_env(
        tmp_path_factory.mktemp("runner-var"),
        name=registered.name,
        secret=registered.secret(),
        TORCH_BUILDS=f"default={sys.executable},nightly={patched_build}",
        WORKER_HEARTBEAT_S="2",
    )
    suffix = f"{os.getpid()}@{socket.gethostname()}"
    with (
        _worker_log("coordinator") as coordinator_log,
        _worker_log("runner") as runner_log,
        running_worker(f"test-{suffix}", "default,github", env=env, log=coordinator_log),
    ):
        with django_db_blocker.unblock():
            process = RunnerProcess(registered, env=runner, log=runner_log).start()
        process.coordinator = f"test-{suffix}"
        try:
            yield process
        finally:
            process.stop()
            registered.forget()


@pytest.fixture
def celery_worker_process(_workers, django_db_blocker):
    """The session's workers (see _workers), its runner registered again after a flush of the test database; yields
    the runner. Tests that use them need `transactional_db`, so that the rows they create are committed and visible."""
    with django_db_blocker.unblock():
        _workers.registered.ensure()
    return _workers


@contextmanager
def _worker_log(kind: str):
    """var/test-<kind><xdist worker>.log when var/ exists (a developer's checkout), else nowhere."""
    if not (ROOT / "var").is_dir():
        yield subprocess.DEVNULL
        return
    with open(ROOT / "var" / f"test-{kind}{os.environ.get('PYTEST_XDIST_WORKER', '')}.log", "w") as log:
        yield log


@pytest.fixture(autouse=True)
def _github_on_this_machine(settings):
    """Tests never reach api.github.com: with no token, GitHub is a local address (nothing listens
    there unless a test starts the fake), as in demo mode. Tests of the "off" mode set their own URL."""
    from rubric_app.github.connect import is_local_url

    if not settings.GITHUB_TOKEN and not is_local_url(settings.GITHUB_API_URL):
        settings.GITHUB_API_URL = "http://127.0.0.1:9"
