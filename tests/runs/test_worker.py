"""The task wiring, once, through the real broker and a real worker process; and a worker's stop."""

import os
import signal
import socket
import time
import uuid

import pytest
from django.utils import timezone

from rubric_app import dispatch
from rubric_app.models import BisectionRun, Issue, WebhookDelivery
from rubric_app.runs import assignment, broker
from rubric_app.tasks import process_webhook_task
from tests.factories import make_issue, opened_issue_payload, sleeping_repro
from tests.helpers import (
    RegisteredRunner,
    RunnerProcess,
    child_database_url,
    runner_env,
    runner_name,
    running_worker,
    wait_until,
)

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def test_it_round_trips_a_task_through_the_broker_and_a_worker(celery_worker_process, fake_github_server):
    # A webhook delivery as the receiver stores it: the worker mirrors the issue and refreshes its suggestions.
    payload = opened_issue_payload(
        4242,
        repo=fake_github_server.repo,
        title="torch.compile fails with dynamic=True",
        body="torch.compile fails",
        author="reporter",
    )
    delivery = WebhookDelivery.objects.create(delivery_id="worker-round-trip", event="issues", payload=payload)

    process_webhook_task.delay(delivery.pk)

    issue = wait_until(lambda: Issue.objects.filter(number=4242, suggestions_updated_at__isnull=False).first(), 60)
    delivery.refresh_from_db()
    assert delivery.processed_at is not None and not delivery.error
    assert issue.suggestions.exists()


@pytest.mark.torch
def test_it_stops_a_runner_within_ten_seconds_of_sigterm_mid_bisection(celery_worker_process, triager, tmp_path):
    """Issue 35: a worker running a bisection ignored SIGTERM for more than 80 s: Celery's SIGTERM waited for the task,
    and the task's cleanup waited on the fork server busy with the running mode. Now SIGTERM stops a runner within
    seconds, and the run goes back to the queue: the stopping runner says so (a report the session's coordinator
    records) and gives its message back to the broker, still the runner's."""
    registered = RegisteredRunner(runner_name(f"sigterm-{uuid.uuid4().hex[:6]}"))
    runner = registered.ensure()
    issue = make_issue(4343)
    # Given to this runner already: the session's coordinator gives queued runs to its own runner.
    run = BisectionRun.objects.create(
        issue=issue,
        requested_by=triager,
        repro_code=sleeping_repro(60),
        repro_style="module",
        assigned_to=runner,
        assigned_at=timezone.now(),
        job_token="the-assignment",
    )
    env = runner_env(tmp_path, name=registered.name, secret=registered.secret(), WORKER_HEARTBEAT_S="1")
    with open(tmp_path / "runner.log", "w") as log:
        worker = RunnerProcess(registered, env=env, log=log).start().proc
        try:
            job = assignment.job_for(run).as_message()
            dispatch.send_job(
                job, queue=broker.jobs_queue(registered.name), message_id=f"sigterm-{run.pk}", expires=600
            )
            wait_until(lambda: BisectionRun.objects.filter(pk=run.pk, current_mode="eager").exists(), timeout=240)
            time.sleep(2)  # inside the sandbox's 60 s sleep

            worker.send_signal(signal.SIGTERM)
            started = time.monotonic()
            worker.wait(timeout=30)
            stopped_in = time.monotonic() - started
        finally:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGKILL)
            registered.forget()

    assert stopped_in < 10, f"the runner took {stopped_in:.1f} s to stop"
    # Put back: the run waits in the queue for its message to come back to its runner, not "died mid-run".
    wait_until(lambda: BisectionRun.objects.filter(pk=run.pk, status="queued").exists(), timeout=30)
    run.refresh_from_db()
    assert (run.status, run.started_at, run.message_id, run.assigned_to) == ("queued", None, "", runner)


def test_it_stops_the_worker_running_beat_within_ten_seconds_of_sigterm(tmp_path):
    env = {**os.environ, "DATABASE_URL": child_database_url(), "PYTHONUNBUFFERED": "1"}
    name = f"beat-{os.getpid()}@{socket.gethostname()}"
    queue = f"beat-{uuid.uuid4().hex[:8]}"
    schedule = str(tmp_path / "celerybeat-schedule")
    with (
        open(tmp_path / "worker.log", "w") as log,
        running_worker(name, queue, env=env, log=log, pool="prefork", concurrency=2, beat_schedule=schedule) as worker,
    ):
        wait_until(lambda: "beat: Starting" in (tmp_path / "worker.log").read_text(), timeout=30)
        worker.send_signal(signal.SIGTERM)
        started = time.monotonic()
        worker.wait(timeout=30)
        stopped_in = time.monotonic() - started
    assert stopped_in < 10, f"the worker took {stopped_in:.1f} s to stop"
