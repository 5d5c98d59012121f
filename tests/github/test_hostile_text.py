"""GitHub's text as it comes, stored whatever it holds (issue 45): a NUL byte, half an emoji (a lone surrogate) and
the like through the queue's sync, the history backfill and a signed webhook, on PostgreSQL; one bad issue never
stops a page, a sync, a backfill or a delivery; and no rate-limit wait inside a database transaction."""

from __future__ import annotations

import hashlib
import json
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import OperationalError, connection, connections, transaction
from django.urls import reverse

from rubric_app.github import history
from rubric_app.github.data import REPLACEMENT, storable, storable_json
from rubric_app.github.events import process_webhook
from rubric_app.github.sync import FULL_KEY, sync_queue
from rubric_app.models import Comment, Issue, SyncState, WebhookDelivery
from tests.helpers import deliver_signed

NUL_BODY = "Traceback:\x00 the kernel wrote a NUL here"
HALF_EMOJI = "torch.compile \ud83d crashes"  # the first half of 😀's surrogate pair, alone
START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def test_it_makes_text_storable_and_says_what_it_replaced():
    assert storable("fine 😀") == ("fine 😀", "")
    assert storable(NUL_BODY) == (NUL_BODY.replace("\x00", REPLACEMENT), "1 NUL byte")
    assert storable("a\ud83d b\udc00 c\x00\x00") == (
        f"a{REPLACEMENT} b{REPLACEMENT} c{REPLACEMENT}{REPLACEMENT}",
        "2 NUL bytes, 2 lone surrogates",
    )
    assert storable("\ud83d\ude00") == ("😀", "")  # a whole pair sent as two escapes is the emoji itself
    clean, found = storable_json({"issue": {"title": HALF_EMOJI, "labels": [{"name": "x\x00"}]}, "n": 1})
    assert found == {"issue.title": "1 lone surrogate", "issue.labels.0.name": "1 NUL byte"}
    assert clean["issue"]["title"] == HALF_EMOJI.replace("\ud83d", REPLACEMENT) and clean["n"] == 1


def _hostile_queue(fake) -> None:
    fake.add_issue(1, title="a plain issue", labels=["oncall: pt2"])
    fake.add_issue(2, title="NUL in the body", body=NUL_BODY, labels=["oncall: pt2"], comments=["log:\x00\x00 end"])
    fake.add_issue(3, title=HALF_EMOJI, labels=["oncall: pt2"])
    fake.add_issue(4, title="another plain one", labels=["oncall: pt2"])


@pytest.mark.django_db
def test_it_syncs_a_nul_body_and_a_lone_surrogate_title_and_the_page_says_what_was_replaced(
    fake_github, client, viewer
):
    _hostile_queue(fake_github)

    report = sync_queue(full=True)

    assert sorted(Issue.objects.values_list("number", flat=True)) == [1, 2, 3, 4] and not report.skipped_issues
    nul, half = Issue.objects.get(number=2), Issue.objects.get(number=3)
    assert nul.body == NUL_BODY.replace("\x00", REPLACEMENT) and nul.replaced == {"body": "1 NUL byte"}
    assert half.title == HALF_EMOJI.replace("\ud83d", REPLACEMENT) and half.replaced == {"title": "1 lone surrogate"}
    assert Comment.objects.get(issue=nul).replaced == {"body": "2 NUL bytes"}
    assert Issue.objects.get(number=1).replaced == {}
    # The incremental sync reads them again (edited since) and goes on past them.
    fake_github.update_issue(3, body="more \x00")
    fake_github.add_issue(5, title="after the bad ones", labels=["oncall: pt2"])
    incremental = sync_queue()
    assert Issue.objects.get(number=3).replaced == {"title": "1 lone surrogate", "body": "1 NUL byte"}
    assert Issue.objects.filter(number=5).exists() and not incremental.skipped_issues

    client.force_login(viewer)
    page = client.get(reverse("rubric_app:issue", args=[2])).content.decode()
    assert "body: 1 NUL byte" in page and "2 NUL bytes" in page  # the issue's and its comment's
    assert "title: 1 lone surrogate" in client.get(reverse("rubric_app:issue", args=[3])).content.decode()


@pytest.mark.django_db
def test_it_backfills_history_past_a_nul_body_and_a_lone_surrogate_title(fake_github):
    _hostile_queue(fake_github)
    fake_github.add_issue(6, title=f"closed {HALF_EMOJI}", body=NUL_BODY, labels=["oncall: pt2"], state="closed")

    report = history.sync_history(out=lambda line: None)

    assert Issue.objects.count() == 5 and report.stored == 5 and not report.skipped_issues
    assert Issue.objects.get(number=6).replaced == {"title": "1 lone surrogate", "body": "1 NUL byte"}
    assert SyncState.objects.get(key=history.BACKFILL_KEY).last_error == ""


WEBHOOK_SECRET = "hook-secret"


def _signed(client, event: str, body: bytes, delivery: str):
    return deliver_signed(client, event, body, delivery, WEBHOOK_SECRET, process=False)


@pytest.mark.django_db
def test_it_stores_and_applies_a_signed_webhook_carrying_a_nul_and_half_an_emoji(fake_github, client, settings):
    settings.GITHUB_WEBHOOK_SECRETS = [WEBHOOK_SECRET]
    issue = fake_github.add_issue(7, title=HALF_EMOJI, body=NUL_BODY, labels=["oncall: pt2"])
    comment = fake_github.add_comment(7, "see \x00 and \udc00")
    payload = {
        "action": "created",
        "issue": fake_github.issue_json(issue),
        "comment": fake_github.comment_json(7, comment),
        "repository": {"full_name": fake_github.repo},
    }
    body = json.dumps(payload).encode()  # GitHub's bytes: \u0000 and \ud83d escapes
    assert b"\\u0000" in body and b"\\ud83d" in body

    response = _signed(client, "issue_comment", body, "hostile-1")

    assert response.status_code == 202, response.content
    delivery = WebhookDelivery.objects.get(delivery_id="hostile-1")
    assert delivery.body_sha256 == hashlib.sha256(body).hexdigest()  # the signed bytes, as sent
    assert delivery.replaced == {
        "issue.title": "1 lone surrogate",
        "issue.body": "1 NUL byte",
        "comment.body": "1 NUL byte, 1 lone surrogate",
    }
    process_webhook(delivery.pk)
    delivery.refresh_from_db()
    assert delivery.processed_at is not None and delivery.error == ""
    stored = Issue.objects.get(number=7)
    assert stored.replaced == {"title": "1 lone surrogate", "body": "1 NUL byte"}
    assert stored.comments.get().replaced == {"body": "1 NUL byte, 1 lone surrogate"}
    assert _signed(client, "issue_comment", body, "hostile-2").status_code == 200  # the same body again: a replay


@pytest.mark.django_db
def test_it_leaves_out_an_issue_the_database_refuses_with_the_reason_and_stores_the_rest(
    fake_github, client, settings, health_token
):
    """A value the database cannot hold (a state longer than GitHub's) fails only that issue: the backfill and the
    queue sync store the rest, and the sync's report, its state and /health say which and why."""
    for number in range(10, 20):
        fake_github.add_issue(number, title=f"issue {number}", labels=["oncall: pt2"], updated_at=START)
    fake_github.issues[13]["state"] = "open-and-then-some"  # the issue column holds 10 characters
    fake_github.issues[15]["sent_as"] = {"updated_at": "yesterday"}  # an item the client cannot read at all

    report = history.sync_history(out=lambda line: None)

    assert sorted(Issue.objects.values_list("number", flat=True)) == [10, 11, 12, 14, 16, 17, 18, 19]
    assert [number for number, _why in report.skipped_issues] == [15, 13]
    reasons = dict(report.skipped_issues)
    assert reasons[13].startswith("not stored: DataError: value too long") and "not read" in reasons[15]
    assert "2 issues left out: #15" in report.summary()
    assert SyncState.objects.get(key=history.BACKFILL_KEY).skipped == [
        {"number": n, "reason": reasons[n]} for n in (15, 13)
    ]
    health = client.get(reverse("rubric_app:health"), headers=health_token).json()
    assert [row["number"] for row in health["skipped"][history.BACKFILL_KEY]] == [15, 13]

    queue = sync_queue(full=True)
    assert [number for number, _why in queue.skipped_issues] == [15]  # 13 is in no queue: not open
    assert SyncState.objects.get(key=FULL_KEY).skipped[0]["number"] == 15


@pytest.mark.django_db(transaction=True)
def test_it_never_waits_for_a_rate_limit_inside_a_transaction(fake_github):
    """The escape: a secondary rate-limit wait slept inside the backfill's page transaction, holding the page's
    rows locked (a webhook or a decision on one of them waited or timed out)."""
    for number in range(1, 6):
        fake_github.add_issue(number, labels=["oncall: pt2"], state="closed", comments=["first"], updated_at=START)
    history.sync_history(out=lambda line: None)
    for number in range(1, 6):  # each changed since, with a new comment: the next run re-reads their comments
        fake_github.add_comment(number, "second")
    fake_github.inject("secondary_rate_limit", method="GET", path=r"/issues/4/comments$", retry_after=1)
    waits = []

    def sleep(seconds: float) -> None:
        waits.append((seconds, connection.in_atomic_block, _rows_lockable(range(1, 6))))

    history.sync_history(since=START - timedelta(days=1), out=lambda line: None, sleep=sleep)

    assert waits == [(1.0, False, True)]
    assert Comment.objects.filter(body="second").count() == 5


def _rows_lockable(numbers) -> bool:
    """Whether another connection can lock these issues' rows at once (NOWAIT), as a webhook's transaction would."""
    result = []

    def lock():
        try:
            with transaction.atomic():
                result.append(len(Issue.objects.select_for_update(nowait=True).filter(number__in=list(numbers))))
        except OperationalError:
            result.append(None)
        finally:
            connections.close_all()

    thread = threading.Thread(target=lock)
    thread.start()
    thread.join()
    return result == [len(list(numbers))]
