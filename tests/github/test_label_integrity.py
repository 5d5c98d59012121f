"""Never invent a label (issue 45): GitHub creates a label an issue is given that its catalog lacks, so every write that
adds one asks GitHub first; label events whose order cannot be told resolve towards "gone" until GitHub says
otherwise; a deleted label leaves every issue of the mirror, a renamed one follows its new name. All against the fake
GitHub over HTTP, whose catalog must not grow."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from rubric_app.github import client as github
from rubric_app.github.applying import apply_decision
from rubric_app.github.events import process_webhook
from rubric_app.github.sync import sync_queue
from rubric_app.models import Issue, Label, TriageDecision, WebhookDelivery
from rubric_app.triage.decisions import Plan, request_decision
from tests.factories import make_issue, make_label
from tests.helpers import deliver_signed

pytestmark = pytest.mark.django_db
SECRET = "label-secret"
Status = TriageDecision.Status
NEW = "module: pt2-dispatcher"  # the label the tests delete, re-create and rename on GitHub


@pytest.fixture(autouse=True)
def secrets(settings):
    settings.GITHUB_WEBHOOK_SECRETS = [SECRET]
    settings.GITHUB_WRITE_INTERVAL = 0.01


def _deliver(client, payload: dict, delivery: str, event: str = "label") -> WebhookDelivery:
    return deliver_signed(client, event, payload, delivery, SECRET)


def _label_event(action: str, name: str, pushed_at: str | None = "2026-11-01T10:00:00Z", **extra) -> dict:
    repository = {"full_name": "pytorch/pytorch", **({"pushed_at": pushed_at} if pushed_at else {})}
    return {"action": action, "label": {"name": name, "color": "5319e7"}, "repository": repository, **extra}


@pytest.fixture
def mirrored(fake_github, triager):
    """#1001 on the fake GitHub and in the mirror, the catalogs alike (NEW among them), after a full sync."""
    for name in ("oncall: pt2", "triaged", NEW):
        fake_github.add_label(name)
    fake_github.add_issue(1001, labels=["oncall: pt2"])
    sync_queue(full=True)
    Label.objects.filter(name__in=[NEW, "triaged"]).update(allowed_for_triage=True)
    return Issue.objects.get(number=1001)


def _decide(issue: Issue, user, add) -> TriageDecision:
    issue.refresh_from_db()
    return request_decision(issue=issue, user=user, plan=Plan(list(add), []), labels_seen=issue.label_names())


def test_the_fake_github_creates_a_label_it_is_asked_to_add_as_github_does(fake_github):
    """What every other test here guards against: the fake, like GitHub, grows its catalog on an unknown label."""
    fake_github.add_issue(1, labels=["oncall: pt2"])
    gh = github.user_client(fake_github.token)
    assert gh.label("module: invented") is None
    assert gh.add_label(1, "module: invented").ok
    assert "module: invented" in fake_github.labels and gh.label("MODULE: Invented").name == "module: invented"


@pytest.mark.parametrize("github_has_it", [False, True])
@pytest.mark.parametrize("pushed_at", ["2026-11-01T10:00:00Z", None])  # equal stamps, and none at all
def test_it_resolves_a_deletion_and_a_creation_it_cannot_order_towards_gone_until_github_says(
    client, mirrored, fake_github, triager, github_has_it, pushed_at
):
    """GitHub deleted NEW and created it again (or created it, then deleted it): two events with the same stamp (no
    push between them) or none, delivered in the order that ends with the label there. The escape: it stayed in the
    catalog, a triager picked it and GitHub gained it."""
    size = len(fake_github.labels)
    if not github_has_it:
        fake_github.delete_label(NEW)
    first, last = ("created", "deleted") if github_has_it else ("deleted", "created")
    _deliver(client, _label_event(first, NEW, pushed_at), "first")
    _deliver(client, _label_event(last, NEW, pushed_at), "last")

    label = Label.objects.get(name=NEW)
    assert (label.in_catalog, label.unconfirmed) == (False, True)
    refused = _decide(mirrored, triager, [NEW])
    assert refused.status == Status.REFUSED and "Not in the triage label catalog" in refused.result_message

    sync_queue()  # the next sync asks GitHub about the label, once
    label.refresh_from_db()
    assert (label.in_catalog, label.unconfirmed) == (github_has_it, False)
    assert len(fake_github.requests_to(rf"/labels/{NEW}$", "GET")) == 1
    decision = _decide(mirrored, triager, [NEW])
    if github_has_it:
        assert apply_decision(decision.pk).status == Status.APPLIED and NEW in fake_github.labels_of(1001)
    else:
        assert decision.status == Status.REFUSED
    assert len(fake_github.labels) == size - (not github_has_it)  # the catalog never grew


def test_it_refuses_a_held_meeting_decision_whose_label_was_deleted_on_github_meanwhile(fake_github, chair, client):
    """The escape: a meeting decision held for undo was written after its label was deleted on GitHub meanwhile (the
    worker never re-checked the catalog), and GitHub created the label again."""
    flagged = ("oncall: pt2", "triage review", "module: inductor")
    for name in (*flagged, "triaged", "low priority"):
        make_label(name, github=fake_github)
    fake_github.add_issue(1, labels=list(flagged))
    make_issue(1, labels=flagged)
    client.force_login(chair)
    client.post(reverse("rubric_app:meeting_start"))
    client.post(
        reverse("rubric_app:meeting_decide", args=[1]),
        {"decision": "low priority", "labels_seen": json.dumps(sorted(flagged))},
    )
    decision = TriageDecision.objects.get()
    assert decision.status == Status.PENDING and decision.not_before is not None  # held for its undo window
    fake_github.delete_label("low priority")  # meanwhile, on GitHub; no webhook has told the mirror yet
    size = len(fake_github.labels)
    TriageDecision.objects.filter(pk=decision.pk).update(not_before=timezone.now() - timedelta(seconds=1))

    decision = apply_decision(decision.pk)

    assert decision.status == Status.FAILED
    assert decision.result_message.startswith("low priority is no longer a label of pytorch/pytorch on GitHub")
    assert "Nothing was written" in decision.result_message
    assert len(fake_github.labels) == size and "low priority" not in fake_github.labels
    assert not [r for r in fake_github.requests if r.method != "GET"]  # no write at all
    audit = list(decision.writes.values_list("action", "target", "status_code", "ok"))
    assert ("read_label", "low priority", 404, False) in audit
    assert not Label.objects.get(name="low priority").in_catalog  # the mirror learned it too


def test_it_takes_a_deleted_label_off_every_issue_and_keeps_it_off(client, mirrored, fake_github):
    fake_github.add_issue(1002, labels=["oncall: pt2", NEW])
    fake_github.set_labels(1001, ["oncall: pt2", NEW])
    late = {"action": "labeled", "issue": fake_github.issue_json(fake_github.issues[1001]), "label": {"name": NEW}}
    sync_queue()
    assert Issue.objects.filter(labels__name=NEW).count() == 2

    fake_github.delete_label(NEW)
    _deliver(client, _label_event("deleted", NEW, "2026-11-01T11:00:00Z"), "gone")

    assert not Issue.objects.filter(labels__name=NEW).exists()
    assert Issue.objects.get(number=1001).label_names() == ["oncall: pt2"]
    # The issue's `labeled` event, sent before the deletion and delivered after it, does not put it back.
    fake_github.update_issue(1001, body="edited since")  # its updated_at is newer than the mirror's, as it would be
    late["issue"] = {**late["issue"], "updated_at": fake_github.issue_json(fake_github.issues[1001])["updated_at"]}
    _deliver(client, {**late, "repository": {"full_name": "pytorch/pytorch"}}, "late", event="issues")
    assert Issue.objects.get(number=1001).label_names() == ["oncall: pt2"]


def test_it_follows_up_a_label_deleted_by_webhook_as_a_label_gone_not_as_an_arrival(client, mirrored, fake_github):
    """Its issues lost a label, their text did not change: refreshed, never bisected on arrival (followups)."""
    fake_github.set_labels(1001, ["oncall: pt2", NEW])
    sync_queue()
    fake_github.delete_label(NEW)
    deliver_signed(client, "label", _label_event("deleted", NEW, "2026-11-01T11:00:00Z"), "gone", SECRET, process=False)
    edited = {"action": "edited", "issue": fake_github.issue_json(fake_github.issues[1001])}
    edited["repository"] = {"full_name": "pytorch/pytorch"}
    fake_github.update_issue(1001, body="edited since")
    edited["issue"]["updated_at"] = fake_github.issue_json(fake_github.issues[1001])["updated_at"]
    deliver_signed(client, "issues", edited, "text", SECRET, process=False)

    assert process_webhook(WebhookDelivery.objects.get(delivery_id="gone").pk) == ([mirrored.pk], "label gone")
    assert process_webhook(WebhookDelivery.objects.get(delivery_id="text").pk) == ([mirrored.pk], "webhook")


def test_it_takes_a_label_deleted_while_no_webhook_came_off_every_issue_at_the_full_sync(mirrored, fake_github):
    fake_github.set_labels(1001, ["oncall: pt2", NEW])
    sync_queue()
    fake_github.delete_label(NEW)  # GitHub does not touch the issue's updated_at

    report = sync_queue(full=True)

    assert (
        Issue.objects.get(number=1001).label_names() == ["oncall: pt2"] and not Label.objects.get(name=NEW).in_catalog
    )
    assert report.lost_labels == [mirrored.pk]


def test_it_follows_a_renamed_label_to_its_new_name(client, mirrored, fake_github):
    fake_github.set_labels(1001, ["oncall: pt2", NEW])
    sync_queue()
    fake_github.rename_label(NEW, "module: dispatcher")
    payload = _label_event("edited", "module: dispatcher", changes={"name": {"from": NEW}})

    _deliver(client, payload, "renamed")

    assert Issue.objects.get(number=1001).label_names() == ["module: dispatcher", "oncall: pt2"]
    assert Label.objects.get(name="module: dispatcher").in_catalog and not Label.objects.get(name=NEW).in_catalog
    sync_queue(full=True)  # the full sync agrees
    assert Issue.objects.get(number=1001).label_names() == ["module: dispatcher", "oncall: pt2"]


def test_it_takes_an_old_name_out_of_the_catalog_off_its_issues_when_github_renames_it(client, mirrored, fake_github):
    """A write that found the label missing left it out of the catalog, still on its issues (applying); the rename
    then follows only catalog rows, and the issues lose the old name, reported for their follow-up."""
    fake_github.set_labels(1001, ["oncall: pt2", NEW])
    sync_queue()
    Label.objects.filter(name=NEW).update(in_catalog=False)
    fake_github.rename_label(NEW, "module: dispatcher")
    payload = _label_event("edited", "module: dispatcher", changes={"name": {"from": NEW}})
    deliver_signed(client, "label", payload, "renamed", SECRET, process=False)

    assert process_webhook(WebhookDelivery.objects.get(delivery_id="renamed").pk) == ([mirrored.pk], "label gone")
    assert Issue.objects.get(number=1001).label_names() == ["oncall: pt2"]
