"""Decisions: planning (G5, G6, R11), refusing (G7, R11, the queue), applying label by label, auditing."""

from __future__ import annotations

import json

import pytest

from rubric_app.github.applying import apply_decision
from rubric_app.models import GitHubWrite, Issue, TriageDecision
from rubric_app.tasks import apply_decision_task
from rubric_app.triage.decisions import Plan, plan_changes, request_decision
from tests.factories import make_issue, make_label
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db
Status = TriageDecision.Status


def _request(issue, user, add=(), remove=(), close=False, **kwargs) -> TriageDecision:
    plan = Plan(list(add), list(remove), close_reason="completed" if close else "")
    return request_decision(issue=issue, user=user, plan=plan, labels_seen=issue.label_names(), **kwargs)


def _writes(fake) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in fake.requests if r.method != "GET"]


# --- plan_changes -----------------------------------------------------------------------------


def test_it_plans_module_labels_and_triaged_for_the_pt2_route(db):
    issue = make_issue(labels=("oncall: pt2", "module: dynamo"))

    assert plan_changes(issue, chosen=["module: dynamo", "module: dynamic shapes"], route="pt2", review=False) == Plan(
        ["module: dynamic shapes", "triaged"], []
    )


def test_it_flags_triage_review_instead_of_triaged(db):
    issue = make_issue(labels=("oncall: pt2",))

    assert plan_changes(issue, chosen=["module: inductor"], route="pt2", review=True) == Plan(
        ["module: inductor", "triage review"],
        [],  # R11: no `triaged`
    )


def test_it_moves_the_issue_to_the_cpu_inductor_lane(db):
    issue = make_issue(labels=("oncall: pt2",))

    assert plan_changes(issue, chosen=["module: inductor"], route="cpu inductor", review=False) == Plan(
        ["module: inductor", "oncall: cpu inductor", "triaged"], ["oncall: pt2"]
    )


def test_it_keeps_the_lane_when_no_route_is_chosen(db):
    issue = make_issue(labels=("oncall: cpu inductor",))

    assert plan_changes(issue, chosen=["module: inductor"], route="", review=False) == Plan(
        ["module: inductor", "triaged"], []
    )


def test_it_hands_off_with_one_oncall_label_and_no_module_labels_per_g5(db):
    issue = make_issue(labels=("oncall: pt2", "module: dynamo", "triaged", "needs reproduction"))

    assert plan_changes(issue, chosen=["module: inductor"], route="oncall: export", review=False) == Plan(
        ["oncall: export"], ["module: dynamo", "oncall: pt2", "triaged"]
    )


# --- refusals ---------------------------------------------------------------------------------


def _assert_refused(decision: TriageDecision, fake, callbacks, words: str) -> None:
    assert decision.status == Status.REFUSED and decision.finished_at is not None
    assert words in decision.result_message
    assert not callbacks and not GitHubWrite.objects.exists() and fake.requests == []
    assert TriageDecision.objects.filter(pk=decision.pk).exists()  # kept for the audit log


@pytest.mark.parametrize(
    "add, words",
    [
        (["made up label"], "Not in the triage label catalog"),
        (["ciflow/trunk"], "G7 forbids"),
        (["module: deprecated thing"], "G7 forbids"),
        (["merge blocking"], "G7 forbids"),
        (["high priority"], "triage meeting (R11)"),
    ],
)
def test_it_refuses_labels_outside_the_catalog_forbidden_or_reserved(
    synced, triager, fake_github, add, words, django_capture_on_commit_callbacks
):
    make_label("ciflow/trunk", allowed=False)
    with django_capture_on_commit_callbacks() as callbacks:
        decision = _request(synced, triager, add=add)

    _assert_refused(decision, fake_github, callbacks, words)


def test_it_lets_the_meeting_chair_decide_high_priority(synced, chair, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        decision = _request(synced, chair, add=["high priority"], meeting_decision="high priority")

    assert decision.status == Status.PENDING and len(callbacks) == 1


@pytest.mark.parametrize(
    "change, words",
    [
        ({"repo": "pytorch/vision"}, "not to the configured repo"),
        ({"in_queue": False}, "no longer in the oncall: pt2 queue"),
        ({"state": "closed"}, "no longer in the oncall: pt2 queue"),
        ({"is_pull_request": True}, "pull request"),
    ],
)
def test_it_refuses_issues_it_may_not_change(
    synced, triager, fake_github, change, words, django_capture_on_commit_callbacks
):
    Issue.objects.filter(pk=synced.pk).update(**change)
    synced.refresh_from_db()
    with django_capture_on_commit_callbacks() as callbacks:
        decision = _request(synced, triager, add=["module: dynamo"])

    _assert_refused(decision, fake_github, callbacks, words)


def test_it_refuses_a_user_without_the_apply_permission(
    synced, viewer, fake_github, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        decision = _request(synced, viewer, add=["module: dynamo"])

    _assert_refused(decision, fake_github, callbacks, "may not change labels")


def test_it_refuses_an_empty_change(synced, triager, fake_github, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        decision = _request(synced, triager)

    _assert_refused(decision, fake_github, callbacks, "Nothing to change")


def test_it_records_a_valid_decision_as_pending_and_enqueues_it(synced, triager, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        decision = _request(synced, triager, add=["module: dynamo", "triaged"])

    assert (decision.status, decision.labels_added, decision.labels_seen) == (
        Status.PENDING,
        ["module: dynamo", "triaged"],
        ["oncall: pt2"],
    )
    assert len(callbacks) == 1  # apply_decision_task.delay_on_commit


# --- apply_decision ---------------------------------------------------------------------------


def test_it_applies_labels_one_by_one_and_audits_each_call(synced, triager, fake_github):
    make_label("module: inductor")
    fake_github.set_labels(1001, ["oncall: pt2", "needs reproduction"])
    synced.labels.add(make_label("needs reproduction"))
    decision = _request(synced, triager, add=["module: dynamo", "triaged"], remove=["needs reproduction"])

    apply_decision_task(decision.pk)  # applied, then what follows (the issue's suggestions refreshed)

    decision.refresh_from_db()
    assert decision.status == Status.APPLIED, decision.result_message
    assert (decision.user, decision.labels_added, decision.labels_removed) == (
        triager,
        ["module: dynamo", "triaged"],
        ["needs reproduction"],
    )  # the audit entry: who asked for what
    assert fake_github.labels_of(1001) == ["module: dynamo", "oncall: pt2", "triaged"]
    assert _writes(fake_github) == [
        ("POST", "/repos/pytorch/pytorch/issues/1001/labels"),
        ("POST", "/repos/pytorch/pytorch/issues/1001/labels"),
        ("DELETE", "/repos/pytorch/pytorch/issues/1001/labels/needs reproduction"),
    ]  # never a PUT, which would replace the whole set
    audit = list(decision.writes.values_list("action", "target", "status_code", "ok"))
    assert audit == [
        ("read_labels", "#1001", 200, True),
        ("read_label", "module: dynamo", 200, True),  # GitHub has each label to add: none is invented
        ("read_label", "triaged", 200, True),
        ("add_label", "module: dynamo", 200, True),
        ("add_label", "triaged", 200, True),
        ("remove_label", "needs reproduction", 200, True),
    ]
    # GitHub's answer is kept: the labels it says the issue has after each call.
    assert (
        decision.writes.get(action="add_label", target="triaged").response
        == "labels now: module: dynamo, needs reproduction, oncall: pt2, triaged"
    )
    synced.refresh_from_db()
    assert synced.label_names() == ["module: dynamo", "oncall: pt2", "triaged"]
    assert synced.suggestions_updated_at is not None


def test_it_keeps_labels_someone_else_adds_while_it_writes(synced, triager, fake_github):
    decision = _request(synced, triager, add=["module: dynamo"])
    # After the conflict check, just before our write lands, someone adds a label.
    fake_github.inject(
        "race", method="POST", run=lambda: fake_github.set_labels(1001, ["oncall: pt2", "module: inductor"])
    )

    decision = apply_decision(decision.pk)

    (post,) = [r for r in fake_github.requests if r.method == "POST"]
    assert json.loads(post.sent) == {"labels": ["module: dynamo"]}  # one label added, not a new set
    assert fake_github.labels_of(1001) == ["module: dynamo", "module: inductor", "oncall: pt2"]
    assert decision.status == Status.APPLIED
    assert synced.label_names() == ["module: dynamo", "module: inductor", "oncall: pt2"]  # GitHub's answer


def test_it_stops_on_a_conflict_and_reports_the_difference(synced, triager, fake_github):
    decision = _request(synced, triager, add=["module: dynamo", "triaged"])
    fake_github.set_labels(1001, ["oncall: pt2", "module: inductor"])  # someone relabelled meanwhile

    decision = apply_decision(decision.pk)

    assert decision.status == Status.CONFLICT
    assert "+module: inductor" in decision.result_message and "Nothing was written" in decision.result_message
    assert _writes(fake_github) == []
    assert synced.label_names() == ["oncall: pt2"]


def test_it_hands_off_and_the_issue_leaves_the_queue(synced, triager, fake_github):
    plan = plan_changes(synced, chosen=[], route="oncall: export", review=False)
    decision = _request(synced, triager, add=plan.add, remove=plan.remove, redirect="oncall: export")

    decision = apply_decision(decision.pk)

    assert decision.status == Status.APPLIED
    assert fake_github.labels_of(1001) == ["oncall: export"]
    synced.refresh_from_db()
    assert synced.in_queue is False and synced.label_names() == ["oncall: export"]


def test_it_flags_review_and_records_when(synced, triager, fake_github):
    decision = _request(synced, triager, add=["triage review"])

    apply_decision(decision.pk)

    synced.refresh_from_db()
    assert synced.review_flagged_at is not None and synced.has_label("triage review")


def test_it_closes_the_issue_for_a_meeting_decision(synced, chair, fake_github):
    decision = _request(synced, chair, add=["triaged"], meeting_decision="close", close=True)

    decision = apply_decision(decision.pk)

    assert decision.status == Status.APPLIED
    assert fake_github.issues[1001]["state"] == "closed"
    assert ("PATCH", "/repos/pytorch/pytorch/issues/1001") in _writes(fake_github)
    synced.refresh_from_db()
    assert (synced.state, synced.in_queue) == ("closed", False)


@pytest.mark.parametrize(
    "status, words",
    [
        (403, "403"),
        (404, "404"),
        (410, "gone"),
        (422, "invalid (422)"),
        (502, "server error (502)"),
        (503, "server error (503)"),
    ],
)
def test_it_fails_clearly_and_leaves_local_labels_alone(synced, triager, fake_github, status, words):
    decision = _request(synced, triager, add=["module: dynamo", "triaged"])
    fake_github.inject("error", method="POST", path=r"/labels$", status=status, message="nope")

    decision = apply_decision(decision.pk)

    assert decision.status == Status.FAILED
    assert words in decision.result_message and "Local labels were left as they were" in decision.result_message
    failed = decision.writes.get(ok=False)
    assert (failed.action, failed.target, failed.status_code) == ("add_label", "module: dynamo", status)
    assert synced.label_names() == ["oncall: pt2"]
    assert len([r for r in fake_github.requests if r.method == "POST"]) == 1  # stopped at the first failure


def test_it_says_what_already_landed_when_a_later_write_fails(synced, triager, fake_github):
    decision = _request(synced, triager, add=["module: dynamo", "triaged"])
    fake_github.inject("error", method="POST", path=r"/labels$", status=422, message="Validation Failed", after=1)

    decision = apply_decision(decision.pk)

    assert decision.status == Status.FAILED
    assert "add label 'triaged' failed" in decision.result_message
    assert "Already applied before it: add label module: dynamo" in decision.result_message
    assert fake_github.labels_of(1001) == ["module: dynamo", "oncall: pt2"]
    assert synced.label_names() == ["oncall: pt2"]  # the next sync brings what landed


def test_it_fails_when_github_cannot_be_read_before_writing(synced, triager, fake_github):
    decision = _request(synced, triager, add=["module: dynamo"])
    fake_github.inject("error", method="GET", path=r"/issues/1001$", status=404)

    decision = apply_decision(decision.pk)

    assert decision.status == Status.FAILED and "Could not re-read #1001" in decision.result_message
    assert _writes(fake_github) == []


def test_it_applies_a_decision_only_once(synced, triager, fake_github):
    decision = _request(synced, triager, add=["module: dynamo"])
    apply_decision(decision.pk)
    fake_github.requests.clear()

    again = apply_decision(decision.pk)  # a redelivered task

    assert again.status == Status.APPLIED and fake_github.requests == []


# --- through the worker -----------------------------------------------------------------------


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_paces_writes_a_second_apart_through_the_github_queue(fake_github, triager, celery_worker_process):
    for name in ("module: dynamo", "module: dynamic shapes", "triaged", "needs reproduction"):
        make_label(name, github=fake_github)
    first = make_issue(2001, labels=("oncall: pt2",))
    second = make_issue(2002, labels=("oncall: pt2",))
    fake_github.add_issue(2001, labels=["oncall: pt2"])
    fake_github.add_issue(2002, labels=["oncall: pt2"])

    decisions = [
        _request(first, triager, add=["module: dynamo", "module: dynamic shapes", "triaged"]),
        _request(second, triager, add=["needs reproduction"]),
    ]
    assert [d.status for d in decisions] == [Status.PENDING, Status.PENDING]  # what the UI shows first

    def finished():
        rows = TriageDecision.objects.filter(pk__in=[d.pk for d in decisions])
        return all(d.is_finished for d in rows) and list(rows)

    rows = wait_until(finished, timeout=90)
    assert {d.status for d in rows} == {Status.APPLIED}
    writes = [r for r in fake_github.requests if r.method != "GET"]
    assert len(writes) == 4
    gaps = [b.at - a.at for a, b in zip(writes, writes[1:])]
    assert min(gaps) >= 0.99, gaps  # GitHub asks for >= 1 s between mutations, across decisions too
    assert fake_github.labels_of(2001) == ["module: dynamic shapes", "module: dynamo", "oncall: pt2", "triaged"]
    assert first.label_names() == ["module: dynamic shapes", "module: dynamo", "oncall: pt2", "triaged"]
