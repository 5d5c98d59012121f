"""Automatic bisection on arrival (issue #29): which repros run, the budgets, and a person's run first."""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import uuid
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from rubric_app.models import BisectionRun, Comment, WebhookDelivery, WorkerHeartbeat
from rubric_app.runs import auto_bisect, bisect_runs, coordinator
from rubric_app.tasks import process_webhook_task
from tests.factories import make_issue, opened_issue_payload, sleeping_repro
from tests.helpers import wait_until

REPRO = """```python
import torch

def fn(x):
    return torch.sin(x) + 1

x = torch.randn(8)
print(torch.compile(fn)(x))
```"""


def body(code_block: str = REPRO, prose: str = "Compiling this fails.") -> str:
    return f"### 🐛 Describe the bug\n\n{prose}\n\n{code_block}\n"


@pytest.fixture
def auto(db, settings):
    settings.AUTO_BISECT = "cpu"
    settings.AUTO_BISECT_PER_HOUR = 20
    settings.AUTO_BISECT_PER_AUTHOR = 5
    return settings


def queue(*issues, cause="sync") -> list[auto_bisect.Outcome]:
    return auto_bisect.queue_for_issues([i.pk for i in issues], cause=cause)


def test_it_queues_a_new_repro_once_on_the_low_priority_queue_saying_who_caused_it(
    auto, django_capture_on_commit_callbacks
):
    issue = make_issue(5001, body=body(), author="reporter")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        [outcome] = queue(issue)
    run = outcome.run
    assert outcome.reason == "queued" and len(callbacks) == 1
    assert (run.automatic, run.requested_by, run.caused_by, run.device) == (True, None, "@reporter (sync)", "cpu")
    assert run.queue_name == "cpu_auto" and "torch.sin" in run.repro_code
    assert queue(issue)[0].reason == "this repro was already bisected"


def test_it_runs_nothing_for_an_edit_that_keeps_the_code_and_again_for_new_code(auto):
    issue = make_issue(5002, body=body(), author="reporter")
    queue(issue)
    issue.body = body(prose="Edited: it fails on 2.13 too.   ")
    issue.save(update_fields=["body"])
    assert queue(issue)[0].reason == "this repro was already bisected"
    issue.body = body(REPRO.replace("torch.sin(x) + 1", "torch.cos(x) * 2"))
    issue.save(update_fields=["body"])
    assert queue(issue)[0].reason == "queued"
    assert BisectionRun.objects.filter(issue=issue, automatic=True).count() == 2


def test_it_holds_the_hourly_budget(auto):
    auto.AUTO_BISECT_PER_HOUR = 3
    issues = [make_issue(5100 + i, body=body(REPRO.replace("+ 1", f"+ {i}")), author=f"user{i}") for i in range(5)]
    for i, issue in enumerate(issues):  # each author reported before (an author's first report waits instead)
        BisectionRun.objects.create(
            issue=issue,
            automatic=True,
            caused_by_login=f"user{i}",
            repro_code="x",
            status="done",
            created_at=timezone.now() - timedelta(days=2),
        )
    reasons = [o.reason for o in queue(*issues)]
    assert reasons.count("queued") == 3
    assert all("hourly budget" in r for r in reasons if r != "queued")
    BisectionRun.objects.update(created_at=timezone.now() - timedelta(hours=2))  # an hour later
    assert [o.reason for o in queue(*issues)].count("queued") == 2


def test_it_holds_each_authors_daily_budget_counting_who_posted_the_repro(auto):
    auto.AUTO_BISECT_PER_AUTHOR = 2
    issues = [make_issue(5200 + i, body=body(REPRO.replace("+ 1", f"+ {i}")), author="prolific") for i in range(3)]
    reasons = [o.reason for o in queue(*issues)]
    assert reasons[:2] == ["queued", "queued"] and "@prolific's budget" in reasons[2]
    # A repro a maintainer posted in a comment is that maintainer's, not the issue author's.
    issue = make_issue(5210, body="No code here.", author="prolific")
    Comment.objects.create(
        issue=issue, github_id=99, author="helper", author_association="MEMBER", body=body(REPRO.replace("+ 1", "- 7"))
    )
    [outcome] = queue(issue, cause="webhook")
    assert outcome.reason == "queued" and outcome.run.caused_by == "@helper (webhook)"
    assert (outcome.run.repro_author, outcome.run.repro_counts) == ("helper", True)


def test_it_never_bisects_another_commenters_repro_automatically_and_says_it_is_offered(auto):
    # Issue #35: a stranger's passing snippet outscored the reporter's repro and was bisected on their budget.
    reporter_repro = REPRO.replace("torch.sin(x) + 1", "torch.sin(x).sum()").replace("torch.randn(8)", "torch.eye(3)")
    issue = make_issue(5220, body=body(reporter_repro), author="reporter")
    stranger = REPRO.replace("+ 1", "- 7")  # scores higher (it makes its inputs with torch.randn): it used to win
    Comment.objects.create(issue=issue, github_id=98, author="drive-by", author_association="NONE", body=body(stranger))
    [outcome] = queue(issue, cause="webhook")
    assert outcome.reason == "queued" and "torch.sin(x).sum()" in outcome.run.repro_code
    assert (outcome.run.repro_author, outcome.run.caused_by_login) == ("reporter", "reporter")

    only_theirs = make_issue(5221, body="It fails, see the comments.", author="reporter")
    Comment.objects.create(
        issue=only_theirs, github_id=97, author="drive-by", author_association="CONTRIBUTOR", body=body(stranger)
    )
    [outcome] = queue(only_theirs, cause="webhook")
    assert outcome.run is None and not BisectionRun.objects.filter(issue=only_theirs).exists()
    assert outcome.reason == (
        "no repro from the reporter or a maintainer (offered on the issue page, never run automatically: @drive-by's)"
    )


def test_it_keeps_an_authors_first_report_in_line_when_the_hourly_budget_is_spent(
    auto, django_capture_on_commit_callbacks
):
    auto.AUTO_BISECT_PER_HOUR = 2
    issues = [make_issue(5150 + i, body=body(REPRO.replace("+ 1", f"+ {i}")), author=f"first{i}") for i in range(3)]
    again = make_issue(5160, body=body(REPRO.replace("+ 1", "- 1")), author="first0")  # not their first: refused
    outcomes = [queue(issue)[0] for issue in [*issues, again]]
    assert [o.reason for o in outcomes[:2]] == ["queued", "queued"]
    assert outcomes[2].reason.startswith("waiting: @first2's first report") and outcomes[2].run.status == "waiting"
    assert "hourly budget" in outcomes[3].reason and outcomes[3].run is None
    waiting = outcomes[2].run
    assert auto_bisect.release_waiting() == 0  # the budget is still spent
    BisectionRun.objects.exclude(pk=waiting.pk).update(created_at=timezone.now() - timedelta(minutes=61))
    with django_capture_on_commit_callbacks(execute=False) as sent:
        assert auto_bisect.release_waiting() == 1
    waiting.refresh_from_db()
    assert waiting.status == "queued" and len(sent) == 1
    assert queue(make_issue(5161, body=body(REPRO.replace("+ 1", "- 2")), author="another"))[0].reason == "queued"
    assert "hourly budget" in queue(make_issue(5162, body=body(REPRO.replace("+ 1", "- 3")), author="x"))[0].reason


FLOOD_SECRET = "flood-test-secret"


def _signed(client, payload: dict):
    """POST one issues event to the webhook receiver as GitHub signs it."""
    raw = json.dumps(payload).encode()
    signature = "sha256=" + hmac.new(FLOOD_SECRET.encode(), raw, hashlib.sha256).hexdigest()
    headers = {"X-GitHub-Event": "issues", "X-GitHub-Delivery": str(uuid.uuid4()), "X-Hub-Signature-256": signature}
    return client.post("/github/webhook", data=raw, content_type="application/json", headers=headers)


def test_it_gives_a_newcomer_arriving_after_a_flood_of_34_webhooks_a_run(
    auto, client, django_capture_on_commit_callbacks
):
    """Issue 35, attack 6: one author's eight issues and six one-character edits of their repros, then twenty
    throwaway authors, used the whole hourly budget; a newcomer's genuine report then got no run, and nothing ever
    retried it. Now the newcomer's first report keeps a place, sent when the budget frees."""
    auto.GITHUB_WEBHOOK_SECRETS = [FLOOD_SECRET]
    minutes = itertools.count(1)

    def event(number: int, author: str, code: str, action: str = "opened") -> dict:
        payload = opened_issue_payload(
            number, repo=auto.GITHUB_REPO, title=f"compile fails ({number})", body=body(code), author=author
        )
        payload["action"] = action
        payload["issue"]["updated_at"] = f"2026-12-01T10:{next(minutes):02d}:00Z"
        return payload

    flood = [event(6100 + i, "flooder", REPRO.replace("+ 1", f"+ {i}")) for i in range(8)]
    flood += [event(6100 + i, "flooder", REPRO.replace("+ 1", f"+ {i}9"), "edited") for i in range(6)]
    flood += [event(6200 + i, f"throwaway{i}", REPRO.replace("+ 1", f"* {i + 2}")) for i in range(20)]
    newcomer = event(6300, "newcomer", REPRO.replace("torch.sin(x) + 1", "torch.cos(x).exp()"))
    assert len(flood) == 34
    with django_capture_on_commit_callbacks(execute=False):  # the receiver's half; the worker's follows, in order
        assert all(_signed(client, payload).status_code == 202 for payload in [*flood, newcomer])
    for delivery in WebhookDelivery.objects.order_by("pk"):
        with django_capture_on_commit_callbacks(execute=False):
            process_webhook_task(delivery.pk)
        delivery.refresh_from_db()
        assert not delivery.error, delivery.error

    automatic = BisectionRun.objects.filter(automatic=True)
    assert automatic.filter(status="queued").count() == auto.AUTO_BISECT_PER_HOUR == 20
    assert automatic.filter(caused_by_login="flooder").count() == auto.AUTO_BISECT_PER_AUTHOR == 5
    run = automatic.get(issue__number=6300)
    assert (run.status, run.caused_by) == ("waiting", "@newcomer (webhook)")  # before: no run at all

    # An hour on, the sweep (beat) sends the places in arrival order; the newcomer's is among them.
    automatic.filter(status="queued").update(created_at=timezone.now() - timedelta(minutes=61))
    with django_capture_on_commit_callbacks(execute=False) as sent:
        released = auto_bisect.release_waiting()
    run.refresh_from_db()
    assert released == 6 and len(sent) == 6 and run.status == "queued"
    assert not automatic.filter(status="waiting").exists()


def test_it_fails_fast_saying_needs_network_for_a_repro_that_downloads(auto, django_capture_on_commit_callbacks):
    downloads = REPRO.replace("x = torch.randn(8)", 'm = AutoModel.from_pretrained("bert-base")\nx = torch.randn(8)')
    issue = make_issue(5300, body=body(downloads), author="reporter")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        [outcome] = queue(issue)
    assert outcome.reason == "needs network" and not callbacks  # nothing is queued, nothing runs
    run = outcome.run
    assert run.status == "failed" and run.automatic and run.error.startswith("needs network")


def test_it_leaves_cuda_repros_to_a_live_gpu_worker_and_runs_nothing_when_off(auto):
    cuda = make_issue(5400, body=body(REPRO.replace("torch.randn(8)", 'torch.randn(8, device="cuda")')), author="r")
    assert "AUTO_BISECT=cpu" in queue(cuda)[0].reason
    auto.AUTO_BISECT = "all"
    assert queue(cuda)[0].reason == "the repro needs CUDA and no GPU worker is live"
    WorkerHeartbeat.objects.create(name="gpu@box", queues=["gpu", "gpu_auto"], device="cuda")
    [outcome] = queue(cuda)
    assert outcome.reason == "queued" and outcome.run.queue_name == "gpu_auto"
    auto.AUTO_BISECT = "off"
    plain = make_issue(5401, body=body(), author="r")
    assert queue(plain) == [] and not BisectionRun.objects.filter(issue=plain).exists()


def test_it_bisects_a_repro_that_arrives_by_webhook(auto, django_capture_on_commit_callbacks):
    payload = opened_issue_payload(
        5500, repo=auto.GITHUB_REPO, title="sin + 1 fails under torch.compile", body=body(), author="newcomer"
    )
    delivery = WebhookDelivery.objects.create(delivery_id="d-5500", event="issues", payload=payload)
    with django_capture_on_commit_callbacks(execute=False):
        process_webhook_task(delivery.pk)
    delivery.refresh_from_db()
    assert not delivery.error, delivery.error
    run = BisectionRun.objects.get(issue__number=5500)
    assert run.automatic and run.caused_by == "@newcomer (webhook)"


def test_it_bisects_the_backlog_from_the_command_line(auto):
    make_issue(5600, body=body(), author="a")
    make_issue(5601, body="no repro", author="b")
    call_command("auto_bisect")
    assert list(BisectionRun.objects.values_list("issue__number", "automatic")) == [(5600, True)]


def test_it_sends_an_operators_backlog_pass_whole_without_spending_the_hourly_budget(auto):
    """Issue 53: make run's demo queued its repros with `manage.py auto_bisect` at each start, and 7 of them waited
    minutes behind AUTO_BISECT_PER_HOUR; the hour's arrivals then found the budget spent."""
    auto.AUTO_BISECT_PER_HOUR = 3
    for i in range(6):
        make_issue(5800 + i, body=body(REPRO.replace("+ 1", f"+ {i}")), author=f"demo{i}")

    call_command("auto_bisect")

    runs = BisectionRun.objects.filter(automatic=True)
    assert runs.filter(status="queued", backlog=True).count() == 6 and not runs.filter(status="waiting").exists()
    assert auto_bisect.hourly_spent().count() == 0
    # An arrival after it finds the hour's budget whole; the per-author budget still holds for the backlog.
    arrival = make_issue(5810, body=body(REPRO.replace("+ 1", "+ 10")), author="demo0")
    assert queue(arrival)[0].reason == "queued" and auto_bisect.hourly_spent().count() == 1


def test_it_ends_an_automatic_run_no_worker_reached_in_a_day_but_never_resends_the_backlog(auto):
    issue = make_issue(5700, body=body(), author="a")
    run = queue(issue)[0].run
    BisectionRun.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(hours=3))
    assert not BisectionRun.objects.stuck(timezone.now() - timedelta(minutes=15)).exists()
    coordinator.fail_unclaimed_runs({"cpu": [], "gpu": [], "github": []})
    run.refresh_from_db()
    assert run.status == "queued"  # waiting behind human runs is its normal state
    BisectionRun.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(days=2))
    coordinator.fail_unclaimed_runs({"cpu": [], "gpu": [], "github": []})
    run.refresh_from_db()
    assert run.status == "failed" and "automatic run" in run.error


@pytest.mark.torch
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_starts_a_persons_run_before_the_automatic_backlog(celery_worker_process, triager, settings):
    # 50 automatic runs queued, then one a triager asks for: the coordinator gives a person's run first (it is given to
    # the runner busy with an automatic one, which makes way), so at most the automatic run already started goes
    # before the person's.
    settings.AUTO_BISECT, settings.AUTO_BISECT_PER_HOUR, settings.AUTO_BISECT_PER_AUTHOR = "cpu", 100, 100
    issues = [make_issue(5800 + i, body=f"```python\n{sleeping_repro(0.3, i)}```\n", author=f"u{i}") for i in range(50)]
    outcomes = queue(*issues)
    assert [o.reason for o in outcomes].count("queued") == 50
    wait_until(lambda: BisectionRun.objects.filter(automatic=True, status="running").exists(), timeout=120)
    asked = bisect_runs.start_bisection(issue=issues[0], user=triager, code=sleeping_repro(0.3, 99), device="cpu")
    try:
        wait_until(lambda: BisectionRun.objects.get(pk=asked.pk).started_at is not None, timeout=180)
        asked.refresh_from_db()
        ahead = BisectionRun.objects.filter(automatic=True, started_at__gte=asked.created_at)
        assert ahead.filter(started_at__lt=asked.started_at).count() <= 1
        assert BisectionRun.objects.filter(automatic=True, status="queued").count() >= 40
    finally:
        # The backlog waits in the database, given to no runner: ended, nothing of it runs.
        BisectionRun.objects.filter(automatic=True, status="queued").update(status="failed", error="test over")


@pytest.mark.torch
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_starts_a_triagers_run_within_one_mode_of_a_running_automatic_one(celery_worker_process, triager, settings):
    """Issue 35: a triager's run waited 78 s behind an automatic run on the worker that serves both lanes. Now the
    coordinator gives the triager's run to that runner, whose automatic run makes way at its next mode and goes back to
    the queue."""
    settings.AUTO_BISECT, settings.AUTO_BISECT_PER_HOUR = "cpu", 100
    issue = make_issue(5900, body=f"```python\n{sleeping_repro(5, 1)}```\n", author="reporter")
    [outcome] = queue(issue)
    automatic, asked = outcome.run, None
    try:
        wait_until(lambda: BisectionRun.objects.filter(pk=automatic.pk, current_mode="aot_eager").exists(), timeout=240)
        quick = sleeping_repro(0, 2)
        asked = bisect_runs.start_bisection(issue=issue, user=triager, code=quick, device="cpu")
        wait_until(lambda: BisectionRun.objects.get(pk=asked.pk).started_at is not None, timeout=120)
        asked.refresh_from_db()
        waited = (asked.started_at - asked.created_at).total_seconds()
        # At most the rest of the mode it was in (a 5 s sleep) and the hand-over; the whole automatic run would have
        # been ~40 s more.
        assert waited < 5 + 6, waited
        automatic.refresh_from_db()
        # Back in its queue behind the triager's run (or started again once that one was taken).
        assert automatic.status == "queued" or automatic.started_at > asked.started_at
    finally:
        BisectionRun.objects.filter(pk__in=[automatic.pk]).update(status="failed", error="test over")
        if asked is not None:
            wait_until(lambda: BisectionRun.objects.get(pk=asked.pk).is_finished, timeout=240)
