"""No ghosts (issue 45): an issue deleted on GitHub or transferred away keeps a tombstone with GitHub's stamp that
older events cannot undo, and the incremental sync notices issues that left the queue on GitHub."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from rubric_app.github.sync import DEPARTURES_KEY, sync_queue
from rubric_app.models import Issue, Label, SyncState, WebhookDelivery
from tests.helpers import deliver_signed

pytestmark = pytest.mark.django_db
SECRET = "tombstone-secret"


@pytest.fixture(autouse=True)
def secrets(settings):
    settings.GITHUB_WEBHOOK_SECRETS = [SECRET]


def _deliver(client, event: str, payload: dict, delivery: str) -> WebhookDelivery:
    return deliver_signed(client, event, payload, delivery, SECRET)


def _event(fake, number: int, action: str, **extra) -> dict:
    return {
        "action": action,
        "issue": fake.issue_json(fake.issues[number]),
        "repository": {"full_name": fake.repo},
        **extra,
    }


@pytest.mark.parametrize(
    "action, extra, why",
    [
        ("deleted", {}, "deleted on GitHub"),
        (
            "transferred",
            {"changes": {"new_repository": {"full_name": "pytorch/vision"}}},
            "transferred to pytorch/vision",
        ),
    ],
)
def test_it_keeps_a_deleted_or_transferred_issue_out_when_an_older_event_arrives_late(
    client, fake_github, viewer, action, extra, why
):
    fake_github.add_issue(7, title="first title", labels=["oncall: pt2"])
    sync_queue(full=True)
    fake_github.set_labels(7, ["oncall: pt2", "module: dynamo"])
    labeled = _event(fake_github, 7, "labeled", label={"name": "module: dynamo"})  # sent, but delivered last
    fake_github.update_issue(7, title="edited title")
    edited = _event(fake_github, 7, "edited")
    gone = _event(fake_github, 7, action, **extra)
    stamp = fake_github.issues[7]["updated_at"]

    _deliver(client, "issues", gone, "gone")
    for name, late in (("late-edit", edited), ("late-label", labeled)):
        _deliver(client, "issues", late, name)

    issue = Issue.objects.get(number=7)
    assert (issue.in_queue, issue.gone, issue.gone_at) == (False, why, stamp)
    assert issue.title == "first title" and issue.label_names() == ["oncall: pt2"]  # nothing of the late events
    assert not Issue.objects.in_queue().exists()
    # A full sync that still lists it (GitHub's listing lags, the issue's own address answers 404) does not bring it
    # back either: the listing is confirmed by a read of the issue, which says it is gone.
    fake_github.inject("error", method="GET", path=r"/issues/7$", status=404, times=2)
    sync_queue(full=True)
    assert not Issue.objects.get(number=7).in_queue
    client.force_login(viewer)
    assert f"Gone from GitHub: {why}" in client.get(reverse("rubric_app:issue", args=[7])).content.decode()


def test_it_takes_a_comment_event_on_a_deleted_issue_for_nothing(client, fake_github):
    fake_github.add_issue(8, labels=["oncall: pt2"])
    comment = fake_github.add_comment(8, "a late comment")
    late = _event(fake_github, 8, "created", comment=fake_github.comment_json(8, comment))
    sync_queue(full=True)
    _deliver(client, "issues", _event(fake_github, 8, "deleted"), "gone")

    _deliver(client, "issue_comment", late, "late-comment")

    issue = Issue.objects.get(number=8)
    assert not issue.in_queue and issue.gone == "deleted on GitHub"


def test_it_notices_issues_deleted_or_transferred_on_github_at_the_incremental_sync(fake_github):
    for number in range(1, 5):
        fake_github.add_issue(number, labels=["oncall: pt2"])
    sync_queue(full=True)
    del fake_github.issues[2]  # deleted on GitHub, and its webhook never came
    fake_github.move_issue(3, "pytorch/vision")  # transferred: listed in the other repository for a while

    quiet = sync_queue()  # within DEPARTURE_CHECK_MINUTES of the full sync: the since= listing only
    assert quiet.requests == 3 + 1  # (the triage skill's three reads, then the listing)
    assert Issue.objects.in_queue().count() == 4

    SyncState.objects.filter(key=DEPARTURES_KEY).update(last_finished_at=timezone.now() - timedelta(minutes=61))
    before = len(fake_github.requests)
    report = sync_queue()

    assert sorted(Issue.objects.in_queue().values_list("number", flat=True)) == [1, 4]
    deleted, moved = Issue.objects.get(number=2), Issue.objects.get(number=3)
    assert deleted.gone.startswith("deleted or transferred (GitHub answered 404)") and deleted.gone_at is not None
    assert moved.gone == "transferred to pytorch/vision" and moved.gone_at == fake_github.issues[3]["updated_at"]
    assert report.gone + report.transferred == 2 and "2 deleted or transferred" in report.summary()
    # What it cost: the since= listing (304), the skill's three reads, one page of the open queue per queue label,
    # and the reads of the issue the listing no longer showed.
    paths = [r.path for r in fake_github.requests[before:]]
    # Each 404 is asked once more (a live issue answers 404 now and then); the catalog is listed too (a label GitHub
    # has again is back within the hour).
    assert paths.count("/repos/pytorch/pytorch/issues") == 3 and paths.count("/repos/pytorch/pytorch/issues/2") == 2
    assert paths.count("/repos/pytorch/pytorch/labels") == 1
    assert len(paths) == 3 + 3 + 2 + 1
    assert SyncState.objects.get(key=DEPARTURES_KEY).last_finished_at > timezone.now() - timedelta(minutes=1)


def _lists(fake, number: int) -> bool:
    return any(i["number"] == number for i in fake.list_issues({"labels": "oncall: pt2", "state": "open"}))


def test_it_brings_back_at_the_next_sync_a_tombstoned_issue_github_still_lists(client, fake_github):
    """R-none: issue 53. A `transferred` event for an issue GitHub still shows in this repository's queue (the
    transfer undone, or sent in error), stamped later than anything GitHub will list of it: the next sync reads it
    again and it is back, whatever the stamps; a later incremental sync leaves it there."""
    fake_github.add_issue(7, labels=["oncall: pt2"])
    sync_queue(full=True)
    moved = _event(fake_github, 7, "transferred", changes={"new_repository": {"full_name": "pytorch/vision"}})
    moved["issue"]["updated_at"] = "2099-01-01T00:00:00Z"  # a stamp later than anything GitHub lists of it
    _deliver(client, "issues", moved, "moved")
    assert not Issue.objects.in_queue().exists() and _lists(fake_github, 7)

    report = sync_queue()

    issue = Issue.objects.get(number=7)
    assert (issue.in_queue, issue.gone, issue.gone_at) == (True, "", None)
    assert fake_github.requests_to(r"/issues/7$")  # read once, on its own address
    sync_queue()
    assert Issue.objects.get(number=7).in_queue and "0 deleted or transferred" in report.summary()


def test_it_brings_back_at_the_full_sync_a_tombstoned_issue_the_listing_shows_in_the_queue(client, fake_github):
    fake_github.add_issue(7, labels=["oncall: pt2"])
    sync_queue(full=True)
    moved = _event(fake_github, 7, "transferred", changes={"new_repository": {"full_name": "pytorch/vision"}})
    moved["issue"]["updated_at"] = "2099-01-01T00:00:00Z"
    _deliver(client, "issues", moved, "moved")

    sync_queue(full=True)

    assert list(Issue.objects.in_queue().values_list("number", flat=True)) == [7]


def test_it_does_not_bury_a_live_issue_whose_departure_read_meets_a_stray_404(fake_github):
    fake_github.add_issue(5, labels=["oncall: pt2"])
    fake_github.add_issue(6, labels=["oncall: pt2"])
    sync_queue(full=True)
    fake_github.set_labels(6, ["module: dynamo"])  # it left the queue (relabelled); its re-read meets one 404
    stamp = fake_github.issues[5]["updated_at"]
    del fake_github.issues[5]  # deleted: both reads answer 404
    fake_github.inject("error", method="GET", path=r"/issues/6$", status=404, times=1)
    SyncState.objects.filter(key=DEPARTURES_KEY).update(last_finished_at=timezone.now() - timedelta(minutes=61))

    sync_queue()

    live, deleted = Issue.objects.get(number=6), Issue.objects.get(number=5)
    assert (live.in_queue, live.gone_at, live.label_names()) == (False, None, ["module: dynamo"])
    # The tombstone carries GitHub's last stamp for the deleted issue, never the local clock.
    assert deleted.gone_at == stamp and deleted.gone.startswith("deleted or transferred")


def test_it_puts_back_in_the_catalog_a_label_github_has_again_at_the_incremental_sync(client, fake_github):
    fake_github.add_label("module: dynamo")
    fake_github.add_label("module: inductor")
    fake_github.add_issue(5, labels=["oncall: pt2"])
    sync_queue(full=True)
    fake_github.delete_label("module: dynamo")
    repository = {"full_name": fake_github.repo, "pushed_at": "2026-11-01T10:00:00Z"}  # an ordered deletion
    label = fake_github.label_json("module: inductor") | {"name": "module: dynamo"}
    _deliver(client, "label", {"action": "deleted", "label": label, "repository": repository}, "label-gone")
    assert not Label.objects.get(name="module: dynamo").in_catalog
    fake_github.add_label("module: dynamo")  # re-created on GitHub; its webhook never came
    fake_github.set_labels(5, ["oncall: pt2", "module: dynamo"])

    sync_queue()  # the since= listing shows #5 carrying it: GitHub is asked about the label, once

    assert Label.objects.get(name="module: dynamo").in_catalog
    assert Issue.objects.get(number=5).label_names() == ["module: dynamo", "oncall: pt2"]
    fake_github.delete_label("module: inductor")
    inductor = {"action": "deleted", "label": label | {"name": "module: inductor"}, "repository": repository}
    _deliver(client, "label", inductor | {"repository": repository | {"pushed_at": "2026-11-01T11:00:00Z"}}, "gone2")
    assert not Label.objects.get(name="module: inductor").in_catalog
    fake_github.add_label("module: inductor")  # a label no issue carries: back with the hourly departure check
    SyncState.objects.filter(key=DEPARTURES_KEY).update(last_finished_at=timezone.now() - timedelta(minutes=61))
    sync_queue()
    assert Label.objects.get(name="module: inductor").in_catalog
