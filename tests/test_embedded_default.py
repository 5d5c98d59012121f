"""Smoke test of `make run`'s embedded default: SQLite, filesystem broker, demo data, real workers."""

import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.worker


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, session: requests.Session):
    try:
        return session.get(url, timeout=2)
    except requests.ConnectionError:
        return None


def test_it_serves_the_demo_queue_with_workers_and_no_external_service(tmp_path):
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "CELERY_", "GITHUB_", "SECRET_KEY", "DEBUG"))}
    env.update(TRIAGE_VAR_DIR=str(tmp_path), PORT=str(port), PY=sys.executable, PYTHONUNBUFFERED="1")
    log = open(tmp_path / "run.log", "w")
    proc = subprocess.Popen(["scripts/run.sh"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        session = requests.Session()
        login = wait_until(lambda: _get(f"http://127.0.0.1:{port}/accounts/login/", session), timeout=180, interval=1)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
        queue = session.post(
            f"http://127.0.0.1:{port}/accounts/login/",
            data={"username": "triager", "password": "triager", "csrfmiddlewaretoken": token, "next": "/"},
            headers={"Referer": login.url},
        )
        assert queue.status_code == 200
        assert "oncall: pt2" in queue.text
        db = sqlite3.connect(tmp_path / "db.sqlite3")
        issue_id, title = db.execute("select id, title from rubric_app_issue where state='open' order by id limit 1").fetchone()
        assert db.execute("select count(*) from rubric_app_issue").fetchone()[0] >= 40
        # Both of run.sh's workers say they are alive, with their queues (the issue page shows them).
        beats = lambda: dict(db.execute("select name, queues from rubric_app_workerheartbeat").fetchall())  # noqa: E731
        live = wait_until(lambda: len(beats()) == 2 and beats(), timeout=60)
        assert sorted(q for queues in live.values() for q in re.findall(r'"(\w+)"', queues)) == ["cpu", "default", "github"]

        # A task sent through the filesystem broker is picked up by run.sh's worker.
        db.execute("update rubric_app_issue set suggestions_updated_at = NULL where id = ?", (issue_id,))
        db.commit()
        subprocess.run(
            [sys.executable, "manage.py", "shell", "-c",
             f"from rubric_app.tasks import refresh_suggestions_task; refresh_suggestions_task.delay({issue_id})"],
            cwd=ROOT, env=env, check=True, timeout=60,
        )
        wait_until(
            lambda: db.execute("select suggestions_updated_at from rubric_app_issue where id = ?", (issue_id,)).fetchone()[0],
            timeout=60,
        )
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
