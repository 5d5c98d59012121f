"""The routes that stop labelling (G1 question, G1 more info, G2 transfer), G4 on every decision, and a
decision resumed at once when its own message comes back after its pool process died.

Writes go over HTTP to the fake GitHub server (tests/fakegithub.py), through PyGithub.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from rubric_app import dispatch
from rubric_app.github.applying import apply_decision
from rubric_app.models import GitHubWrite, Issue, Label, TriageDecision
from rubric_app.rubric.reading.catalog import load_replies
from rubric_app.triage import accepting
from rubric_app.triage.decisions import G4_MESSAGE, Plan, plan_changes, request_decision
from rubric_app.web.decision_forms import TriageForm
from tests.factories import make_issue, make_label, make_suggestion
from tests.helpers import wait_until, wait_until_finished
from tests.runs.test_stuck_work import _children, _private_queue, broker  # noqa: F401  (the broker fixture)

pytestmark = pytest.mark.django_db
Status = TriageDecision.Status
FORUM = load_replies()["redirect_to_forum"]["comment"]
MORE_INFO = load_replies()["request_more_info"]["comment"]


def _request(issue, user, plan: Plan) -> TriageDecision:
    return request_decision(issue=issue, user=user, plan=plan, labels_seen=issue.label_names())


def _audit(decision) -> list[tuple[str, bool]]:
    return list(GitHubWrite.objects.filter(decision=decision).order_by("at", "pk").values_list("action", "ok"))


# --- planning -------------------------------------------------------------------------------------


def test_it_plans_the_routes_that_stop_labelling_with_no_label_change(db):
    issue = make_issue(labels=("oncall: pt2",))
    ticked = ["module: dynamo"]  # ticked, but these routes change no label

    assert plan_changes(issue, chosen=ticked, route="question", review=False) == Plan(
        reply="redirect_to_forum", close_reason="not_planned"
    )
    assert plan_changes(issue, chosen=ticked, route="more info", review=True) == Plan(reply="request_more_info")
    assert plan_changes(issue, chosen=ticked, route="transfer", review=False, transfer_to="pytorch/vision") == Plan(
        transfer_to="pytorch/vision"
    )
    assert plan_changes(issue, chosen=ticked, route="question", review=False).comment == FORUM


def test_it_posts_the_standard_reply_with_needs_reproduction(db):
    issue = make_issue(labels=("oncall: pt2",))

    plan = plan_changes(issue, chosen=["needs reproduction"], route="pt2", review=True)

    assert plan.add == ["needs reproduction", "triage review"] and plan.reply == "needs_reproduction"


# --- G4 on every decision ---------------------------------------------------------------------


def test_it_refuses_to_mark_an_issue_triaged_with_no_module_label(synced, triager, fake_github):
    decision = _request(synced, triager, plan_changes(synced, chosen=[], route="pt2", review=False))

    assert decision.status == Status.REFUSED and decision.result_message == G4_MESSAGE
    assert fake_github.requests == []


@pytest.mark.parametrize(
    "labels, plan",
    [
        (("oncall: pt2",), Plan(["triage review"])),  # flagged for the meeting: not triaged (R11)
        (("oncall: pt2",), Plan(["module: dynamo", "triaged"])),
        (("oncall: pt2", "triaged"), Plan(["needs reproduction"])),  # triaged by hand before: other changes still go
    ],
)
def test_it_lets_changes_through_that_leave_no_new_g4_violation(fake_github, triager, labels, plan):
    for name in ("module: dynamo", "triaged", "triage review", "needs reproduction"):
        make_label(name)
    issue = make_issue(1002, labels=labels)

    assert _request(issue, triager, plan).status == Status.PENDING


def test_it_refuses_a_transfer_to_a_repository_it_does_not_know(synced, triager, fake_github):
    decision = _request(synced, triager, Plan(transfer_to="someone/else"))

    assert decision.status == Status.REFUSED and "G2: 'someone/else' is not a repository" in decision.result_message


# --- applying -------------------------------------------------------------------------------------


def test_it_closes_a_usage_question_with_the_forum_reply(synced, triager, fake_github):
    decision = _request(synced, triager, plan_changes(synced, chosen=[], route="question", review=False))

    decision = apply_decision(decision.pk)

    assert decision.status == Status.APPLIED, decision.result_message
    on_github = fake_github.issues[1001]
    assert on_github["state"] == "closed" and on_github["state_reason"] == "not_planned"
    assert [c["body"] for c in on_github["comments"]] == [FORUM]
    assert on_github["labels"] == ["oncall: pt2"]  # G1: no module labels, no triaged
    posted = [r.method + " " + r.path.rsplit("/", 1)[-1] for r in fake_github.requests if r.method != "GET"]
    assert posted == ["POST comments", "PATCH 1001"]  # the reply lands before the close
    assert _audit(decision) == [("read_labels", True), ("comment", True), ("close", True)]
    assert "comment (standard reply), close (not planned)" in decision.result_message
    synced.refresh_from_db()
    assert synced.state == Issue.State.CLOSED and not synced.in_queue
    assert synced.label_names() == ["oncall: pt2"]  # a comment's answer carries no labels: none are dropped


def test_it_asks_for_more_info_and_leaves_the_issue_open_and_untriaged(synced, triager, fake_github):
    decision = apply_decision(_request(synced, triager, Plan(reply="request_more_info")).pk)

    assert decision.status == Status.APPLIED, decision.result_message
    assert [c["body"] for c in fake_github.issues[1001]["comments"]] == [MORE_INFO]
    assert fake_github.issues[1001]["state"] == "open" and fake_github.labels_of(1001) == ["oncall: pt2"]
    synced.refresh_from_db()
    assert synced.in_queue and synced.label_names() == ["oncall: pt2"]


def test_it_transfers_an_issue_to_another_repository(synced, triager, fake_github):
    decision = apply_decision(_request(synced, triager, Plan(transfer_to="pytorch/vision")).pk)

    assert decision.status == Status.APPLIED, decision.result_message
    assert fake_github.transferred == {1001: ("pytorch/vision", "https://github.com/pytorch/vision/issues/1001")}
    assert "It is now https://github.com/pytorch/vision/issues/1001 and has left this queue." in decision.result_message
    assert _audit(decision) == [("read_labels", True), ("read_repository", True), ("transfer", True)]
    graphql = fake_github.requests_to(r"^/graphql$", "POST")
    assert len(graphql) == 1 and json.loads(graphql[0].sent)["variables"] == {
        "issue": "I_1001",
        "repo": "R_pytorch/vision",
    }
    synced.refresh_from_db()
    assert not synced.in_queue


def test_it_fails_a_transfer_github_refuses_and_says_why(synced, triager, fake_github):
    fake_github.other_repos.discard("pytorch/vision")  # e.g. the token cannot see it

    decision = apply_decision(_request(synced, triager, Plan(transfer_to="pytorch/vision")).pk)

    assert decision.status == Status.FAILED
    assert (
        "read repository 'pytorch/vision' failed: GitHub could not find the issue, label or repository (404)."
        in decision.result_message
    )
    assert fake_github.requests_to(r"^/graphql$") == [] and 1001 in fake_github.issues
    synced.refresh_from_db()
    assert synced.in_queue


def test_it_fails_when_graphql_answers_200_with_errors(synced, triager, fake_github):
    decision = _request(synced, triager, Plan(transfer_to="pytorch/vision"))
    # GitHub refuses inside a 200 (here: the issue's node is unknown to it).
    fake_github.inject(
        "race",
        method="POST",
        path=r"^/graphql$",
        run=lambda: fake_github.issues.__setitem__(4242, fake_github.issues.pop(1001)),
    )

    decision = apply_decision(decision.pk)

    assert decision.status == Status.FAILED
    assert "GitHub refused the transfer: Could not resolve to a node with the global id" in decision.result_message
    assert _audit(decision)[-1] == ("transfer", False)


def test_it_does_not_post_a_reply_twice_when_resuming(synced, triager, fake_github):
    # The dead worker posted the reply, then died before the close.
    decision = _request(synced, triager, plan_changes(synced, chosen=[], route="question", review=False))
    fake_github.add_comment(1001, FORUM, user="pt2-triage-dashboard")
    stale = timezone.now() - timedelta(hours=1)
    TriageDecision.objects.filter(pk=decision.pk).update(status=Status.APPLYING, heartbeat_at=stale)

    decision = apply_decision(decision.pk)

    assert decision.status == Status.APPLIED, decision.result_message
    assert [c["body"] for c in fake_github.issues[1001]["comments"]] == [FORUM]
    assert fake_github.issues[1001]["state"] == "closed"
    assert "GitHub already had: comment (standard reply)" in decision.result_message
    assert [a for a, _ in _audit(decision)] == ["read_labels", "read_comments", "close"]


def test_it_resumes_at_once_when_its_own_message_comes_back(synced, triager, fake_github):
    decision = _request(synced, triager, Plan(["module: dynamo", "triaged"]))
    # Claimed by message "m1", which wrote one label; then its pool process died.
    TriageDecision.objects.filter(pk=decision.pk).update(
        status=Status.APPLYING, heartbeat_at=timezone.now(), task_id="m1"
    )
    fake_github.set_labels(1001, ["module: dynamo", "oncall: pt2"])

    assert apply_decision(decision.pk, task_id="m2").status == Status.APPLYING  # another message: a live worker's
    decision = apply_decision(decision.pk, task_id="m1")  # the same message, delivered again

    assert decision.status == Status.APPLIED, decision.result_message
    assert fake_github.labels_of(1001) == ["module: dynamo", "oncall: pt2", "triaged"]
    assert (
        "GitHub already had: add label module: dynamo. Finished on GitHub: add label triaged."
        in decision.result_message
    )


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_finishes_a_decision_at_once_when_its_pool_process_dies(broker, fake_github, triager):  # noqa: F811
    for name in ("module: dynamo", "module: inductor", "triaged"):
        make_label(name, github=fake_github)
    fake_github.add_issue(5401, labels=["oncall: pt2"])
    issue = make_issue(5401, labels=("oncall: pt2",))
    # Pending, as request_decision leaves it; its message is sent below, on this test's broker.
    decision = TriageDecision.objects.create(
        issue=issue,
        user=triager,
        labels_seen=["oncall: pt2"],
        labels_added=["module: dynamo", "module: inductor", "triaged"],
    )
    gate = threading.Event()
    fake_github.inject("race", method="POST", path=r"/labels$", after=1, run=lambda: gate.wait(120))
    queue = _private_queue()
    worker, _ = broker.start_worker([queue], pool="prefork")

    broker.send(dispatch.APPLY_DECISION, (decision.pk,), queue=queue)
    wait_until(lambda: len(fake_github.requests_to(r"/labels$", "POST")) == 2, timeout=90)
    (child,) = _children(worker.pid)  # concurrency 1: the pool process writing the second label
    os.kill(child, signal.SIGKILL)  # reject_on_worker_lost: the message goes back to the queue
    gate.set()

    # No sweep, no stale heartbeat: the message that comes back resumes it.
    wait_until_finished(decision)
    assert decision.status == Status.APPLIED, decision.result_message
    assert fake_github.labels_of(5401) == ["module: dynamo", "module: inductor", "oncall: pt2", "triaged"]
    assert "GitHub already had: add label module: dynamo, add label module: inductor" in decision.result_message


# --- the issue page -------------------------------------------------------------------------------


def _form(issue, **data) -> TriageForm:
    return TriageForm(
        {"labels_seen": json.dumps(issue.label_names()), **data},
        issue=issue,
        suggestions=list(issue.suggestions.all()),
        allowed=Label.objects.triage_catalog(),
    )


def test_it_shows_the_g4_reason_in_the_preview_instead_of_an_apply_button(synced, client, triager):
    make_suggestion(synced, "module: dynamo", "R1.2", confidence=0.55, preselected=False)
    client.force_login(triager)

    response = client.post(
        reverse("rubric_app:issue_preview", args=[1001]), {"accept": "1"}, headers={"HX-Request": "true"}
    )

    page = response.content.decode()
    assert "G4: this would mark the issue triaged with no module: label" in page
    assert "data-apply" not in page and "__all__" not in page


def test_it_previews_the_reply_and_the_close_of_a_usage_question(synced, client, triager):
    client.force_login(triager)

    response = client.post(
        reverse("rubric_app:issue_preview", args=[1001]),
        {"route": "question", "labels_seen": json.dumps(["oncall: pt2"])},
        headers={"HX-Request": "true"},
    )

    page = response.content.decode()
    assert 'data-reply="redirect_to_forum"' in page and 'data-close="not_planned"' in page
    assert "PyTorch Discussion Forum" in page and "data-stops-labelling" in page and "data-apply" in page
    assert "+ triaged" not in page


def test_it_preselects_the_transfer_the_thread_concluded(synced):
    Issue.objects.filter(pk=synced.pk).update(
        suggested_route="transfer",
        checklist=[
            {
                "rule_id": "G2",
                "text": "Transfer to torchvision, then stop",
                "state": "satisfied",
                "evidence": "torchvision",
            }
        ],
    )
    synced.refresh_from_db()

    form = _form(synced)

    # G2 concludes: `a` previews the transfer (issue 43), never G4's refusal.
    assert form.suggested["route"] == "transfer" and form.suggested["transfer_to"] == "pytorch/vision"
    assert accepting.route_evidence(synced, "transfer") == "G2: “torchvision”"
    accepted = _form(synced, route="pt2")
    assert not accepted.is_valid() and accepted.non_field_errors()[0].startswith(
        "G2: the thread says it belongs in pytorch/vision: pick the transfer route."
    )
    assert not _form(synced, route="transfer").is_valid()  # G2 needs its repository
    chosen = _form(synced, route="transfer", transfer_to="pytorch/vision")
    assert chosen.is_valid() and chosen.plan() == Plan(transfer_to="pytorch/vision")


def test_it_keeps_the_lane_where_the_thread_names_a_repository_the_dashboard_does_not_transfer_to(synced):
    Issue.objects.filter(pk=synced.pk).update(
        suggested_route="transfer",
        checklist=[{"rule_id": "G2", "text": "Transfer, then stop", "state": "satisfied", "evidence": "jax-ml/jax"}],
    )
    synced.refresh_from_db()

    assert _form(synced).suggested["route"] == "pt2"  # a transfer by hand: `a` does not pretend it can


def test_it_refuses_a_review_flag_on_a_hand_off(synced):
    form = _form(synced, route="handoff", handoff_to="oncall: export", review="on")

    assert not form.is_valid()
    assert "the meeting would never see a triage review flag" in " ".join(form.errors["review"])
    assert _form(synced, route="handoff", handoff_to="oncall: export").is_valid()


def test_it_points_a_usage_question_to_its_route_when_g4_refuses(synced):
    Issue.objects.filter(pk=synced.pk).update(
        checklist=[
            {
                "rule_id": "G1",
                "text": "Reads like a question, not a bug: close with the forum template?",
                "state": "needs_human",
            }
        ]
    )
    synced.refresh_from_db()

    form = _form(synced, route="pt2")

    assert not form.is_valid()
    assert form.non_field_errors()[0].startswith("G1: the rubric reads this as a usage question")


def test_it_keeps_an_existing_review_flag_ticked_and_removes_it_only_when_unticked(db):
    issue = make_issue(labels=("oncall: pt2", "triage review"))

    assert _form(issue).suggested["review"] is True  # flagged on GitHub: the box starts ticked
    # Unticked: the flag goes and the issue is triaged (never both, R11), shown in the preview.
    assert plan_changes(issue, chosen=["module: inductor"], route="pt2", review=False) == Plan(
        ["module: inductor", "triaged"], ["triage review"]
    )
    assert plan_changes(issue, chosen=[], route="pt2", review=True).changes_nothing


def test_it_offers_no_apply_when_the_preview_changes_nothing(synced, client, triager):
    synced.labels.add(make_label("triage review"))
    client.force_login(triager)

    response = client.post(
        reverse("rubric_app:issue_preview", args=[1001]),
        {"route": "pt2", "review": "on", "labels_seen": json.dumps(["oncall: pt2", "triage review"])},
        headers={"HX-Request": "true"},
    )

    page = response.content.decode()
    assert "data-nothing-to-apply" in page and "data-apply" not in page


@pytest.mark.parametrize(
    "labels, ticked, expected",
    [
        (("oncall: pt2",), False, "pt2"),  # a possible redirect is shown, not accepted by `a`
        (("oncall: pt2",), True, "handoff"),
        (("oncall: cpu inductor",), False, "cpu inductor"),  # the issue's own lane: `a` never moves it back to pt2
    ],
)
def test_it_accepts_a_redirect_only_when_it_is_preselected(db, labels, ticked, expected):
    issue = make_issue(labels=labels, suggested_route="handoff" if "oncall: pt2" in labels else "cpu inductor")
    make_label("oncall: export")  # in the triage catalog in use: a queue it may be handed off to
    make_suggestion(issue, "oncall: export", "R6.3", confidence=0.7, preselected=ticked)

    assert _form(issue).suggested["route"] == expected


def test_it_refuses_a_hand_off_that_flags_review_on_every_path(synced, triager, fake_github):
    make_label("oncall: export")
    # What a group decision (or any caller) would send: the same refusal as the issue page's box.
    decision = _request(synced, triager, Plan(["oncall: export", "triage review"], ["oncall: pt2"]))

    assert (
        decision.status == Status.REFUSED
        and "the meeting would never see a triage review flag" in decision.result_message
    )
    assert fake_github.requests == []


def test_it_says_so_when_it_cannot_check_for_its_reply_and_does_not_post_it(synced, triager, fake_github):
    decision = _request(synced, triager, plan_changes(synced, chosen=[], route="question", review=False))
    TriageDecision.objects.filter(pk=decision.pk).update(
        status=Status.APPLYING, heartbeat_at=timezone.now() - timedelta(hours=1)
    )
    fake_github.inject("error", method="GET", path=r"/comments$", status=404, times=5)

    decision = apply_decision(decision.pk)

    assert decision.status == Status.APPLIED, decision.result_message
    assert fake_github.issues[1001]["comments"] == [] and fake_github.issues[1001]["state"] == "closed"
    assert "not posted again, GitHub's comments could not be read to check" in decision.result_message
    assert ("read_comments", False) in _audit(decision)
