"""The queue sync, through PyGithub over HTTP against the fake GitHub server."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from rubric_app.demo.github_seeds import seed_skill
from rubric_app.github import client as github
from rubric_app.github.sync import FULL_KEY, INCREMENTAL_KEY, LOCK_KEY, SYNC_LEASE, sync_queue
from rubric_app.models import Comment, Issue, Label, SyncState
from rubric_app.triage.followups import issues_changed
from tests.factories import make_label
from tests.helpers import wait_until

pytestmark = pytest.mark.django_db


def _queue(fake, count: int, start: int = 1, comments: int = 0, label: str = "oncall: pt2") -> None:
    for number in range(start, start + count):
        fake.add_issue(
            number, title=f"issue {number}", labels=[label], comments=[f"c{number}-{i}" for i in range(comments)]
        )


def _list_requests(fake) -> list:
    return fake.requests_to(r"/repos/pytorch/pytorch/issues$", "GET")


def test_it_syncs_the_queue_in_pages_of_100_with_comments_and_labels(fake_github):
    _queue(fake_github, 230, comments=1)
    _queue(fake_github, 5, start=1000, label="oncall: cpu inductor")
    fake_github.add_issue(2000, labels=["oncall: pt2"], pull_request=True)
    fake_github.add_issue(2001, labels=["module: dynamo"])  # not in the queue
    fake_github.add_issue(2002, labels=["oncall: pt2", "triaged"], comments=[{"body": "fixed", "user": "bob"}])

    report = sync_queue(on_changed=issues_changed, full=True)

    assert Issue.objects.count() == 236  # 230 + 5 cpu inductor + the triaged one; no PR, no outsider
    assert not Issue.objects.filter(number__in=[2000, 2001]).exists()
    assert Comment.objects.count() == 231
    issue = Issue.objects.get(number=2002)
    assert issue.label_names() == ["oncall: pt2", "triaged"]
    assert [c.author for c in issue.comments.all()] == ["bob"]
    assert issue.last_synced_at is not None and issue.comments_synced_at is not None
    assert issue.suggestions_updated_at is not None  # changed issues get fresh suggestions
    # The floor: 3 pt2 list pages + 1 cpu page + 231 comment pages, plus the label catalog (1 page) and the triage
    # skill's two files and latest release (none here: each answers 404, and the shipped copies stay in use).
    assert len(_list_requests(fake_github)) == 4
    assert all(r.query["per_page"] == "100" for r in _list_requests(fake_github))
    assert report.requests == 4 + 231 + 1 + 3 == len(fake_github.requests)
    assert report.issues_fetched == 237 and report.issues_changed == 236 and report.comments_fetched == 231


def test_it_follows_link_headers_and_sends_the_token(fake_github):
    _queue(fake_github, 150)

    sync_queue(on_changed=issues_changed, full=True)

    pages = _list_requests(fake_github)
    assert [r.query.get("page") for r in pages] == [None, "2", None]  # pt2 pages 1, 2, then cpu page 1
    assert {r.headers["authorization"] for r in fake_github.requests} == {"token test-token-not-a-secret"}


def test_it_syncs_the_label_catalog(fake_github):
    fake_github.add_label("module: dynamo", "1d76db", "Dynamo")
    fake_github.add_label("ciflow/trunk", "ffffff", "CI")
    fake_github.add_label("made up label", "000000")
    Label.objects.create(name="gone from github", allowed_for_triage=True)

    sync_queue(on_changed=issues_changed, full=True)

    dynamo = Label.objects.get(name="module: dynamo")
    assert (dynamo.color, dynamo.description, dynamo.allowed_for_triage, dynamo.in_catalog) == (
        "1d76db",
        "Dynamo",
        True,
        True,
    )
    assert Label.objects.get(name="ciflow/trunk").allowed_for_triage is False  # G7
    assert Label.objects.get(name="made up label").allowed_for_triage is False  # not in the shipped catalog
    assert Label.objects.get(name="gone from github").in_catalog is False


def test_it_creates_unknown_labels_as_not_allowed(fake_github):
    fake_github.add_issue(1, labels=["oncall: pt2", "brand new label"])

    sync_queue(
        on_changed=issues_changed, full=True
    )  # the catalog is synced first, so make the label appear only on the issue
    Label.objects.filter(name="brand new label").delete()
    fake_github.set_labels(1, ["oncall: pt2", "brand new label"])
    sync_queue(on_changed=issues_changed)

    assert Label.objects.get(name="brand new label").allowed_for_triage is False
    assert Issue.objects.get(number=1).has_label("brand new label")


def test_it_marks_issues_that_left_the_queue_and_keeps_them(fake_github):
    _queue(fake_github, 3)
    sync_queue(on_changed=issues_changed, full=True)
    fake_github.update_issue(1, state="closed")
    fake_github.set_labels(2, ["oncall: export"])

    report = sync_queue(on_changed=issues_changed, full=True)

    assert report.left_queue == 2
    assert list(Issue.objects.filter(in_queue=False).order_by("number").values_list("number", "state")) == [
        (1, "closed"),
        (2, "open"),
    ]
    assert Issue.objects.get(number=2).label_names() == ["oncall: export"]
    assert Issue.objects.get(number=3).in_queue is True
    assert Issue.objects.count() == 3  # marked, never deleted


def test_it_syncs_incrementally_since_the_high_water_mark(fake_github):
    _queue(fake_github, 3, comments=1)
    sync_queue(on_changed=issues_changed, full=True)
    mark = SyncState.objects.get(key=INCREMENTAL_KEY).high_water_mark
    fake_github.add_comment(2, "it also fails with dynamic=False")
    fake_github.update_issue(3, state="closed")
    fake_github.add_issue(4, labels=["oncall: pt2"])
    fake_github.requests.clear()

    report = sync_queue(on_changed=issues_changed)

    (listing,) = fake_github.requests_to(r"/issues$")
    assert listing.query["since"] == mark.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert listing.query["state"] == "all" and listing.query["sort"] == "updated"
    assert Issue.objects.get(number=2).comments.count() == 2
    assert Issue.objects.get(number=3).in_queue is False
    assert Issue.objects.get(number=4).in_queue is True
    assert report.left_queue == 1
    # Comments are re-read only where count or updated_at moved: #2 (commented) and #3 (closed), not #1.
    assert sorted(r.path for r in fake_github.requests_to(r"/comments$")) == [
        "/repos/pytorch/pytorch/issues/2/comments",
        "/repos/pytorch/pytorch/issues/3/comments",
    ]
    assert SyncState.objects.get(key=INCREMENTAL_KEY).high_water_mark > mark


def test_it_makes_a_no_op_incremental_sync_with_requests_answered_304(fake_github):
    _queue(fake_github, 120, comments=1)
    seed_skill(fake_github)  # the triage skill's files and a release: read once, then only asked whether they changed
    sync_queue(on_changed=issues_changed, full=True)
    sync_queue(on_changed=issues_changed)  # primes the ETag for the current high-water mark
    fake_github.requests.clear()

    report = sync_queue(on_changed=issues_changed)

    # The skill's two files, the latest release, the queue's first page: each answered 304.
    assert [(r.method, r.status) for r in fake_github.requests] == [("GET", 304)] * 4
    assert all(r.headers["if-none-match"].startswith('W/"') for r in fake_github.requests)
    assert (report.requests, report.not_modified, report.issues_changed) == (4, 4, 0)


def test_it_fetches_comments_only_when_count_or_updated_at_changed(fake_github):
    _queue(fake_github, 5, comments=2)
    sync_queue(on_changed=issues_changed, full=True)
    fake_github.requests.clear()

    sync_queue(on_changed=issues_changed, full=True)

    assert fake_github.requests_to(r"/comments$") == []
    assert Comment.objects.count() == 10


def test_it_never_overwrites_newer_local_data_with_older(fake_github):
    fake_github.add_issue(1, title="old title", labels=["oncall: pt2"])
    sync_queue(on_changed=issues_changed, full=True)
    issue = Issue.objects.get(number=1)
    newer = fake_github.issues[1]["updated_at"].replace(year=2099)
    Issue.objects.filter(pk=issue.pk).update(title="newer title from a webhook", updated_at=newer)

    sync_queue(on_changed=issues_changed, full=True)

    assert Issue.objects.get(number=1).title == "newer title from a webhook"


def test_it_takes_githubs_labels_when_updated_at_ties_but_content_differs(fake_github):
    fake_github.add_issue(1, labels=["oncall: pt2", "module: dynamo"])
    sync_queue(on_changed=issues_changed, full=True)
    # A webhook stored a label that was removed again within the same second on GitHub.
    Issue.objects.get(number=1).labels.add(make_label("module: inductor"))

    sync_queue(on_changed=issues_changed, full=True)

    assert Issue.objects.get(number=1).label_names() == ["module: dynamo", "oncall: pt2"]


def test_it_resumes_an_interrupted_full_sync_without_duplicates_or_gaps(fake_github):
    _queue(fake_github, 350, comments=1)
    fake_github.inject("error", path=r"/issues$", query={"page": "3"}, status=502, times=10)

    with pytest.raises(github.GitHubUnavailable):
        sync_queue(on_changed=issues_changed, full=True)

    state = SyncState.objects.get(key=FULL_KEY)
    assert "page=3" in state.resume_url and "GitHubUnavailable" in state.last_error
    assert Issue.objects.count() == 200
    fake_github.requests.clear()

    report = sync_queue(on_changed=issues_changed, full=True)

    assert report.resumed
    pages = [r.query.get("page") for r in _list_requests(fake_github) if r.status == 200]
    assert pages == ["3", "4", None]  # resumed at page 3, then the cpu lane; pages 1-2 not fetched again
    assert Issue.objects.count() == 350 and Comment.objects.count() == 350
    assert sorted(Issue.objects.values_list("number", flat=True)) == list(range(1, 351))
    assert SyncState.objects.get(key=FULL_KEY).resume_url == ""
    assert Issue.objects.filter(in_queue=True).count() == 350  # nothing wrongly marked as left


def test_it_prints_a_one_line_summary_from_the_command(fake_github, capsys):
    _queue(fake_github, 2, comments=1)

    call_command("sync_queue", "--full")

    out = capsys.readouterr().out.strip()
    assert out.count("\n") == 0
    assert "full sync: 2 issues fetched, 2 changed" in out and "2 comments" in out and "requests" in out


def test_it_reports_a_github_failure_from_the_command_in_one_clear_line(fake_github):
    from django.core.management.base import CommandError

    fake_github.inject("error", path=r"/labels$", status=503, times=20)

    with pytest.raises(CommandError, match="Sync stopped: .*kept failing.*resumes"):
        call_command("sync_queue", "--full")


def test_it_runs_a_full_sync_first_when_there_is_no_high_water_mark(fake_github):
    _queue(fake_github, 2)
    fake_github.add_issue(3, labels=["oncall: pt2"])
    fake_github.move_issue(3, "pytorch/vision")  # transferred: listed here, in the other repository

    report = sync_queue(on_changed=issues_changed)

    assert report.mode == "full (first)"
    assert Issue.objects.count() == 2
    assert (report.issues_fetched, report.transferred) == (3, 1) and "1 deleted or transferred" in report.summary()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_it_syncs_from_the_beat_task_in_the_worker(fake_github, celery_worker_process):
    from rubric_app.tasks import sync_queue_task

    _queue(fake_github, 3, comments=1)

    sync_queue_task.delay(full=True)

    wait_until(lambda: SyncState.objects.filter(key=FULL_KEY, last_full_sync_at__isnull=False).exists(), timeout=60)
    assert Issue.objects.count() == 3 and Comment.objects.count() == 3


def test_it_skips_a_sync_while_another_holds_the_claim_and_takes_over_a_dead_one(fake_github):
    _queue(fake_github, 3)
    SyncState.objects.create(key=LOCK_KEY, running_since=timezone.now())

    skipped = sync_queue(on_changed=issues_changed, full=True)

    assert skipped.skipped and "skipped" in skipped.summary()
    assert fake_github.requests == [] and not Issue.objects.exists()
    # A claim older than the lease belongs to a worker that died mid-sync: the next sync takes over.
    SyncState.objects.filter(key=LOCK_KEY).update(running_since=timezone.now() - SYNC_LEASE - timedelta(minutes=1))
    report = sync_queue(on_changed=issues_changed, full=True)
    assert not report.skipped and Issue.objects.count() == 3
    assert SyncState.objects.get(key=LOCK_KEY).running_since is None  # released for the next one


def test_it_releases_the_claim_when_github_fails(fake_github):
    _queue(fake_github, 1)
    fake_github.inject("malformed_json", path=r"/issues$", times=3)
    with pytest.raises(github.MalformedResponse):
        sync_queue(on_changed=issues_changed, full=True)
    assert SyncState.objects.get(key=LOCK_KEY).running_since is None


def test_it_makes_an_unknown_hand_off_label_a_finding_on_that_issue_not_a_crash_of_the_full_sync(fake_github):
    """Issue 35: one issue whose hand-off label (oncall: export) is missing from the repository's catalog raised
    StopIteration in the engine and stopped the whole full sync."""
    _queue(fake_github, 2, start=3601)
    fake_github.add_issue(
        3610,
        title="torch.export.export fails on an unflattened module",
        body="ep = torch.export.export(m, args) raises a KeyError in a FakeTensor.",
        labels=["oncall: pt2"],
    )
    _queue(fake_github, 2, start=3620)
    assert "oncall: export" not in fake_github.labels

    report = sync_queue(on_changed=issues_changed, full=True)

    assert report.issues_changed == 5
    assert not Issue.objects.filter(suggestions_updated_at__isnull=True).exists()
    handoff = Issue.objects.get(number=3610)
    assert handoff.suggested_route == "handoff"
    [item] = [c for c in handoff.checklist if c["rule_id"] == "G5"]
    assert item["state"] == "needs_human" and "not in the repository's label catalog" in item["text"]
