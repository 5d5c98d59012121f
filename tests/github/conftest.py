"""Fixtures of the GitHub adapter's tests: a real worker that writes to GitHub as the signed-in triager."""

from __future__ import annotations

import os
import socket

import pytest
from django.db import connection

from tests.fakegithub import TOKEN
from tests.helpers import child_database_url, running_worker

QUEUE = "github-as-user-test"


@pytest.fixture(scope="module")
def signed_in_worker(django_db_setup, django_db_blocker, fake_github_server, tmp_path_factory):
    """A real worker with sign-in configured, on QUEUE; yields the path of its log."""
    with django_db_blocker.unblock():
        db_name = connection.settings_dict["NAME"]
    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    env = {
        **os.environ,
        "DATABASE_URL": child_database_url(db_name),
        "PYTHONUNBUFFERED": "1",
        "GITHUB_API_URL": fake_github_server.url,
        "GITHUB_URL": fake_github_server.url,
        "GITHUB_TOKEN": TOKEN,
        "GITHUB_REPO": fake_github_server.repo,
        "GITHUB_OAUTH_CLIENT_ID": "test-client-id",
        "GITHUB_OAUTH_CLIENT_SECRET": "test-client-secret",
        "GITHUB_WRITE_INTERVAL": "0.05",
    }
    name = f"as-user-{os.getpid()}@{socket.gethostname()}"
    with open(log_path, "w") as log, running_worker(name, QUEUE, env=env, log=log, loglevel="DEBUG"):
        yield log_path
