"""POST /github/webhook: signatures, replays, and applying events in any order."""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection
from django.urls import reverse

from rubric_app.github.events import process_webhook
from rubric_app.models import Comment, Issue, Label, WebhookDelivery
from rubric_app.tasks import process_webhook_task
from tests.factories import make_issue
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db
URL = "/github/webhook"


@pytest.fixture(autouse=True)
def secrets(settings):
    # Two secrets: the new one and the one being rotated out.
    settings.GITHUB_WEBHOOK_SECRETS = ["new-secret", "old-secret"]
    settings.GITHUB_REPO = "pytorch/pytorch"


def _sign(body: bytes, secret: str = "new-secret") -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def _post(
    client,
    event: str,
    payload,
    *,
    secret: str | None = "new-secret",
    delivery: str | None = None,
    body: bytes | None = None,
):
    body = body if body is not None else json.dumps(payload).encode()
    headers = {"X-GitHub-Event": event, "X-GitHub-Delivery": delivery or str(uuid.uuid4())}
    if secret is not None:
        headers["X-Hub-Signature-256"] = _sign(body, secret)
    return client.post(URL, data=body, content_type="application/json", headers=headers)


def _ours(**stamps) -> dict:
    """The repository object GitHub puts in every payload (full_name, and its clock: see label_event_stamp)."""
    return {"full_name": "pytorch/pytorch", **stamps}


def _label_payload(
    action: str,
    name: str,
    color: str = "ededed",
    *,
    pushed_at: str = "2026-11-01T10:00:00Z",
    repo: str = "pytorch/pytorch",
    **extra,
) -> dict:
    return {
        "action": action,
        "label": {"name": name, "color": color},
        "repository": {"full_name": repo, "pushed_at": pushed_at, "updated_at": "2026-10-01T00:00:00Z"},
        **extra,
    }


def _issue_payload(fake, number: int, action: str = "edited", **fields) -> dict:
    issue = fake.add_issue(number, **fields) if number not in fake.issues else fake.issues[number]
    return {"action": action, "issue": fake.issue_json(issue), "repository": {"full_name": fake.repo}}


def test_it_is_routed_by_name():
    assert reverse("rubric_app:github_webhook") == URL


def test_it_accepts_a_good_signature_stores_the_delivery_and_enqueues_once(
    client, fake_github, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        response = _post(client, "issues", _issue_payload(fake_github, 5), delivery="d-1")

    assert response.status_code == 202
    delivery = WebhookDelivery.objects.get()
    assert (delivery.delivery_id, delivery.event, delivery.payload["issue"]["number"]) == ("d-1", "issues", 5)
    assert len(callbacks) == 1  # process_webhook_task.delay_on_commit


def test_it_answers_with_one_insert_and_no_other_query(client, fake_github, django_assert_num_queries):
    payload = _issue_payload(fake_github, 5)
    # SAVEPOINT, INSERT the delivery, RELEASE SAVEPOINT: nothing else before the 202.
    with django_assert_num_queries(3):
        assert _post(client, "issues", payload).status_code == 202


def test_it_accepts_the_secret_being_rotated_out(client, fake_github):
    assert _post(client, "issues", _issue_payload(fake_github, 5), secret="old-secret").status_code == 202


@pytest.mark.parametrize("secret", [None, "wrong-secret"])
def test_it_refuses_a_missing_or_bad_signature_with_403(
    client, fake_github, secret, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as callbacks:
        response = _post(client, "issues", _issue_payload(fake_github, 5), secret=secret)

    assert response.status_code == 403
    assert not WebhookDelivery.objects.exists() and not callbacks


def test_it_refuses_a_signature_over_another_body(client, fake_github):
    body = json.dumps(_issue_payload(fake_github, 5)).encode()
    response = client.post(
        URL,
        data=body + b" ",
        content_type="application/json",
        headers={"X-GitHub-Event": "issues", "X-GitHub-Delivery": "d-x", "X-Hub-Signature-256": _sign(body)},
    )
    assert response.status_code == 403


def test_it_refuses_everything_when_no_secret_is_configured(client, fake_github, settings):
    settings.GITHUB_WEBHOOK_SECRETS = []
    assert _post(client, "issues", _issue_payload(fake_github, 5)).status_code == 403


def test_it_answers_400_to_a_signed_body_that_is_not_json(client):
    response = _post(client, "issues", None, body=b"{not json")

    assert response.status_code == 400
    assert b"not JSON" in response.content
    assert not WebhookDelivery.objects.exists()


def test_it_answers_400_to_a_signed_body_nested_too_deep_for_json(client):
    response = _post(client, "issues", None, body=b"[" * 100_000 + b"]" * 100_000)

    assert response.status_code == 400 and b"not JSON" in response.content
    assert not WebhookDelivery.objects.exists()


def test_it_ignores_a_replayed_delivery_id(client, fake_github, django_capture_on_commit_callbacks):
    payload = _issue_payload(fake_github, 5)
    _post(client, "issues", payload, delivery="same-id")
    process_webhook(WebhookDelivery.objects.get(delivery_id="same-id").pk)

    with django_capture_on_commit_callbacks() as callbacks:
        response = _post(client, "issues", payload, delivery="same-id")

    assert response.status_code == 200
    assert WebhookDelivery.objects.count() == 1 and not callbacks


def test_it_queues_again_a_redelivery_of_a_delivery_never_processed(
    client, fake_github, django_capture_on_commit_callbacks
):
    # e.g. the broker was down when it first came: GitHub's redelivery must not be dropped as a replay.
    payload = _issue_payload(fake_github, 5)
    _post(client, "issues", payload, delivery="lost-id")

    with django_capture_on_commit_callbacks() as callbacks:
        response = _post(client, "issues", payload, delivery="lost-id")

    assert response.status_code == 202
    assert WebhookDelivery.objects.count() == 1 and len(callbacks) == 1


def test_it_refuses_get_with_405(client):
    assert client.get(URL).status_code == 405


def test_it_applies_an_issues_event_and_refreshes_suggestions(client, fake_github):
    payload = _issue_payload(fake_github, 7, title="graph break in dynamo", labels=["oncall: pt2", "module: dynamo"])
    _post(client, "issues", payload, delivery="d-7")

    process_webhook_task(WebhookDelivery.objects.get(delivery_id="d-7").pk)  # applied, then what follows

    issue = Issue.objects.get(number=7)
    assert issue.title == "graph break in dynamo" and issue.label_names() == ["module: dynamo", "oncall: pt2"]
    assert issue.suggestions_updated_at is not None
    assert WebhookDelivery.objects.get(delivery_id="d-7").processed_at is not None


def test_it_never_lets_an_older_event_overwrite_a_newer_one(client, fake_github):
    fake_github.add_issue(8, title="first title")
    old = _issue_payload(fake_github, 8)
    fake_github.update_issue(8, title="second title")
    new = {
        "action": "edited",
        "issue": fake_github.issue_json(fake_github.issues[8]),
        "repository": {"full_name": fake_github.repo},
    }
    _post(client, "issues", new, delivery="newer")
    _post(client, "issues", old, delivery="older")  # arrives last

    for delivery_id in ("newer", "older"):
        process_webhook(WebhookDelivery.objects.get(delivery_id=delivery_id).pk)

    assert Issue.objects.get(number=8).title == "second title"


def test_it_marks_an_issue_that_leaves_the_queue(client, fake_github):
    make_issue(9)
    fake_github.add_issue(9, labels=["oncall: pt2"])
    fake_github.update_issue(9, state="closed")
    _post(client, "issues", _issue_payload(fake_github, 9, action="closed"), delivery="closed-9")

    process_webhook(WebhookDelivery.objects.get(delivery_id="closed-9").pk)

    issue = Issue.objects.get(number=9)
    assert (issue.state, issue.in_queue) == ("closed", False)


def test_it_ignores_issues_outside_the_queue_it_does_not_know(client, fake_github):
    _post(client, "issues", _issue_payload(fake_github, 10, labels=["module: docs"]), delivery="d-10")

    process_webhook(WebhookDelivery.objects.get(delivery_id="d-10").pk)

    assert not Issue.objects.filter(number=10).exists()


def test_it_ignores_events_of_another_repo(client, fake_github):
    make_issue(14, title="ours")
    payload = _issue_payload(fake_github, 14, title="theirs")
    payload["repository"] = {"full_name": "pytorch/vision"}
    _post(client, "issues", payload, delivery="d-14")

    process_webhook(WebhookDelivery.objects.get(delivery_id="d-14").pk)

    assert Issue.objects.get(number=14).title == "ours"


def _foreign_events(fake, repository) -> list[tuple[str, dict]]:
    """One payload of each event kind this hook receives, naming `repository` (None: naming none)."""
    fake.add_issue(31, title="theirs", labels=["oncall: pt2"])
    comment = fake.add_comment(31, "their comment")
    issue_json = fake.issue_json(fake.issues[31])
    events = [
        ("issues", {"action": "opened", "issue": issue_json}),
        ("issue_comment", {"action": "created", "issue": issue_json, "comment": fake.comment_json(31, comment)}),
        ("label", {"action": "created", "label": {"name": "module: theirs", "color": "000000"}}),
        ("label", {"action": "edited", "label": {"name": "module: dynamo", "color": "000000"}}),
        (
            "label",
            {
                "action": "edited",
                "label": {"name": "module: renamed", "color": "000000"},
                "changes": {"name": {"from": "module: inductor"}},
            },
        ),
        ("label", {"action": "deleted", "label": {"name": "module: dynamo", "color": "1d76db"}}),
        ("ping", {"zen": "Keep it logically awesome.", "hook_id": 1}),
    ]
    for _event, payload in events:
        if repository is not None:
            payload["repository"] = {"full_name": repository, "pushed_at": "2030-01-01T00:00:00Z"}
    return events


@pytest.mark.parametrize("repository", ["pytorch/vision", "pytorch/pytorch-canary", None])
def test_it_ignores_every_event_kind_of_another_repo_with_the_reason_and_never_applies_it(
    client, fake_github, repository, django_capture_on_commit_callbacks
):
    # Signed label events from another repo of the org recoloured and removed our labels (an org-wide hook).
    dynamo = Label.objects.create(name="module: dynamo", color="1d76db", allowed_for_triage=True)
    Label.objects.create(name="module: inductor", color="aabbcc", allowed_for_triage=True)
    for i, (event, payload) in enumerate(_foreign_events(fake_github, repository)):
        with django_capture_on_commit_callbacks() as callbacks:
            response = _post(client, event, payload, delivery=f"foreign-{i}")

        assert response.status_code == 202 and response.content.startswith(b"Ignored: ")
        delivery = WebhookDelivery.objects.get(delivery_id=f"foreign-{i}")
        assert delivery.processed_at is not None and not callbacks  # never queued to be applied
        assert ("from repository pytorch/" if repository else "names no repository") in delivery.ignored

    dynamo.refresh_from_db()
    assert (dynamo.color, dynamo.in_catalog) == ("1d76db", True)
    assert sorted(Label.objects.values_list("name", "color")) == [
        ("module: dynamo", "1d76db"),
        ("module: inductor", "aabbcc"),
    ]
    assert not Issue.objects.exists() and not Comment.objects.exists()


@pytest.mark.parametrize("repository", ["pytorch/vision", None])
def test_it_never_applies_a_stored_delivery_of_another_repo(fake_github, repository):
    # Deliveries stored before the check in the view (or requeued by the sweep) are checked when applied too.
    Label.objects.create(name="module: dynamo", color="1d76db", allowed_for_triage=True)
    Label.objects.create(name="module: inductor", color="aabbcc", allowed_for_triage=True)
    for i, (event, payload) in enumerate(_foreign_events(fake_github, repository)):
        delivery = WebhookDelivery.objects.create(delivery_id=f"stored-{i}", event=event, payload=payload)

        process_webhook(delivery.pk)

        delivery.refresh_from_db()
        assert delivery.processed_at is not None and delivery.error == "" and delivery.ignored
    assert sorted(Label.objects.values_list("name", "color", "in_catalog")) == [
        ("module: dynamo", "1d76db", True),
        ("module: inductor", "aabbcc", True),
    ]
    assert not Issue.objects.exists() and not Comment.objects.exists()


def test_it_matches_its_repository_whatever_the_case(client):
    # GitHub's repository names are case-insensitive.
    _post(
        client, "label", _label_payload("created", "module: dynamo", "1d76db", repo="PyTorch/PyTorch"), delivery="case"
    )

    process_webhook(WebhookDelivery.objects.get(delivery_id="case").pk)

    assert Label.objects.get(name="module: dynamo").color == "1d76db"


def test_it_does_not_apply_a_captured_delivery_resent_under_a_new_id(client, django_capture_on_commit_callbacks):
    # The delivery id header is not signed: a captured body replayed with a fresh id passes the signature.
    captured = json.dumps(
        _label_payload("edited", "module: dynamo", "111111", pushed_at="2026-11-01T10:00:00Z")
    ).encode()
    later = _label_payload(
        "edited", "module: dynamo", "222222", pushed_at="2026-11-01T10:00:00Z", sender={"login": "b"}
    )
    for delivery_id, body in (("d-captured", captured), ("d-later", json.dumps(later).encode())):
        _post(client, "label", None, body=body, delivery=delivery_id)
        process_webhook(WebhookDelivery.objects.get(delivery_id=delivery_id).pk)
    assert Label.objects.get(name="module: dynamo").color == "222222"

    with django_capture_on_commit_callbacks() as callbacks:
        response = _post(client, "label", None, body=captured, delivery="d-replayed")

    assert response.status_code == 200 and b"already received" in response.content
    assert not callbacks and not WebhookDelivery.objects.filter(delivery_id="d-replayed").exists()
    assert Label.objects.get(name="module: dynamo").color == "222222"


def test_it_queues_again_an_unprocessed_delivery_whose_body_comes_under_a_new_id(
    client, django_capture_on_commit_callbacks
):
    # GitHub's "Redeliver" of a delivery we stored but never processed: queued again, stored once.
    body = json.dumps(_label_payload("created", "module: dynamo", "1d76db")).encode()
    _post(client, "label", None, body=body, delivery="first")

    with django_capture_on_commit_callbacks() as callbacks:
        response = _post(client, "label", None, body=body, delivery="redelivered")

    assert response.status_code == 202 and len(callbacks) == 1
    assert list(WebhookDelivery.objects.values_list("delivery_id", flat=True)) == ["first"]


def test_it_never_lets_an_older_label_event_overwrite_a_newer_one(client):
    older = _label_payload("edited", "module: dynamo", "111111", pushed_at="2026-11-01T10:00:00Z")
    newer = _label_payload("edited", "module: dynamo", "222222", pushed_at="2026-11-01T10:05:00Z")
    _post(client, "label", newer, delivery="newer")
    _post(client, "label", older, delivery="older")  # sent first, delivered last

    for delivery_id in ("newer", "older"):
        process_webhook(WebhookDelivery.objects.get(delivery_id=delivery_id).pk)

    assert Label.objects.get(name="module: dynamo").color == "222222"
    assert "older label event" in WebhookDelivery.objects.get(delivery_id="older").ignored


@pytest.mark.parametrize(
    "late",
    [
        _label_payload("edited", "module: dynamo", "111111", pushed_at="2026-11-01T10:00:00Z"),
        _label_payload("created", "module: dynamo", "111111", pushed_at="2026-11-01T10:00:00Z"),
        _label_payload(
            "edited",
            "module: dynamo",
            "111111",
            pushed_at="2026-11-01T10:00:00Z",
            changes={"name": {"from": "module: old dynamo"}},
        ),
    ],
)
@pytest.mark.parametrize("known", [True, False])
def test_it_keeps_a_deleted_label_deleted_when_an_older_event_arrives_after(client, late, known):
    if known:
        Label.objects.create(name="module: dynamo", color="1d76db", allowed_for_triage=True)
    _post(
        client, "label", _label_payload("deleted", "module: dynamo", pushed_at="2026-11-01T10:05:00Z"), delivery="gone"
    )
    _post(client, "label", late, delivery="late")

    for delivery_id in ("gone", "late"):
        process_webhook(WebhookDelivery.objects.get(delivery_id=delivery_id).pk)

    assert not Label.objects.filter(name="module: dynamo", in_catalog=True).exists()
    assert "older label event" in WebhookDelivery.objects.get(delivery_id="late").ignored


def test_it_applies_a_label_created_again_after_its_deletion(client):
    _post(
        client, "label", _label_payload("deleted", "module: dynamo", pushed_at="2026-11-01T10:00:00Z"), delivery="gone"
    )
    _post(
        client,
        "label",
        _label_payload("created", "module: dynamo", "333333", pushed_at="2026-11-01T10:05:00Z"),
        delivery="back",
    )

    for delivery_id in ("gone", "back"):
        process_webhook(WebhookDelivery.objects.get(delivery_id=delivery_id).pk)

    label = Label.objects.get(name="module: dynamo")
    assert (label.in_catalog, label.color) == (True, "333333")


def test_it_applies_comment_events_created_edited_deleted_in_any_order(client, fake_github):
    fake_github.add_issue(11)
    comment = fake_github.add_comment(11, "fails on aot_eager too")
    issue_json = fake_github.issue_json(fake_github.issues[11])
    created = fake_github.comment_json(11, comment)
    edited = {
        **created,
        "body": "fails on aot_eager, passes in eager",
        "updated_at": (comment["updated_at"] + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    repository = {"full_name": fake_github.repo}
    _post(
        client,
        "issue_comment",
        {"action": "edited", "issue": issue_json, "comment": edited, "repository": repository},
        delivery="c-edit",
    )
    _post(
        client,
        "issue_comment",
        {"action": "created", "issue": issue_json, "comment": created, "repository": repository},
        delivery="c-new",
    )

    for delivery_id in ("c-edit", "c-new"):  # the edit arrives before the creation
        process_webhook(WebhookDelivery.objects.get(delivery_id=delivery_id).pk)

    assert list(Comment.objects.values_list("body", flat=True)) == ["fails on aot_eager, passes in eager"]
    _post(
        client,
        "issue_comment",
        {"action": "deleted", "issue": issue_json, "comment": edited, "repository": repository},
        delivery="c-del",
    )
    process_webhook(WebhookDelivery.objects.get(delivery_id="c-del").pk)
    assert not Comment.objects.exists()


def test_it_applies_label_events(client):
    Label.objects.create(name="module: old name", allowed_for_triage=False)
    events = [
        (
            "l-1",
            {
                "action": "created",
                "label": {"name": "module: dynamo", "color": "1d76db", "description": "Dynamo"},
                "repository": _ours(),
            },
        ),
        (
            "l-2",
            {
                "action": "edited",
                "label": {"name": "module: inductor", "color": "aabbcc"},
                "changes": {"name": {"from": "module: old name"}},
                "repository": _ours(),
            },
        ),
        ("l-3", {"action": "created", "label": {"name": "ciflow/trunk", "color": "ffffff"}, "repository": _ours()}),
        ("l-4", {"action": "deleted", "label": {"name": "module: dynamo", "color": "1d76db"}, "repository": _ours()}),
    ]
    for delivery_id, payload in events:
        _post(client, "label", payload, delivery=delivery_id)
        process_webhook(WebhookDelivery.objects.get(delivery_id=delivery_id).pk)

    assert Label.objects.get(name="module: dynamo").in_catalog is False
    renamed = Label.objects.get(name="module: inductor")
    assert (renamed.color, renamed.allowed_for_triage) == ("aabbcc", True)
    assert not Label.objects.get(name="module: old name").in_catalog  # kept gone: a late event naming it finds it so
    assert Label.objects.get(name="ciflow/trunk").allowed_for_triage is False  # G7


def test_it_merges_a_label_renamed_onto_a_name_it_already_has(client):
    # We missed GitHub deleting "module: inductor"; an issue still carries the stale row.
    stale = Label.objects.create(name="module: inductor", in_catalog=False)
    old = Label.objects.create(name="module: codegen")
    both, only_old = make_issue(number=21), make_issue(number=22)
    both.labels.add(stale, old)
    only_old.labels.add(old)
    payload = {
        "action": "edited",
        "label": {"name": "module: inductor", "color": "aabbcc"},
        "changes": {"name": {"from": "module: codegen"}},
        "repository": _ours(),
    }
    _post(client, "label", payload, delivery="l-merge")

    process_webhook(WebhookDelivery.objects.get(delivery_id="l-merge").pk)

    delivery = WebhookDelivery.objects.get(delivery_id="l-merge")
    assert delivery.processed_at is not None and delivery.error == ""
    merged = Label.objects.get(name="module: inductor")
    assert (merged.pk, merged.color, merged.allowed_for_triage) == (stale.pk, "aabbcc", True)
    # The stale row's deletion has no stamp, so which came last cannot be told: applied, but out of the catalog
    # until GitHub says it has the label (issue 45: towards "gone").
    assert (merged.in_catalog, merged.unconfirmed) == (False, True) and "cannot be ordered" in delivery.ignored
    assert not Label.objects.get(name="module: codegen").in_catalog
    assert sorted(merged.issues.values_list("number", flat=True)) == [21, 22]


def test_it_records_a_payload_it_cannot_understand(client):
    _post(
        client, "issues", {"action": "edited", "issue": {"title": "no number"}, "repository": _ours()}, delivery="bad"
    )

    process_webhook(WebhookDelivery.objects.get(delivery_id="bad").pk)

    assert "payload not understood" in WebhookDelivery.objects.get(delivery_id="bad").error


def test_it_processes_a_delivery_only_once(client, fake_github):
    _post(client, "issues", _issue_payload(fake_github, 12), delivery="d-12")
    delivery = WebhookDelivery.objects.get(delivery_id="d-12")
    process_webhook(delivery.pk)
    Issue.objects.filter(number=12).update(title="changed locally")

    process_webhook(delivery.pk)  # a redelivered task

    assert Issue.objects.get(number=12).title == "changed locally"


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_processes_the_delivery_in_the_worker(client, fake_github, celery_worker_process):
    _post(client, "issues", _issue_payload(fake_github, 13, title="via the worker"), delivery="d-13")

    wait_until(
        lambda: WebhookDelivery.objects.filter(delivery_id="d-13", processed_at__isnull=False).exists(), timeout=60
    )
    assert Issue.objects.get(number=13).title == "via the worker"


@pytest.mark.django_db(transaction=True)
def test_it_leaves_a_delivery_unprocessed_when_the_database_fails_so_a_retry_loses_nothing(fake_github):
    payload = _issue_payload(fake_github, 7, action="opened", labels=["oncall: pt2"])
    delivery = WebhookDelivery.objects.create(delivery_id="d-db", event="issues", payload=payload)
    with connection.cursor() as cursor:  # a real database failure: the table refuses issue #7 for now
        cursor.execute("ALTER TABLE rubric_app_issue ADD CONSTRAINT refuse_seven CHECK (number <> 7)")
    try:
        with pytest.raises(DatabaseError):
            process_webhook(delivery.pk)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE rubric_app_issue DROP CONSTRAINT refuse_seven")

    delivery.refresh_from_db()
    assert delivery.processed_at is None and not Issue.objects.filter(number=7).exists()
    process_webhook(delivery.pk)  # the task's retry
    delivery.refresh_from_db()
    assert delivery.processed_at is not None and Issue.objects.filter(number=7).exists()


def test_it_stores_who_posted_a_comment_and_their_association_with_the_repository(client, fake_github):
    # Whose words are the automation's, and whose repro counts (issue #35), read GitHub's author_association.
    fake_github.add_issue(12, user="reporter")
    comment = fake_github.add_comment(12, "**🤖 PT2 Repro Agent**\n\nReproduced.", user="mallory", association="NONE")
    payload = {
        "action": "created",
        "issue": fake_github.issue_json(fake_github.issues[12]),
        "comment": fake_github.comment_json(12, comment),
        "repository": {"full_name": fake_github.repo},
    }
    assert payload["comment"]["author_association"] == "NONE"
    _post(client, "issue_comment", payload, delivery="c-who")
    process_webhook(WebhookDelivery.objects.get(delivery_id="c-who").pk)
    assert list(Comment.objects.values_list("author", "author_association")) == [("mallory", "NONE")]

    promoted = {**payload["comment"], "author_association": "MEMBER", "updated_at": "2030-01-01T00:00:00Z"}
    _post(client, "issue_comment", {**payload, "action": "edited", "comment": promoted}, delivery="c-who-2")
    process_webhook(WebhookDelivery.objects.get(delivery_id="c-who-2").pk)
    assert list(Comment.objects.values_list("author", "author_association")) == [("mallory", "MEMBER")]
