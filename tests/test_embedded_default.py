"""Smoke test of `make run`'s embedded default: SQLite, filesystem broker, demo data, real workers."""

import json
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

from tests.helpers import wait_until

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.worker


EDIT_BY_WEBHOOK = """
from django.conf import settings
from django.utils import timezone
from rubric_app.models import Issue, WebhookDelivery
from rubric_app.tasks import process_webhook_task
STAMP = "%%Y-%%m-%%dT%%H:%%M:%%SZ"  # GitHub's
issue = Issue.objects.get(pk=%d)
payload = {"action": "edited", "repository": {"full_name": settings.GITHUB_REPO}, "issue": {
    "number": issue.number, "title": issue.title + " (edited)", "body": issue.body, "state": "open",
    "user": {"login": issue.author}, "labels": [{"name": n, "color": "ededed"} for n in issue.label_names()],
    "html_url": issue.html_url, "comments": issue.comments_count,
    "created_at": issue.created_at.strftime(STAMP), "updated_at": timezone.now().strftime(STAMP)}}
delivery = WebhookDelivery.objects.create(delivery_id="embedded-edit", event="issues", payload=payload)
process_webhook_task.delay(delivery.pk)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _runners(session: int) -> list[int]:
    """The runner processes run.sh started (in its process group `session`): `-n cpu@...` and `-n auto@...`."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            pgid = os.getpgid(int(entry))
        except (OSError, ProcessLookupError):
            continue
        if pgid == session and b"-n" in cmdline and cmdline[cmdline.index(b"-n") + 1].startswith((b"cpu@", b"auto@")):
            found.append(int(entry))
    assert found, "run.sh started no runner"
    return found


def _get(url: str, session: requests.Session):
    try:
        return session.get(url, timeout=2)
    except requests.ConnectionError:
        return None


def test_it_serves_the_demo_queue_with_workers_and_no_external_service(tmp_path):
    port = _free_port()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DATABASE_URL", "CELERY_", "GITHUB_", "SECRET_KEY", "DEBUG"))
    }
    env.update(TRIAGE_VAR_DIR=str(tmp_path), PORT=str(port), PY=sys.executable, PYTHONUNBUFFERED="1")
    log = open(tmp_path / "run.log", "w")
    proc = subprocess.Popen(
        ["scripts/run.sh"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        session = requests.Session()
        login = wait_until(lambda: _get(f"http://127.0.0.1:{port}/accounts/login/", session), timeout=180, interval=1)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login.text).group(1)
        assert "Sign in with GitHub" in login.text  # against the demo GitHub, with its seeded users
        queue = session.post(
            f"http://127.0.0.1:{port}/accounts/login/",
            data={"username": "triager", "password": "triager", "csrfmiddlewaretoken": token, "next": "/"},
            headers={"Referer": login.url},
        )
        assert queue.status_code == 200
        assert "oncall: pt2" in queue.text
        assert "Demo: the issues are the shipped demo set" in queue.text  # every page says it is a demo
        db = sqlite3.connect(tmp_path / "db.sqlite3")
        issue_id, title = db.execute(
            "select id, title from rubric_app_issue where state='open' order by id limit 1"
        ).fetchone()
        assert db.execute("select count(*) from rubric_app_issue").fetchone()[0] >= 40
        # run.sh's workers say they are alive, with their queues (the issue page shows them): the runners by message,
        # which the coordinator writes (they hold no database).
        beats = lambda: dict(db.execute("select name, queues from rubric_app_workerheartbeat").fetchall())  # noqa: E731
        live = wait_until(lambda: len(beats()) == 4 and beats(), timeout=90)
        assert sorted(q for queues in live.values() for q in re.findall(r'"(\w+)"', queues)) == [
            "cpu",
            "cpu_auto",
            "cpu_recheck",
            "default",
            "github",
        ]
        # The runners were started with their identity and their own settings only: not even the demo's OAuth secret,
        # nor the dashboard's broker (their own is a folder under TRIAGE_VAR_DIR). Each is registered (issue 49).
        own = {"PATH", "TRIAGE_VAR_DIR", "PYTHONUNBUFFERED", "LOG_LEVEL", "TORCH_BUILDS", "RUNNER_LANES"}
        for pid in _runners(proc.pid):
            environment = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            names = {entry.split(b"=", 1)[0].decode() for entry in environment if b"=" in entry}
            assert {"RUNNER_NAME", "RUNNER_SECRET"} <= names <= own | {"RUNNER_NAME", "RUNNER_SECRET"}, names
        registered = dict(db.execute("select name, device from rubric_app_runner where revoked_at is null").fetchall())
        assert registered == {"cpu": "cpu", "auto": "cpu"}
        # The demo bisects its repros on arrival (AUTO_BISECT=cpu), each run marked automatic.
        automatic = db.execute("select count(*) from rubric_app_bisectionrun where automatic").fetchone()[0]
        assert automatic > 0

        # A task sent through the filesystem broker is picked up by run.sh's worker: a webhook delivery
        # (an edited title) is mirrored and the issue's suggestions refreshed.
        db.execute("update rubric_app_issue set suggestions_updated_at = NULL where id = ?", (issue_id,))
        db.commit()
        subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", EDIT_BY_WEBHOOK % issue_id],
            cwd=ROOT,
            env=env,
            check=True,
            timeout=60,
        )
        wait_until(
            lambda: db.execute(
                "select 1 from rubric_app_issue where id = ? and title like '%(edited)'"
                " and suggestions_updated_at is not null",
                (issue_id,),
            ).fetchone(),
            timeout=60,
        )

        _it_applies_and_resyncs_through_the_demo_github(port, session, db, env, tmp_path)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


def _it_applies_and_resyncs_through_the_demo_github(
    port: int, session: requests.Session, db, env: dict, tmp_path
) -> None:
    """The README's demo flow: Apply writes the labels to the local demo GitHub (never api.github.com),
    and a change made on the demo GitHub comes back with the next sync."""
    demo = re.search(
        r"^demo GitHub: (http://127\.0\.0\.1:\d+)", (tmp_path / "log" / "demo-github.log").read_text(), re.M
    )
    assert demo, "run.sh started no demo GitHub"
    api = f"{demo.group(1)}/repos/pytorch/pytorch/issues"
    number, issue_id, label = db.execute(
        "select i.number, i.id, s.label from rubric_app_issue i join rubric_app_suggestion s on s.issue_id = i.id "
        "where i.in_queue and s.kind = 'add' and s.label like 'module:%' and s.label not in "
        "(select l.name from rubric_app_label l join rubric_app_issue_labels il on il.label_id = l.id "
        "where il.issue_id = i.id) "
        "order by i.number limit 1"
    ).fetchone()
    seen = sorted(l["name"] for l in requests.get(f"{api}/{number}", timeout=5).json()["labels"])
    page = session.get(f"http://127.0.0.1:{port}/issues/{number}")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    applied = session.post(
        f"http://127.0.0.1:{port}/issues/{number}/apply",
        data={"labels": [label], "route": "pt2", "labels_seen": json.dumps(seen), "csrfmiddlewaretoken": token},
        headers={"Referer": page.url},
    )
    assert applied.status_code == 200, applied.text[:500]
    status = wait_until(
        lambda: (
            (
                row := db.execute(
                    "select status, result_message from rubric_app_triagedecision "
                    "where issue_id = ? order by id desc limit 1",
                    (issue_id,),
                ).fetchone()
            )
            and row[0] not in ("pending", "applying")
            and row
        ),
        timeout=60,
    )
    assert status[0] == "applied", status
    assert label in [l["name"] for l in requests.get(f"{api}/{number}", timeout=5).json()["labels"]]

    # Someone relabels the issue on the demo GitHub; the next sync (beat's, run here now) brings it back.
    requests.post(f"{api}/{number}/labels", json={"labels": ["needs reproduction"]}, timeout=5).raise_for_status()
    subprocess.run(
        [sys.executable, "manage.py", "sync_queue"],
        cwd=ROOT,
        check=True,
        timeout=120,
        env={**env, "GITHUB_API_URL": demo.group(1)},
    )
    names = {
        row[0]
        for row in db.execute(
            "select l.name from rubric_app_label l join rubric_app_issue_labels il on il.label_id = l.id "
            "where il.issue_id = ?",
            (issue_id,),
        )
    }
    assert {label, "needs reproduction"} <= names
