"""The fake GitHub REST server for the tests and the sync benchmark: fixtures around
rubric_app/demo/github_server.py (the same server `make run` starts for the demo), with a token.

Fixtures: `fake_github_server` (session), `fake_github` (per test: reset, and settings pointed at it) and
`demo_server` (the demo GitHub as `make run` starts it).
"""

from __future__ import annotations

import pytest

from rubric_app.demo import github_http, github_seeds
from rubric_app.demo.github_http import FakeServer
from rubric_app.demo.github_server import REPO, FakeGitHub

TOKEN = "test-token-not-a-secret"


def start_server(repo: str = REPO) -> tuple[FakeGitHub, FakeServer]:
    """Start a fake GitHub that wants TOKEN, in a daemon thread; returns (state, server)."""
    return github_http.start_server(repo, token=TOKEN)


@pytest.fixture(scope="session")
def fake_github_server():
    """The fake GitHub server, one per test session (the Celery worker process talks to it too)."""
    fake, server = start_server()
    yield fake
    server.shutdown()
    server.server_close()


@pytest.fixture
def fake_github(fake_github_server, settings) -> FakeGitHub:
    """The fake GitHub, emptied, with the dashboard's settings pointed at it."""
    fake_github_server.reset()
    settings.GITHUB_API_URL = fake_github_server.url
    settings.GITHUB_TOKEN = TOKEN
    settings.GITHUB_REPO = fake_github_server.repo
    return fake_github_server


CLIENT_ID = "dashboard-test-client"
CLIENT_SECRET = "dashboard-test-client-secret-not-a-secret"


@pytest.fixture
def github_signin(fake_github, settings) -> FakeGitHub:
    """The fake GitHub with the demo's people (a pt2-triagers member, a pt2-triage-chairs member, an org
    member in no team, an outsider) and the dashboard's OAuth app, and sign-in with GitHub pointed at it."""
    github_seeds.seed_demo_people(fake_github, client_id=CLIENT_ID, client_secret=CLIENT_SECRET)
    settings.GITHUB_URL = fake_github.url
    settings.GITHUB_OAUTH_CLIENT_ID = CLIENT_ID
    settings.GITHUB_OAUTH_CLIENT_SECRET = CLIENT_SECRET
    settings.TRIAGE_ORG = github_seeds.DEMO_ORG
    settings.TRIAGE_TEAMS = {"pt2-triagers": "triager", "pt2-triage-chairs": "meeting chair"}
    settings.SOCIALACCOUNT_PROVIDERS = {
        "github": {
            **settings.SOCIALACCOUNT_PROVIDERS["github"],
            "APPS": [{"client_id": CLIENT_ID, "secret": CLIENT_SECRET, "key": ""}],
        }
    }
    return fake_github


@pytest.fixture
def demo_server(settings):
    """The demo GitHub as `make run` starts it (seeded, no token wanted), with settings as run.sh sets them."""
    fake, server = github_http.start_server()
    github_seeds.seed_demo(fake)
    settings.GITHUB_TOKEN = ""
    settings.GITHUB_API_URL = fake.url
    yield fake
    server.shutdown()
    server.server_close()
