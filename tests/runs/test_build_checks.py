"""One repro across torch builds (issue #29): the comparison stored on the issue, what the triager sees (the queue's
markers, the "may be fixed" lane, the issue page's runs side by side, the bisect form's builds), the reply asking
the reporter to confirm, and the re-checks queued when a worker hosts a newer build (budgeted, lowest priority).

The worker tests use the session worker's two real builds (tests/conftest.py): "default", this interpreter with
torch 2.13.0, and "nightly", a second virtualenv whose torch reports a newer nightly and whose Inductor refuses
torch.sin (tests/torch_builds.py).
"""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from django.utils import timezone

from rubric_app.bisection import builds
from rubric_app.bisection.extract import to_module_style
from rubric_app.github.applying import apply_decision
from rubric_app.models import (
    BisectionRun,
    GitHubWrite,
    Issue,
    Suggestion,
    TriageDecision,
    WebhookDelivery,
    WorkerHeartbeat,
)
from rubric_app.rubric.reading.catalog import load_replies
from rubric_app.runs import auto_bisect, bisect_runs, build_checks, runner
from rubric_app.tasks import process_webhook_task
from rubric_app.triage import suggestions
from rubric_app.triage.decisions import plan_changes, request_decision
from rubric_app.vocabulary import Route
from tests.factories import (
    INDUCTOR_RAISED,
    PASSED,
    RELEASE,
    make_finished_run,
    make_issue,
    make_label,
    opened_issue_payload,
)
from tests.helpers import only_this_tests_workers, wait_until, wait_until_finished
from tests.torch_builds import NEWER_VERSION, REGRESSION_MESSAGE, SIN_REPRO, make_patched_build

COS_REPRO = "import torch\n\ndef f(x):\n    return torch.cos(x) + 1\n\nprint(torch.compile(f)(torch.randn(8)))\n"
# What automatic bisection runs of it: the harness's convention, compared with eager (bisection.extract).
COS_MODULE = to_module_style(COS_REPRO)


@pytest.fixture
def heartbeat(db):
    """Write a worker's heartbeat, and no other (the session's worker beats into the same database)."""
    only_this_tests_workers()
    return _heartbeat


def _heartbeat(name="w1", queues=("cpu", "cpu_auto", "cpu_recheck"), hosted=None, device="cpu") -> WorkerHeartbeat:
    return WorkerHeartbeat.objects.create(
        name=name, queues=list(queues), device=device, builds=hosted or {"default": RELEASE, "nightly": NEWER_VERSION}
    )


@pytest.fixture
def regression(db) -> Issue:
    """#6001: its repro passes on the release build and fails in inductor on the nightly."""
    for name in ("triage review", "module: regression", "module: inductor", "triaged"):
        make_label(name)
    issue = make_issue(6001, title="sin fails to compile on the nightly", body=f"```python\n{SIN_REPRO}```")
    make_finished_run(issue, build="default", results=PASSED, ago=30)
    make_finished_run(issue, build="nightly", version=NEWER_VERSION, results=INDUCTOR_RAISED, ago=10)
    build_checks.compare_issue(issue)
    suggestions.refresh_issue(issue)
    return issue


@pytest.fixture
def may_be_fixed(db) -> Issue:
    """#6002: its repro reproduced on the release build and passes on the nightly."""
    issue = make_issue(6002, title="cos miscompiles", body=f"```python\n{COS_REPRO}```")
    make_finished_run(issue, build="default", results=INDUCTOR_RAISED, code=COS_REPRO, ago=30)
    make_finished_run(issue, build="nightly", version=NEWER_VERSION, results=PASSED, code=COS_REPRO, ago=10)
    build_checks.compare_issue(issue)
    return issue


# --- the comparison and what it suggests -----------------------------------------------------------------


def test_it_calls_passes_on_release_and_fails_on_nightly_a_regression_for_the_meeting(regression):
    regression.refresh_from_db()
    assert regression.build_finding == "regression"
    assert regression.build_comparison["summary"] == (
        f"passes on {RELEASE}; fails on {NEWER_VERSION} (nightly): inductor raised"
    )
    added = {s.label: s for s in regression.suggestions.filter(kind=Suggestion.Kind.ADD)}
    assert added["triage review"].rule_id == "R11" and added["triage review"].source == "bisection"
    assert "a regression: passes on 2.13.0+cpu" in added["triage review"].evidence
    assert added["module: regression"].rule_id == "R11"


def test_it_keeps_fails_on_both_out_of_the_regression_marker(db):
    issue = make_issue(6003, body=f"```python\n{SIN_REPRO}```")
    make_finished_run(issue, results=INDUCTOR_RAISED, ago=30)
    make_finished_run(issue, build="nightly", version=NEWER_VERSION, results=INDUCTOR_RAISED, ago=10)
    assert build_checks.compare_issue(issue).kind == "fails_on_both"
    issue.refresh_from_db()
    assert issue.build_finding == "" and issue.build_comparison["kind"] == "fails_on_both"
    assert issue.regression_evidence() == ()


def test_it_compares_each_repro_on_each_device_apart_and_says_which_still_fails(db):
    issue = make_issue(6004, body=f"```python\n{COS_REPRO}```", author="reporter")
    make_finished_run(issue, results=PASSED, code="import torch  # a triager's own repro", ago=50)
    make_finished_run(issue, results=PASSED, code=COS_REPRO, device="cuda", ago=30)
    last = make_finished_run(
        issue, build="nightly", version=NEWER_VERSION, results=INDUCTOR_RAISED, code=COS_REPRO, ago=10
    )
    # A CUDA pass beside a CPU failure is neither a fix nor a regression: one version per device, nothing to compare;
    # and what passes elsewhere is weighed against the repro that still fails.
    comparison = build_checks.compare_issue(issue)
    assert (comparison.kind, comparison.held_back) == (
        "still_fails",
        f"@reporter's repro still fails on {NEWER_VERSION} (run {last.pk})",
    )
    assert Issue.objects.get(pk=issue.pk).build_finding == ""


def test_it_calls_a_repro_passing_on_a_build_newer_than_the_reporters_may_be_fixed(db):
    issue = make_issue(6005, body=f"PyTorch version: 2.5.1+cu124\n\n```python\n{COS_REPRO}```", author="reporter")
    run = make_finished_run(issue, results=PASSED, code=COS_MODULE, repro_style="module")
    comparison = build_checks.compare_issue(issue)
    assert (comparison.kind, comparison.summary) == (
        "may_be_fixed",
        f"reported failing on 2.5.1 by @reporter (its repro checks its result), passes on {RELEASE} (run {run.pk}), "
        "same repro, CPU",
    )
    assert Issue.objects.get(pk=issue.pk).queue_lanes() == ["pt2", "fixed", "all"]


# --- what the triager sees ---------------------------------------------------------------------------------------


def test_it_lists_may_be_fixed_issues_in_their_lane_with_the_markers_on_each_row(
    client, triager, regression, may_be_fixed
):
    client.force_login(triager)
    assert list(Issue.objects.for_queue("fixed")) == [may_be_fixed]

    fixed = client.get(reverse("rubric_app:queue"), {"lane": "fixed"}).content.decode()
    assert "#6002" in fixed and "#6001" not in fixed
    assert 'data-build-finding="may_be_fixed"' in fixed and ">may be fixed</span>" in fixed

    every = client.get(reverse("rubric_app:queue"), {"lane": "all"}).content.decode()
    assert 'data-build-finding="regression"' in every and "regression (R11)</span>" in every
    assert 'title="passes on 2.13.0+cpu; fails on 2.14.0.dev20261201+cpu (nightly): inductor raised"' in every


def test_it_shows_each_builds_result_side_by_side_on_the_issue_page(client, triager, regression):
    client.force_login(triager)
    page = client.get(regression.get_absolute_url()).content.decode()
    table = page.split('id="build-comparison"')[1].split("</table>")[0]
    assert table.index(RELEASE) < table.index(NEWER_VERSION)  # oldest build first
    assert 'data-build-run="default" class="outcome-passed"' in table
    assert 'data-build-run="nightly" class="outcome-reproduced"' in table
    assert "regression (R11)" in page


def test_it_offers_the_builds_the_live_workers_host_and_runs_the_repro_on_each(
    client, triager, issue, django_capture_on_commit_callbacks, heartbeat
):
    heartbeat()
    client.force_login(triager)
    page = client.get(issue.get_absolute_url()).content.decode()
    assert "data-builds" in page and f"nightly (torch {NEWER_VERSION})" in page

    with django_capture_on_commit_callbacks(execute=False) as sent:
        response = client.post(
            reverse("rubric_app:bisect", args=[issue.number]),
            {"code": SIN_REPRO, "device": "cpu", "builds": ["default", "nightly"]},
        )
    assert response.status_code == 302 and len(sent) == 2
    runs = BisectionRun.objects.filter(issue=issue).order_by("pk")
    assert [(r.build, r.repro_hash) for r in runs] == [
        ("default", builds.repro_hash(SIN_REPRO)),
        ("nightly", builds.repro_hash(SIN_REPRO)),
    ]


def test_it_refuses_a_build_no_live_worker_hosts(client, triager, issue, heartbeat):
    heartbeat(hosted={"default": RELEASE})
    client.force_login(triager)
    response = client.post(
        reverse("rubric_app:bisect", args=[issue.number]), {"code": SIN_REPRO, "device": "cpu", "builds": ["nightly"]}
    )
    assert response.status_code == 400 and not BisectionRun.objects.exists()
    assert "Select a valid choice. nightly is not one of the available choices." in response.content.decode()


def test_it_offers_no_build_choice_with_one_build(client, triager, issue, heartbeat):
    heartbeat(hosted={"default": RELEASE})
    client.force_login(triager)
    assert "data-builds" not in client.get(issue.get_absolute_url()).content.decode()


# --- asking the reporter to confirm -----------------------------------------------------------------------------


def test_it_asks_the_reporter_to_confirm_on_the_newer_build_and_never_closes(may_be_fixed):
    plan = plan_changes(may_be_fixed, chosen=["module: inductor"], route=Route.CONFIRM_FIXED, review=True)
    assert (plan.add, plan.remove, plan.close, plan.reply) == ([], [], False, "confirm_fixed")
    old, new = may_be_fixed.bisection_runs.order_by("pk")
    # The reply states the evidence (issue #36): which runs, which builds, the same repro, the device.
    assert (
        f"no longer fails on torch {NEWER_VERSION} (reproduced on {RELEASE} (run {old.pk}), passes on {NEWER_VERSION} "
        f"(run {new.pk}), same repro, CPU)" in plan.comment
    )
    assert "{version}" not in plan.comment and "collect_env" in plan.comment
    assert "confirm_fixed" in load_replies()


def test_it_offers_the_confirm_route_only_where_the_runs_say_may_be_fixed(client, triager, may_be_fixed, regression):
    client.force_login(triager)
    assert 'value="confirm fixed"' in client.get(may_be_fixed.get_absolute_url()).content.decode()
    assert 'value="confirm fixed"' not in client.get(regression.get_absolute_url()).content.decode()
    posted = client.post(
        reverse("rubric_app:issue_apply", args=[regression.number]),
        {"route": Route.CONFIRM_FIXED, "labels_seen": json.dumps(regression.label_names())},
    )
    assert posted.status_code == 400 and not TriageDecision.objects.exists()


def test_it_posts_the_confirm_reply_to_github_audited_and_changes_nothing_else(
    fake_github, client, triager, may_be_fixed, settings
):
    settings.GITHUB_WRITE_INTERVAL = 0.01
    fake_github.add_issue(6002, labels=["oncall: pt2"])
    client.force_login(triager)
    posted = client.post(
        reverse("rubric_app:issue_apply", args=[may_be_fixed.number]),
        {"route": Route.CONFIRM_FIXED, "labels_seen": json.dumps(may_be_fixed.label_names())},
    )
    assert posted.status_code == 302
    decision = apply_decision(TriageDecision.objects.get(issue=may_be_fixed).pk)
    assert decision.status == TriageDecision.Status.APPLIED, decision.result_message
    [comment] = fake_github.issues[6002]["comments"]
    assert f"no longer fails on torch {NEWER_VERSION}" in comment["body"]
    assert fake_github.issues[6002]["state"] == "open" and fake_github.labels_of(6002) == ["oncall: pt2"]
    writes = GitHubWrite.objects.filter(decision=decision).values_list("action", "ok")
    assert ("comment", True) in writes and not any(action in ("close", "add_labels") for action, _ in writes)


# --- re-checks on a newer build -------------------------------------------------------------------------------


@pytest.fixture
def rechecks(db, settings):
    settings.AUTO_BISECT, settings.AUTO_BISECT_PER_HOUR, settings.RECHECK_PER_HOUR = "cpu", 20, 10
    return settings


def test_it_rechecks_on_the_newest_live_build_what_an_older_one_reproduced_first(
    rechecks, django_capture_on_commit_callbacks, heartbeat
):
    heartbeat()
    passed = make_issue(6021)
    make_finished_run(passed, results=PASSED, ago=90)  # failing on the newer build would be a regression
    issue = make_issue(6020, body=f"```python\n{COS_REPRO}```")
    old = make_finished_run(issue, results=INDUCTOR_RAISED, code=COS_REPRO)
    current = make_issue(6022)
    make_finished_run(current, build="nightly", version=NEWER_VERSION, results=INDUCTOR_RAISED)  # already on the newest
    timed_out = make_issue(6023)
    make_finished_run(timed_out, results=PASSED[:1] + [{**PASSED[1], "status": "timeout"}])  # tells nothing

    with django_capture_on_commit_callbacks(execute=False) as sent:
        done = build_checks.queue_rechecks()
    assert [(d.issue_number, d.reason) for d in done] == [(6020, "queued"), (6021, "queued")] and len(sent) == 2
    run = done[0].run
    assert (run.build, run.recheck_of, run.automatic, run.queue_name) == ("nightly", old, True, "cpu_recheck")
    assert run.repro_code == COS_REPRO and run.caused_by.startswith(f"a newer build: nightly {NEWER_VERSION}")
    assert [r.reason for r in build_checks.queue_rechecks()] == [
        "a run of this repro is already waiting or running"
    ] * 2


def test_it_holds_the_recheck_budget_apart_from_the_arrivals(rechecks, heartbeat):
    rechecks.RECHECK_PER_HOUR, rechecks.AUTO_BISECT_PER_HOUR = 1, 1
    heartbeat()
    for number in (6030, 6031, 6032):
        make_finished_run(make_issue(number), results=INDUCTOR_RAISED, ago=number - 6000)
    reasons = [r.reason for r in build_checks.queue_rechecks()]
    assert reasons == ["queued", "over the hourly budget (1 re-checks an hour, RECHECK_PER_HOUR)"]
    assert BisectionRun.objects.filter(recheck_of__isnull=False).count() == 1
    # The re-check took nothing from the arrivals' budget: a repro that arrives now is still bisected.
    arrival = make_issue(6033, body=f"```python\n{COS_REPRO}```", author="reporter")
    assert auto_bisect.queue_for_issues([arrival.pk], cause="webhook")[0].reason == "queued"


def test_it_rechecks_nothing_when_automatic_runs_are_off_or_no_worker_has_a_newer_build(rechecks, heartbeat):
    make_finished_run(make_issue(6040), results=INDUCTOR_RAISED)
    heartbeat(hosted={"default": RELEASE})
    assert build_checks.queue_rechecks() == []
    WorkerHeartbeat.objects.all().delete()
    heartbeat(queues=("github",))  # not a bisection worker: its builds do not count
    assert build_checks.queue_rechecks() == []
    heartbeat(name="w2")
    rechecks.AUTO_BISECT = "off"
    assert build_checks.queue_rechecks() == []


def test_it_waits_a_day_before_retrying_a_failed_recheck(rechecks, heartbeat):
    heartbeat()
    issue = make_issue(6050)
    old = make_finished_run(issue, results=INDUCTOR_RAISED)
    BisectionRun.objects.create(
        issue=issue,
        status=BisectionRun.Status.FAILED,
        repro_code=old.repro_code,
        repro_hash=old.repro_hash,
        build="nightly",
        automatic=True,
        recheck_of=old,
        finished_at=timezone.now() - timedelta(hours=2),
    )
    assert [r.reason for r in build_checks.queue_rechecks()] == ["a re-check failed within the last day"]


# --- the real worker, on two real builds ------------------------------------------------------------------------


@pytest.mark.torch
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_runs_one_repro_on_two_builds_and_finds_the_regression(celery_worker_process, triager):
    for name in ("triage review", "module: regression", "module: inductor"):
        make_label(name)
    issue = make_issue(6100, body=f"Worked before the nightly.\n\n```python\n{SIN_REPRO}```")
    wait_until(lambda: WorkerHeartbeat.objects.hosted_builds()["cpu"].get("nightly") == NEWER_VERSION)
    first = bisect_runs.start_bisection(
        issue=issue, user=triager, code=SIN_REPRO, device="cpu", builds=["default", "nightly"]
    )
    runs = list(BisectionRun.objects.filter(issue=issue).order_by("pk"))
    assert runs[0] == first and len(runs) == 2
    for run in runs:
        wait_until_finished(run, timeout=240)
    release, nightly = (BisectionRun.objects.get(pk=r.pk) for r in runs)
    assert (release.build, release.torch_version, release.outcome) == ("default", RELEASE, "passed")
    assert (nightly.build, nightly.torch_version, nightly.outcome) == ("nightly", NEWER_VERSION, "reproduced")
    assert REGRESSION_MESSAGE in nightly.results[-1]["message"]
    assert nightly.sandbox_report["netns"] and nightly.sandbox_report["uid"] > 0  # the same isolation on build two
    issue.refresh_from_db()
    assert issue.build_finding == "regression"
    review = issue.suggestions.get(label="triage review", kind=Suggestion.Kind.ADD)
    assert (review.rule_id, review.source) == ("R11", "bisection")


@pytest.mark.torch
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_rechecks_on_the_newer_build_the_worker_reports_and_finds_it_may_be_fixed(celery_worker_process, settings):
    settings.AUTO_BISECT, settings.RECHECK_PER_HOUR = "cpu", 10
    issue = make_issue(6110, body=f"```python\n{COS_REPRO}```")
    # What an earlier run saw on the release build; the cos repro passes on both builds here.
    old = make_finished_run(issue, build="default", results=INDUCTOR_RAISED, code=COS_REPRO)
    worker = celery_worker_process.name
    wait_until(lambda: WorkerHeartbeat.objects.filter(name=worker, builds__nightly=NEWER_VERSION).exists())
    assert WorkerHeartbeat.objects.get(name=worker).builds == {"default": RELEASE, "nightly": NEWER_VERSION}

    [done] = build_checks.queue_rechecks()
    run = wait_until_finished(done.run, timeout=240)
    assert (run.status, run.build, run.torch_version, run.outcome) == ("done", "nightly", NEWER_VERSION, "passed")
    assert run.recheck_of == old
    issue.refresh_from_db()
    assert issue.build_finding == "may_be_fixed" and issue.queue_lanes() == ["pt2", "fixed", "all"]


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_fails_a_run_asking_for_a_build_no_runner_hosts(celery_worker_process, triager, issue):
    run = bisect_runs.start_bisection(issue=issue, user=triager, code=SIN_REPRO, device="cpu", builds=["weekly"])
    run = wait_until_finished(run)
    assert run.status == "failed" and run.assigned_to is None  # no runner was given a job it could only refuse
    assert run.error.startswith("No live runner of the cpu lane hosts the torch build 'weekly' (they host default, ")


@pytest.mark.torch
def test_it_restarts_a_builds_fork_server_when_the_build_was_upgraded_in_place(tmp_path, settings):
    python = make_patched_build(tmp_path / "venv")
    server = runner.server_for(python)
    try:
        server.start()
        assert server.installed == NEWER_VERSION and runner.server_for(python).alive
        # pip installs a newer nightly into that venv while the worker runs:
        dist = next((tmp_path / "venv").glob("lib/python*/site-packages/torch-*.dist-info"))
        metadata = dist / "METADATA"
        metadata.write_text(metadata.read_text().replace(NEWER_VERSION, "2.14.0.dev20261202+cpu"))
        assert runner.server_for(python) is server and not server.alive  # the next request starts it anew
    finally:
        server.close()


def test_it_rechecks_from_the_command_line_and_refuses_when_automatic_runs_are_off(rechecks, capsys, heartbeat):
    heartbeat()
    make_finished_run(make_issue(6060), results=INDUCTOR_RAISED)
    call_command("recheck_builds")
    assert capsys.readouterr().out == "#6060: queued\n1 re-checks queued, 0 not\n"
    rechecks.AUTO_BISECT = "off"
    with pytest.raises(CommandError, match="AUTO_BISECT is off"):
        call_command("recheck_builds")


def test_it_takes_an_issue_out_of_the_may_be_fixed_lane_once_the_reporter_was_asked(triager, may_be_fixed):
    assert list(Issue.objects.for_queue("fixed")) == [may_be_fixed]
    request_decision(
        issue=may_be_fixed,
        user=triager,
        plan=plan_changes(may_be_fixed, chosen=[], route=Route.CONFIRM_FIXED, review=False),
        labels_seen=may_be_fixed.label_names(),
    )
    assert TriageDecision.objects.get().reply == "confirm_fixed"
    assert list(Issue.objects.for_queue("fixed")) == []
    assert Issue.objects.get(pk=may_be_fixed.pk).build_finding == "may_be_fixed"  # still marked in the queue


def test_it_bisects_a_repro_that_arrives_on_the_newest_build_a_live_worker_hosts(rechecks, heartbeat):
    heartbeat(hosted={"release": RELEASE, "nightly": NEWER_VERSION})
    issue = make_issue(6070, body=f"```python\n{COS_REPRO}```", author="reporter")
    [outcome] = auto_bisect.queue_for_issues([issue.pk], cause="webhook")
    assert (outcome.reason, outcome.run.build) == ("queued", "nightly")


def test_it_makes_a_in_the_may_be_fixed_lane_preview_the_reply_asking_to_confirm(client, triager, may_be_fixed):
    client.force_login(triager)
    row = client.get(reverse("rubric_app:queue"), {"lane": "fixed"}).content.decode()
    form = row.split("data-confirm-fixed")[0].rsplit("<form", 1)[1]
    assert 'name="route" value="confirm fixed"' in form and f'action="/issues/{may_be_fixed.number}/preview"' in form
    seen = json.dumps(may_be_fixed.label_names())
    preview = client.post(
        reverse("rubric_app:issue_preview", args=[may_be_fixed.number]),
        {"route": Route.CONFIRM_FIXED, "labels_seen": seen, "in_queue": "1"},
        headers={"HX-Request": "true"},
    ).content.decode()
    assert 'data-reply="confirm_fixed"' in preview and "data-apply" in preview
    assert '<li class="add">' not in preview  # a reply, no label


def test_it_compares_again_when_an_edit_gives_the_reporters_version(db, fake_github):
    issue = make_issue(6080, body=f"```python\n{COS_REPRO}```")
    make_finished_run(issue, results=PASSED, code=COS_MODULE, repro_style="module")
    assert build_checks.compare_issue(issue) is None
    issue.body = f"PyTorch version: 2.6.0\n\n```python\n{COS_REPRO}```"
    issue.save(update_fields=["body"])
    assert build_checks.compare_issues([issue.pk, make_issue(6081).pk]) == 1  # #6081 has no run: not read
    issue.refresh_from_db()
    assert issue.build_finding == "may_be_fixed" and issue.build_comparison["older_version"] == "2.6.0"
    assert build_checks.compare_issues([issue.pk]) == 0  # nothing changed since


def test_it_compares_again_when_an_edit_arrives_by_webhook(db, settings, django_capture_on_commit_callbacks):
    issue = make_issue(6090, body=f"```python\n{COS_REPRO}```", author="reporter")
    make_finished_run(issue, results=PASSED, code=COS_MODULE, repro_style="module")
    build_checks.compare_issue(issue)
    edited = f"Versions:\nPyTorch version: 2.7.1+cu126\n\n```python\n{COS_REPRO}```"
    payload = {
        **opened_issue_payload(6090, repo=settings.GITHUB_REPO, title="cos", body=edited, author="reporter"),
        "action": "edited",
    }
    payload["issue"]["updated_at"] = (timezone.now() + timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%SZ")  # newer
    delivery = WebhookDelivery.objects.create(delivery_id="d-6090", event="issues", payload=payload)
    with django_capture_on_commit_callbacks(execute=False):
        process_webhook_task(delivery.pk)  # the delivery applied, then what follows it (triage/followups.py)
    issue.refresh_from_db()
    assert issue.build_finding == "may_be_fixed"
    assert issue.build_comparison["summary"].startswith("reported failing on 2.7.1 by @reporter")
    assert list(Issue.objects.for_queue("fixed")) == [issue]


# --- "may be fixed" only on evidence, with real runs (issues #35, #36) ------------------------------------------


def _report(code: str, prose: str = "Compiling it raises:\n\n```\nRuntimeError: boom\n```") -> str:
    """A report against 2.12.0 (older than both builds here) with its repro and collect_env's version line."""
    return f"### 🐛 Describe the bug\n\n{prose}\n\n```python\n{code}```\n\n### Versions\n\nPyTorch version: 2.12.0\n"


def _script(op: str, inputs: str = "torch.randn(16)") -> str:
    """A repro that passes on both builds here (their Inductor refuses only torch.sin)."""
    return f"import torch\n\ndef f(x):\n    return torch.{op}(x) * 2 + 1\n\nx = {inputs}\nprint(torch.compile(f)(x))\n"


def _wait_for_hardware(worker: str) -> dict:
    beat = WorkerHeartbeat.objects.filter(name=worker, builds__nightly=NEWER_VERSION).exclude(hardware={})
    wait_until(beat.exists)
    return beat.get().hardware


@pytest.mark.torch
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_lists_as_may_be_fixed_only_what_real_runs_show_on_the_reports_device_and_hardware(
    celery_worker_process, settings
):
    settings.AUTO_BISECT, settings.AUTO_BISECT_PER_HOUR, settings.AUTO_BISECT_PER_AUTHOR = "cpu", 50, 50
    machine = _wait_for_hardware(celery_worker_process.name)  # the heartbeat says what the worker has
    lacking = next(
        n for f, n in (("amx_tile", "AMX"), ("avx512_fp16", "AVX512-FP16"), ("sve2", "SVE2")) if f not in machine["isa"]
    )
    having = next((n for f, n in (("avx512f", "AVX512"), ("avx2", "AVX2"), ("sve", "SVE")) if f in machine["isa"]), "")
    slow = (
        "import time\nimport torch\n\nx = torch.randn(64, 8)\nt = time.time()\n"
        "torch.compile(torch.cumsum)(x, 1)\nprint(time.time() - t)\n"
    )
    cases = {
        6300: ("cos raises under torch.compile", _script("cos"), ""),
        6301: ("[Inductor][CPU] cumsum 2x slower with torch.compile than eager", slow, "a performance report"),
        6302: ("[CUDA] tanh raises under torch.compile on the GPU", _script("tanh"), "the report is about CUDA"),
        6303: (f"[Inductor][CPU] exp raises with {lacking}", _script("exp"), f"the report names {lacking}, which run"),
    }
    if having:  # a report naming an ISA the worker has: its pass stands, and the evidence says which ISA ran it
        cases[6304] = (f"[Inductor][CPU] sigmoid raises with {having}", _script("sigmoid"), "")
    issues = [
        make_issue(n, title=title, body=_report(code), author="reporter") for n, (title, code, _) in cases.items()
    ]

    outcomes = auto_bisect.queue_for_issues([i.pk for i in issues], cause="webhook")
    assert [o.reason for o in outcomes] == ["queued"] * len(cases)
    for outcome in outcomes:
        wait_until_finished(outcome.run, timeout=240)

    for number, (_title, _code, held) in cases.items():
        issue = Issue.objects.get(number=number)
        run = issue.bisection_runs.get()
        assert (run.status, run.outcome, run.build) == ("done", "passed", "nightly"), run.error
        assert run.hardware == {"device": "cpu", **machine}  # which device and ISA ran it
        if held:
            assert issue.build_finding == "" and held in issue.build_comparison["held_back"], issue.build_comparison
        else:
            where = f"CPU with {having}" if number == 6304 else "CPU"
            assert issue.build_finding == "may_be_fixed"
            assert issue.build_comparison["summary"] == (
                f"reported failing on 2.12.0 by @reporter (its repro checks its result), passes on {NEWER_VERSION} "
                f"(run {run.pk}), same repro, {where}"
            )
    fixed = sorted(Issue.objects.for_queue("fixed").values_list("number", flat=True))
    assert fixed == [6300] + ([6304] if having else [])


@pytest.mark.torch
@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_never_calls_may_be_fixed_on_a_strangers_passing_repro_beside_the_reporters_failing_one(
    celery_worker_process, client, triager, fake_github, settings
):
    from rubric_app.github.sync import sync_queue
    from rubric_app.runs import repro_sources
    from rubric_app.triage.followups import issues_changed

    settings.AUTO_BISECT = "cpu"
    _wait_for_hardware(celery_worker_process.name)
    reporter_code = SIN_REPRO.replace("torch.randn(16)", "torch.eye(4)")  # fails in inductor on the nightly
    stranger_code = _script("cos")  # passes; scores higher (it makes its inputs with torch.randn): it used to win
    fake_github.add_issue(
        6310,
        title="sin fails to compile on the nightly",
        body=_report(reporter_code),
        user="reporter",
        comments=[
            {"body": f"Works for me:\n\n```python\n{stranger_code}```", "user": "drive-by", "association": "NONE"}
        ],
    )

    sync_queue(on_changed=issues_changed, full=True)  # PyGithub over HTTP; the sync queues the automatic run

    [first] = BisectionRun.objects.filter(issue__number=6310)
    assert (first.automatic, first.repro_author, first.repro_counts) == (True, "reporter", True)
    assert "torch.sin" in first.repro_code and first.caused_by_login == "reporter"
    first = wait_until_finished(first, timeout=240)
    assert (first.build, first.outcome) == ("nightly", "reproduced") and REGRESSION_MESSAGE in str(first.results)

    # The stranger's repro is offered on the page; a triager chooses it and runs it on the same build.
    issue = Issue.objects.get(number=6310)
    client.force_login(triager)
    assert 'data-offered-repro="drive-by"' in client.get(issue.get_absolute_url()).content.decode()
    offered = repro_sources.offered_repros(repro_sources.posted_repros(issue))[0]
    page = client.get(f"{issue.get_absolute_url()}?repro={offered.source}").content.decode()
    assert "torch.cos" in page.split('id="bisect-form"')[1].split("</form>")[0]
    posted = client.post(
        reverse("rubric_app:bisect", args=[6310]), {"code": offered.repro.code, "device": "cpu", "builds": ["nightly"]}
    )
    assert posted.status_code == 302
    second = wait_until_finished(BisectionRun.objects.filter(issue=issue).latest("pk"), timeout=240)
    assert (second.outcome, second.repro_author, second.repro_counts) == ("passed", "drive-by", False)

    issue.refresh_from_db()
    # Before: only the latest repro's runs were compared, with the reporter's version, and that said "may be fixed".
    latest_only = builds.compare(
        [builds.BuildRun(second.pk, second.build, second.torch_version, second.results)],
        builds.reported_version(issue.body),
    )
    assert latest_only.kind == "may_be_fixed"
    # Now every current repro counts, and the reporter's still fails on that very build: the page says so.
    assert issue.build_finding == "" and not Issue.objects.for_queue("fixed").exists()
    assert issue.build_comparison["held_back"] == f"@reporter's repro still fails on {NEWER_VERSION} (run {first.pk})"
    assert (
        "Not in “may be fixed”: @reporter&#x27;s repro still fails"
        in client.get(issue.get_absolute_url()).content.decode()
    )
