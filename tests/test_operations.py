"""What an operator relies on: the health endpoint, static files under gunicorn with DEBUG off, `check --deploy`,
database connections the development server does not hoard, and error reports without secrets or issue text."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time

import psycopg
import pytest
import requests
from django.db import connection
from django.urls import reverse

from rubric_app.models import SyncState, WorkerHeartbeat
from tests.helpers import (
    ROOT,
    RegisteredRunner,
    child_database_url,
    only_this_tests_workers,
    runner_command,
    runner_env,
    runner_name,
    wait_until,
)
from triage_site.sentry import scrub_event

PRODUCTION = {
    "DEBUG": "false",
    "HTTPS": "true",
    "ALLOWED_HOSTS": "triage.example.org,127.0.0.1",
    "CSRF_TRUSTED_ORIGINS": "https://triage.example.org",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra) -> dict:
    db_url = child_database_url()
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_TOKEN", "PYTEST_XDIST_", "DJANGO_ALLOW_ASYNC"))
    }
    return {**env, "DATABASE_URL": db_url, "PYTHONUNBUFFERED": "1", **extra}


# --- /health ------------------------------------------------------------------------------------------------


SERVER_UNDER_TEST = "runserver-under-test"


@pytest.mark.django_db
def test_it_answers_health_with_every_part_and_no_secret(client, settings, django_assert_max_num_queries, health_token):
    only_this_tests_workers()
    for name, queues in (("github@box", ["github"]), ("cpu@box", ["default", "cpu", "cpu_auto"])):
        WorkerHeartbeat.objects.create(name=name, queues=queues, device="cpu")
    SyncState.objects.create(key="queue:incremental", last_finished_at="2026-12-01T10:00:00Z")
    # SELECT 1, the live workers, the last sync: nothing else, whatever the data.
    with django_assert_max_num_queries(3):
        response = client.get(reverse("rubric_app:health"), headers=health_token)  # no login: the probe's token
    assert response.status_code == 200, response.content
    report = response.json()
    assert report["status"] == "ok" and report["down"] == []
    assert report["workers"] == {"cpu": 1, "gpu": 0, "github": 1}
    assert report["last_sync"].startswith("2026-12-01T10:00:00")
    assert response["Cache-Control"].startswith("max-age=0")
    assert settings.CELERY_BROKER_URL not in response.content.decode()


@pytest.mark.django_db
def test_it_tells_anonymous_callers_only_up_or_down(client, settings, health_token, triager):
    """The attack: an anonymous /health listed the live workers per queue and the last sync."""
    only_this_tests_workers()
    WorkerHeartbeat.objects.create(name="github@box", queues=["github"], device="cpu")
    WorkerHeartbeat.objects.create(name="cpu@box", queues=["default", "cpu"], device="cpu")
    SyncState.objects.create(key="queue:incremental", last_finished_at="2026-12-01T10:00:00Z")
    url = reverse("rubric_app:health")
    anonymous = client.get(url)
    assert anonymous.status_code == 200 and anonymous.json() == {"status": "ok"}
    assert client.get(url, headers={"Authorization": "Bearer wrong"}).json() == {"status": "ok"}
    client.force_login(triager)  # a role is not staff
    assert client.get(url).json() == {"status": "ok"}
    triager.is_staff = True
    triager.save(update_fields=["is_staff"])
    assert client.get(url).json()["workers"]["github"] == 1
    settings.HEALTH_QUEUES = ["gpu"]
    client.logout()
    down = client.get(url)
    assert down.status_code == 503 and down.json() == {"status": "down"}


@pytest.mark.django_db
def test_it_answers_503_naming_the_broker_when_it_is_down(client, settings, health_token):
    only_this_tests_workers()
    settings.HEALTH_QUEUES = []
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{_free_port()}/0"  # nothing listens there
    response = client.get(reverse("rubric_app:health"), headers=health_token)
    assert response.status_code == 503
    assert response.json()["down"] == ["broker"] and response.json()["broker"] == "down"
    assert str(settings.CELERY_BROKER_URL) not in response.content.decode()


@pytest.mark.django_db
def test_it_judges_the_sync_only_with_a_token(client, settings, health_token):
    only_this_tests_workers()
    settings.HEALTH_QUEUES = []
    assert client.get(reverse("rubric_app:health")).status_code == 200  # the demo and the tests have no token
    settings.GITHUB_TOKEN = "ghp_" + "x" * 36
    response = client.get(reverse("rubric_app:health"), headers=health_token)
    assert response.status_code == 503 and response.json()["down"] == ["sync"]
    assert "ghp_" not in response.content.decode()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_answers_503_naming_the_queue_once_its_worker_stops(
    celery_worker_process, client, settings, health_token, tmp_path
):
    # A real registered GPU runner (its heartbeat says cuda, what a GPU box's says), stopped as an operator would: it
    # holds no database, so its clean shutdown says so to the coordinator (the session's), which removes its
    # heartbeat, and the check names the queue.
    settings.HEALTH_QUEUES = ["gpu"]
    registered = RegisteredRunner(runner_name(f"health-{secrets.token_hex(3)}"), device="cuda")
    registered.ensure()
    env = runner_env(
        tmp_path, name=registered.name, secret=registered.secret(), BISECTION_DEVICE="cuda", WORKER_HEARTBEAT_S="1"
    )
    worker = subprocess.Popen(
        runner_command(registered.name),
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_until(lambda: client.get(reverse("rubric_app:health")).status_code == 200, timeout=90)
        assert client.get(reverse("rubric_app:health"), headers=health_token).json()["workers"]["gpu"] >= 1
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=60)
        response = wait_until(
            lambda: (r := client.get(reverse("rubric_app:health"), headers=health_token)).status_code == 503 and r,
            timeout=30,
        )
        assert response.json()["down"] == ["workers: gpu"]
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
        registered.forget()


# --- production settings under gunicorn --------------------------------------------------------------------


def test_it_passes_check_deploy_with_the_documented_production_settings():
    env = _env(**PRODUCTION, SECRET_KEY=secrets.token_urlsafe(60))
    done = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout


@pytest.mark.django_db(transaction=True)
def test_it_serves_hashed_static_files_for_a_year_under_gunicorn_with_debug_off(tmp_path):
    plain_http = {**PRODUCTION, "HTTPS": "false"}  # no TLS proxy in front of this gunicorn
    env = _env(**plain_http, SECRET_KEY=secrets.token_urlsafe(60), STATIC_ROOT=str(tmp_path / "static"))
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--noinput"], cwd=ROOT, env=env, check=True, timeout=120
    )
    manifest = json.loads((tmp_path / "static" / "staticfiles.json").read_text())["paths"]
    hashed = manifest["rubric_app/triage.css"]
    assert hashed != "rubric_app/triage.css"  # a content hash in the name
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "triage_site.wsgi", "--workers", "1", "--bind", f"127.0.0.1:{port}"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        css = wait_until(lambda: _get(f"{base}/static/{hashed}"), timeout=60)
        assert css.status_code == 200 and ".chip" in css.text
        assert "max-age=315360000" in css.headers["Cache-Control"] and "immutable" in css.headers["Cache-Control"]
        login = requests.get(f"{base}/accounts/login/", timeout=10)
        assert f"/static/{manifest['django_htmx/htmx-2.min.js']}" in login.text  # pages link the hashed names
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def _get(url: str):
    try:
        return requests.get(url, timeout=5)
    except requests.ConnectionError:
        return None


# --- connections -------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_it_keeps_no_connection_per_request_thread_under_the_development_server():
    """`make run`'s server starts a thread per request: with persistent connections each kept its own until
    PostgreSQL refused more. 20 clients for 3 s, hundreds of requests (a connection kept per request's thread
    would pass 20 many times over): no 5xx, at most one connection per request in flight, and none left behind."""
    if connection.vendor != "postgresql":
        pytest.skip("counts PostgreSQL's connections")
    port, name = _free_port(), connection.settings_dict["NAME"]
    server = subprocess.Popen(
        [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
        cwd=ROOT,
        # /health then asks the database and the broker only: 200 while they are up. Its connections carry their own
        # application_name, so a Celery worker of the suite writing to the same database is not counted.
        env=_env(HEALTH_QUEUES="", DATABASE_URL=_env()["DATABASE_URL"] + "?application_name=" + SERVER_UNDER_TEST),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    dsn = {k: v for k, v in connection.get_connection_params().items() if k in ("host", "port", "user")}
    statuses, peak, stop = [], [0], threading.Event()

    def connections() -> int:
        with psycopg.connect(dbname="postgres", **dsn) as pg:
            return pg.execute(
                "select count(*) from pg_stat_activity where datname = %s and application_name = %s",
                (name, SERVER_UNDER_TEST),
            ).fetchone()[0]

    def client() -> None:
        session = requests.Session()
        while not stop.is_set():
            statuses.append(session.get(f"http://127.0.0.1:{port}/health", timeout=30).status_code)

    try:
        wait_until(lambda: _get(f"http://127.0.0.1:{port}/health"), timeout=60)
        baseline = connections()  # this test's own connection
        threads = [threading.Thread(target=client) for _ in range(20)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            peak[0] = max(peak[0], connections() - baseline)
            time.sleep(0.2)
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        assert len(statuses) >= 100 and not [s for s in statuses if s >= 500], (len(statuses), sorted(set(statuses)))
        assert 1 <= peak[0] <= 20, peak[0]  # at least one: the count does see the server's connections
        wait_until(lambda: connections() - baseline <= 0, timeout=15)  # nothing hoarded once idle
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


# --- error reports -----------------------------------------------------------------------------------------


def test_it_scrubs_tokens_and_issue_text_from_error_reports():
    token, user_token = "ghp_" + "A1b2" * 9, "gho_" + "Z9y8" * 9
    body = "### 🐛 Describe the bug\nmy secret model weights at https://internal.example/x"
    event = {
        "request": {
            "url": f"https://triage.example.org/github/webhook?token={token}",
            "method": "POST",
            "data": {"issue": {"body": body}},
            "cookies": {"sessionid": "abc"},
            "query_string": "q=segfault",
            "headers": {"Authorization": f"token {token}", "User-Agent": "GitHub-Hookshot/1", "Cookie": "x"},
        },
        "exception": {
            "values": [
                {
                    "type": "GithubException",
                    "value": f"401 Bad credentials for Bearer {user_token}: " + "x" * 2000,
                    "stacktrace": {
                        "frames": [
                            {
                                "filename": "rubric_app/github/applying.py",
                                "function": "_write",
                                "lineno": 10,
                                "vars": {"token": token, "body": body},
                                "context_line": "    gh.add_label(token)",
                            }
                        ]
                    },
                }
            ]
        },
        "breadcrumbs": {"values": [{"category": "query", "message": f"UPDATE ... '{body}'", "data": {"t": token}}]},
        "extra": {"issue_body": body},
        "user": {"username": "tina"},
        "logentry": {"message": f"write failed with {token}"},
    }

    scrubbed = json.dumps(scrub_event(event, {}))

    for secret in (token, user_token, "my secret model weights", "sessionid", "q=segfault"):
        assert secret not in scrubbed
    frame = event["exception"]["values"][0]["stacktrace"]["frames"][0]
    assert frame == {"filename": "rubric_app/github/applying.py", "function": "_write", "lineno": 10}
    assert event["request"]["headers"] == {"User-Agent": "GitHub-Hookshot/1"}
    assert event["request"]["method"] == "POST"
    assert event["exception"]["values"][0]["type"] == "GithubException"
    assert len(event["exception"]["values"][0]["value"]) <= 500
    assert event["breadcrumbs"]["values"] == [{"category": "query"}]
