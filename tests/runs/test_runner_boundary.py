"""A runner is a stranger (issue 49): attacks from a process holding only a runner's credential (its broker user's
URL, and for a registered runner its secret), on the real broker, against the real coordinator and runner.

Each attack runs as `python -m tests.attacker` in an otherwise empty environment (tests/attacker.py): what it can do
is what the broker lets its user do. The honest runner is the session's (tests/conftest.py `_workers`); the stranger
is a second registered runner, with a broker user of its own.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import timedelta

import pytest
import redis
from django.urls import reverse
from django.utils import timezone

from rubric_app import dispatch
from rubric_app.models import BisectionRun, Runner, SyncState, TriageDecision, WorkerHeartbeat
from rubric_app.runs import bisect_runs, broker, coordinator, jobs
from rubric_app.tasks import requeue_stuck_task
from tests.factories import eager_sleeping_repro, make_issue, make_label, sleeping_repro
from tests.helpers import ROOT, RegisteredRunner, runner_broker_url, runner_name, wait_until, wait_until_finished

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def stranger(celery_worker_process, django_db_blocker):
    """A second registered runner, its broker user made: what a red team holds after stealing a runner host."""
    registered = RegisteredRunner(runner_name("stranger"))
    registered.ensure()
    yield registered
    registered.forget()


def attack(runner: RegisteredRunner, kind: str, **args) -> dict:
    """Run one attack with `runner`'s broker credential and nothing else; returns the broker's answer."""
    env = {
        "RUNNER_BROKER_URL": runner_broker_url(runner.name, runner.secret()),
        "ATTACK_ARGS": json.dumps(args),
        "PATH": os.environ["PATH"],
    }
    done = subprocess.run(
        [sys.executable, "-m", "tests.attacker", kind], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def privileged() -> redis.Redis:
    """The dashboard's own broker client (the test's): to look at what is there, as an operator would."""
    return redis.Redis.from_url(os.environ["CELERY_BROKER_URL"])


def messages_in(queue: str) -> list[str]:
    """The task names of the messages waiting in `queue` on the dashboard's broker."""
    with privileged() as client:
        return [json.loads(raw)["headers"].get("task", "") for raw in client.lrange(queue, 0, -1)]


def signed(
    runner: RegisteredRunner, kind: str, body: dict, *, name: str | None = None, at: float | None = None
) -> dict:
    return jobs.Envelope(name or runner.name, kind, at or time.time(), body).signed(runner.secret())


def refused_reason(runner: RegisteredRunner, contains: str, timeout: float = 30) -> str:
    """Wait until `runner`'s row says the dashboard refused something from it for a reason containing `contains`."""
    return wait_until(
        lambda: next(
            (r for r in Runner.objects.filter(pk=runner.pk).values_list("refused", flat=True) if contains in r), ""
        ),
        timeout,
    )


# --- the privileged side takes no orders ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "args", "kwargs"),
    [
        ("rubric_app.tasks.sync_queue_task", [], {"full": True}),
        ("rubric_app.tasks.refresh_github_roles_task", [], {}),
        ("celery.starmap", [{"task": "rubric_app.tasks.sync_queue_task"}, [[True]] * 4], {}),
        ("rubric_app.runner.run_job", [{"repro": "open('/tmp/pwned', 'w')"}], {}),
    ],
)
@pytest.mark.parametrize("queue", ["default", "github"])
def test_it_refuses_a_task_sent_towards_the_privileged_side(celery_worker_process, stranger, name, args, kwargs, queue):
    answer = attack(stranger, "task", name=name, queue=queue, args=args, kwargs=kwargs)
    assert not answer["done"] and "no permissions" in answer["error"], answer  # the broker said no
    assert name not in messages_in(queue)
    assert not SyncState.objects.exclude(last_started_at=None).exists()  # no sync ran


def test_it_never_runs_a_job_on_a_process_that_holds_the_database(celery_worker_process, tmp_path):
    # Even a job that reached the coordinator's queue (only a privileged sender can put one there) names a task the
    # dashboard's workers do not know: discarded, nothing run.
    marker = tmp_path / "ran"
    job = {"run_id": 1, "token": "t", "repro": f"open({str(marker)!r}, 'w')", "style": "script", "device": "cpu"}
    from triage_site.celery import app

    app.send_task(dispatch.RUN_JOB, args=(job,), queue="default")
    # The coordinator takes its queue in order: once a later task of its own ran, the job was seen and dropped.
    app.send_task(dispatch.ASSIGN_RUNS, queue="default")
    wait_until(lambda: not messages_in("default"), timeout=30)
    time.sleep(1)
    assert not marker.exists()
    assert app.control.ping(destination=[celery_worker_process.coordinator], timeout=5)


@pytest.mark.parametrize(
    ("command", "arguments"),
    [
        ("add_consumer", {"queue": "cpu"}),
        ("cancel_consumer", {"queue": "default"}),
        ("rate_limit", {"task_name": "rubric_app.tasks.record_report_task", "rate_limit": "1/h"}),
        ("revoke", {"task_id": "*", "terminate": True}),
        ("shutdown", {}),
    ],
)
def test_it_gives_a_runners_remote_control_no_reach(celery_worker_process, stranger, command, arguments):
    answer = attack(stranger, "control", command=command, arguments=arguments)
    assert not answer["done"] and "no permissions to run the 'publish' command" in answer["error"], answer
    from triage_site.celery import app

    coordinator_name = celery_worker_process.coordinator
    assert app.control.ping(destination=[coordinator_name], timeout=5)
    active = app.control.inspect(destination=[coordinator_name], timeout=5).active_queues()[coordinator_name]
    assert {queue["name"] for queue in active} == {"default", "github"}
    # The coordinator still reads the runners: a beat of the honest runner sent from now is recorded.
    since = timezone.now()
    wait_until(
        lambda: WorkerHeartbeat.objects.filter(runner__name=celery_worker_process.name, sent_at__gt=since).exists()
    )


# --- a runner reaches its own queues only ----------------------------------------------------------------------------


def test_it_keeps_another_runners_job_and_reports_out_of_reach(celery_worker_process, stranger):
    honest = celery_worker_process.name
    answer = attack(
        stranger,
        "read",
        commands=[["LRANGE", broker.jobs_queue(honest), 0, -1]],
    )
    assert "no permissions to run the 'lrange' command" in answer["error"]
    for command in (
        ["BRPOP", broker.jobs_queue(honest), 1],
        ["RPOP", broker.reports_queue(honest)],
        ["HGET", f"runner.{honest}.unacked", "x"],
        ["LPUSH", broker.reports_queue(honest), "{}"],
        ["LPUSH", "default", "{}"],
    ):
        answer = attack(stranger, "read", commands=[command])
        assert "no permissions to access one of the keys" in answer["error"], (command, answer)
    for command in (
        ["KEYS", "*"],
        ["SCAN", 0],
        ["FLUSHDB"],
        ["CONFIG", "GET", "*"],
        ["ACL", "LIST"],
        ["SUBSCRIBE", "x"],
    ):
        answer = attack(stranger, "read", commands=[command])
        assert "no permissions to run" in answer["error"], (command, answer)


@pytest.mark.torch
def test_it_records_the_honest_result_of_a_run_another_runner_forges(celery_worker_process, stranger, triager):
    honest = celery_worker_process
    run = bisect_runs.start_bisection(issue=make_issue(4901), user=triager, code=sleeping_repro(3), device="cpu")
    wait_until(lambda: BisectionRun.objects.filter(pk=run.pk, status="running").exclude(current_mode="").exists(), 240)
    run.refresh_from_db()
    forged = jobs.Report(
        jobs.RESULT,
        run.pk,
        run.job_token,
        run.message_id,
        run.attempt,
        honest.name,
        run.runner_boot,
        {
            "results": [{"mode": "eager", "status": "passed"}, {"mode": "inductor", "status": "raised"}],
            "torch_version": "9.9.9-evil",
            "build": "",
        },
    ).as_message()
    # Even holding the run's token, message and attempt (the worst case): under its own name, for a run given to
    # another runner; in its own queue under the honest runner's name; in the honest runner's queue.
    attack(stranger, "publish", queue=broker.reports_queue(stranger.name), body=signed(stranger, jobs.REPORT, forged))
    refused_reason(stranger, f"a result report for run {run.pk}, which is not given to it")
    attack(
        stranger,
        "publish",
        queue=broker.reports_queue(stranger.name),
        body=signed(stranger, jobs.REPORT, forged, name=honest.name),
    )
    refused_reason(stranger, f"names runner '{honest.name}' but came from runner '{stranger.name}'")
    answer = attack(
        stranger, "publish", queue=broker.reports_queue(honest.name), body=signed(stranger, jobs.REPORT, forged)
    )
    assert "no permissions" in answer["error"]
    # A heartbeat under the honest runner's name (another boot) would have ended its run as restarted.
    beat = {"boot": "evil", "device": "cpu", "lanes": ["cpu"], "builds": {}, "active": [], "waiting": 0}
    attack(
        stranger,
        "publish",
        queue=broker.reports_queue(stranger.name),
        body=signed(stranger, jobs.HEARTBEAT, beat, name=honest.name),
    )

    wait_until_finished(run, timeout=240)
    assert run.status == "done", run.error
    assert (run.runner, run.worker) == (honest.name, f"{honest.name} (cpu)")
    assert run.torch_version.startswith("2.13") and len(run.results) >= 5
    assert WorkerHeartbeat.objects.get(runner__name=honest.name).boot != "evil"


def test_it_accepts_no_gpu_run_on_a_gpu_claim_it_did_not_register(celery_worker_process, stranger, client, triager):
    now = time.time()
    gpu = {
        "boot": "b",
        "device": "cuda",
        "lanes": ["gpu"],
        "builds": {"default": "2.13.0"},
        "hardware": {"gpu": "NVIDIA H100 80GB HBM3"},
        "active": [],
        "waiting": 0,
    }
    # A cpu runner claiming a GPU, and a beat for a runner nobody registered ("h100").
    attack(
        stranger,
        "publish",
        queue=broker.reports_queue(stranger.name),
        body=signed(stranger, jobs.HEARTBEAT, gpu, at=now),
    )
    refused_reason(stranger, "it says it serves 'cuda', and was registered for cpu")
    attack(
        stranger,
        "publish",
        queue=broker.reports_queue(stranger.name),
        body=signed(stranger, jobs.HEARTBEAT, gpu, name="h100"),
    )
    refused_reason(stranger, "names runner 'h100'")
    assert WorkerHeartbeat.objects.queues()["gpu"] == []

    client.force_login(triager)
    issue = make_issue(4902)
    response = client.post(
        reverse("rubric_app:bisect", args=[issue.number]), {"code": "import torch", "device": "cuda"}
    )
    assert response.status_code == 400 and "No registered GPU runner is online" in response.content.decode()
    assert not BisectionRun.objects.filter(issue=issue).exists()


def test_it_refuses_a_revoked_runner_at_the_broker_and_at_the_dashboard(celery_worker_process, stranger, settings):
    from rubric_app.runs import registration

    settings.RUNNER_BROKER_ACL = "manage"  # the dashboard keeps the runners' broker users (the coordinator's setting)
    registration.revoke(Runner.objects.get(pk=stranger.pk), by="an operator")
    answer = attack(stranger, "read", commands=[["PING"]])
    assert "invalid username-password pair or user is disabled" in answer["error"], answer  # its broker user is gone
    # Were the broker still to take its messages (a broker with no users of its own), the dashboard would not.
    with privileged() as client:
        body = signed(stranger, jobs.HEARTBEAT, {"boot": "b", "device": "cpu", "lanes": ["cpu"]})
        client.lpush(broker.reports_queue(stranger.name), json.dumps(_kombu_message(body)))
    time.sleep(8)  # longer than the gateway's refresh
    assert not WorkerHeartbeat.objects.filter(runner__pk=stranger.pk).exists()
    assert Runner.objects.get(pk=stranger.pk).events.filter(action="revoked", by="an operator").exists()


def _kombu_message(body: dict) -> dict:
    """A message as kombu's Redis transport stores it (what a publisher with the broker's own access could write)."""
    import base64

    return {
        "body": base64.b64encode(json.dumps(body).encode()).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {},
        "properties": {
            "body_encoding": "base64",
            "delivery_tag": "forged",
            "delivery_info": {"exchange": "", "routing_key": "x"},
        },
    }


@pytest.mark.parametrize(
    ("body", "content_type", "reason"),
    [
        ("not json at all", "text/plain", "content type 'text/plain', not JSON"),
        ({"runner": "x"}, "application/json", "not a runner's message: KeyError"),
        (jobs.MAX_MESSAGE_BYTES + 10, "text/plain", "more than a runner may send"),
    ],
)
def test_it_refuses_a_malformed_message_with_its_reason(celery_worker_process, stranger, body, content_type, reason):
    size = body if isinstance(body, int) else 0
    attack(
        stranger, "publish", queue=broker.reports_queue(stranger.name), body=body, size=size, content_type=content_type
    )
    refused_reason(stranger, reason)


def test_it_refuses_a_signed_result_missing_a_field_and_leaves_the_run_as_it_was(celery_worker_process, stranger):
    runner = Runner.objects.get(pk=stranger.pk)
    run = BisectionRun.objects.create(
        issue=make_issue(4903), repro_code="x", assigned_to=runner, assigned_at=timezone.now(), job_token="t"
    )
    started = jobs.Report(jobs.STARTED, run.pk, "t", "m", "a", stranger.name, "b", {"device": "cpu"}).as_message()
    broken = jobs.Report(jobs.RESULT, run.pk, "t", "m", "a", stranger.name, "b", {"results": [{"mode": "eager"}]})
    for report in (started, broken.as_message()):
        attack(
            stranger, "publish", queue=broker.reports_queue(stranger.name), body=signed(stranger, jobs.REPORT, report)
        )
    refused_reason(stranger, "result 0 has no status")
    run.refresh_from_db()
    assert (run.status, run.results, run.verdict_labels) == ("running", [], [])


# --- nothing lost for long ------------------------------------------------------------------------------------------


def test_it_sends_again_a_decision_whose_message_was_deleted_at_the_next_sweep(
    fake_github, triager, celery_worker_process, settings
):
    make_label("module: dynamo", github=fake_github)
    make_label("triaged", github=fake_github)
    issue = make_issue(4904, labels=("oncall: pt2",))
    fake_github.add_issue(4904, labels=["oncall: pt2"])
    with privileged() as client:
        client.delete("github")  # what a wiped broker leaves: the row, no message
    decision = TriageDecision.objects.create(
        issue=issue,
        user=triager,
        labels_seen=["oncall: pt2"],
        labels_added=["module: dynamo", "triaged"],
        created_at=timezone.now() - timedelta(seconds=settings.RESEND_AFTER_S + 5),
    )
    requeue_stuck_task()
    wait_until_finished(decision, timeout=60)
    assert decision.status == TriageDecision.Status.APPLIED, decision.result_message


@pytest.mark.torch
def test_it_gives_again_a_job_deleted_from_its_runners_queue(celery_worker_process, triager):
    runner = Runner.objects.get(name=celery_worker_process.name)
    issue = make_issue(4905)
    automatic = BisectionRun.objects.create(
        issue=issue, repro_code=eager_sleeping_repro(20), repro_style="module", automatic=True, caused_by="a test"
    )
    coordinator.start_run(automatic)
    # In its first mode, plain eager, which sleeps 20 s: its next look at its queue is that far away.
    wait_until(lambda: BisectionRun.objects.filter(pk=automatic.pk, current_mode="eager").exists(), 120)
    # A person's run, given to the runner busy with an automatic one: its job waits in that runner's queue...
    person = bisect_runs.start_bisection(issue=issue, user=triager, code=sleeping_repro(0.1, n=2), device="cpu")
    first = wait_until(
        lambda: (
            BisectionRun.objects.filter(pk=person.pk, assigned_to=runner).values_list("job_token", flat=True).first()
        ),
        30,
    )
    with privileged() as client:  # ...and vanishes from the broker.
        client.delete(broker.jobs_queue(runner.name))
    # The runner's beats say it neither holds nor waits for it: given again, and the automatic run makes way for it.
    wait_until_finished(person, timeout=240)
    assert person.status == "done", person.error
    assert person.job_token != first
    automatic.refresh_from_db()
    assert automatic.status in ("queued", "running", "done")  # it made way, then went on
