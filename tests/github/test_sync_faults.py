"""The sync survives GitHub's faults: it finishes, stores no duplicate, leaves a consistent state."""

from __future__ import annotations

import time

import pytest

from rubric_app.github import client as github
from rubric_app.github.sync import FULL_KEY, sync_queue
from rubric_app.models import Comment, Issue, SyncState

pytestmark = pytest.mark.django_db


@pytest.fixture
def queue(fake_github):
    """250 queued issues, one comment each: three list pages."""
    for number in range(1, 251):
        fake_github.add_issue(number, title=f"issue {number}", comments=[f"comment on {number}"])
    return fake_github


def _assert_complete(count: int = 250) -> None:
    assert sorted(Issue.objects.values_list("number", flat=True)) == list(range(1, count + 1))
    assert Comment.objects.count() == count
    assert Issue.objects.filter(in_queue=True).count() == count
    assert SyncState.objects.get(key=FULL_KEY).resume_url == ""


@pytest.mark.parametrize("status", [502, 503])
def test_it_retries_a_5xx_answer_and_finishes(queue, status):
    queue.inject("error", path=r"/issues$", query={"page": "2"}, status=status, times=2)

    sync_queue(full=True)

    _assert_complete()
    statuses = [r.status for r in queue.requests_to(r"/issues$") if r.query.get("page") == "2"]
    assert statuses == [status, status, 200]


def test_it_retries_a_comment_page_answered_502(queue):
    queue.inject("error", path=r"/issues/7/comments$", status=502)

    sync_queue(full=True)

    _assert_complete()
    assert Issue.objects.get(number=7).comments.count() == 1


def test_it_retries_after_a_timeout(queue, settings):
    settings.GITHUB_TIMEOUT = 1
    queue.inject("timeout", path=r"/issues$", query={"page": "2"}, delay=2.5)

    sync_queue(full=True)

    _assert_complete()
    assert len([r for r in queue.requests_to(r"/issues$") if r.query.get("page") == "2"]) == 2


def test_it_backs_off_for_the_retry_after_of_a_secondary_rate_limit(queue):
    queue.inject("secondary_rate_limit", path=r"/issues$", query={"page": "2"}, retry_after=1)

    sync_queue(full=True)

    _assert_complete()
    first, second = [r for r in queue.requests_to(r"/issues$") if r.query.get("page") == "2"]
    assert first.status == 403 and second.status == 200
    assert second.at - first.at >= 0.95  # honoured Retry-After: 1


def test_it_waits_for_the_reset_when_the_rate_limit_is_spent(queue):
    queue.inject("rate_limit_exhausted", path=r"/issues$", query={"page": "2"}, reset_in=1)
    started = time.monotonic()

    sync_queue(full=True)

    _assert_complete()
    assert time.monotonic() - started >= 1.0
    page2 = [r for r in queue.requests_to(r"/issues$") if r.query.get("page") == "2"]
    page3 = [r for r in queue.requests_to(r"/issues$") if r.query.get("page") == "3"]
    assert page3[0].at - page2[0].at >= 0.9  # no request went out before the reset


def test_it_stops_with_a_resume_point_when_the_reset_is_far(queue):
    queue.inject("rate_limit_exhausted", path=r"/issues$", query={"page": "2"}, reset_in=3600)

    with pytest.raises(github.RateLimited):
        sync_queue(full=True)

    # Page 2 arrived with the budget spent, so its comments could not be read: the page is
    # stored as one transaction, so it is rolled back whole and is where the next run resumes.
    state = SyncState.objects.get(key=FULL_KEY)
    assert "page=2" in state.resume_url and "rate limit" in state.last_error
    assert Issue.objects.count() == 100
    queue.requests.clear()
    sync_queue(full=True)
    _assert_complete()
    assert [r.query.get("page") for r in queue.requests_to(r"/issues$")][:2] == ["2", "3"]


def test_it_retries_a_malformed_json_answer(queue):
    queue.inject("malformed_json", path=r"/issues$", query={"page": "2"})

    sync_queue(full=True)

    _assert_complete()


def test_it_stops_cleanly_when_json_stays_malformed_and_resumes_later(queue):
    queue.inject("malformed_json", path=r"/issues$", query={"page": "3"}, times=3)

    with pytest.raises(github.MalformedResponse):
        sync_queue(full=True)

    assert Issue.objects.count() == 200
    assert "page=3" in SyncState.objects.get(key=FULL_KEY).resume_url
    sync_queue(full=True)
    _assert_complete()


def test_it_survives_a_page_that_disappears_mid_pagination(queue):
    sync_queue(full=True)
    # While the next sync paginates, someone closes the 50 issues of page 3.
    queue.inject("vanish_page", path=r"/issues$", query={"page": "3"})

    sync_queue(full=True)

    assert Issue.objects.count() == 250  # nothing deleted, nothing duplicated
    assert Issue.objects.filter(in_queue=True).count() == 200
    assert set(Issue.objects.filter(in_queue=False).values_list("state", flat=True)) == {"closed"}
    assert SyncState.objects.get(key=FULL_KEY).resume_url == ""


def test_it_lists_again_when_a_page_answers_404_mid_pagination(queue):
    queue.inject("error", path=r"/issues$", query={"page": "2"}, status=404, message="Not Found")

    sync_queue(full=True)

    _assert_complete()
    pages = [r.query.get("page") for r in queue.requests_to(r"/issues$") if "oncall: pt2" in r.query.get("labels", "")]
    assert pages == [None, "2", None, "2", "3"]  # restarted once from the first page
