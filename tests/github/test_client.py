"""rubric_app.github.client: plain data out, named exceptions, retries for reads only, no token in logs."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from rubric_app.github import client as github
from rubric_app.github import connect
from tests.fakegithub import TOKEN


@pytest.fixture
def gh(fake_github, settings) -> github.Client:
    settings.GITHUB_WRITE_INTERVAL = 0.01
    settings.GITHUB_TIMEOUT = 1
    return connect.client()


def test_it_returns_issues_as_plain_data(gh, fake_github):
    fake_github.add_issue(
        5,
        title="NaN with inductor",
        body="repro",
        labels=["oncall: pt2", "module: inductor"],
        comments=["same here"],
        user="alice",
    )
    fake_github.add_issue(6, pull_request=True)

    page = gh.issues_page(gh.issues_url(label="oncall: pt2"))

    issue, pr = page.items
    assert isinstance(issue, github.IssueData)
    assert (issue.number, issue.title, issue.body, issue.author, issue.comments_count) == (
        5,
        "NaN with inductor",
        "repro",
        "alice",
        1,
    )
    assert issue.label_names == ["module: inductor", "oncall: pt2"]
    assert issue.updated_at.tzinfo is UTC and not issue.is_pull_request
    assert pr.is_pull_request
    assert page.etag.startswith('W/"') and page.next_url == ""


def test_it_sends_if_none_match_and_reports_a_304(gh, fake_github):
    fake_github.add_issue(5)
    url = gh.issues_url(label="oncall: pt2")
    first = gh.issues_page(url)

    second = gh.issues_page(url, etag=first.etag)

    assert second.not_modified and second.items == []
    assert (gh.requests_made, gh.not_modified) == (2, 1)
    assert fake_github.requests[-1].status == 304


def test_it_reads_every_comment_page(gh, fake_github):
    fake_github.add_issue(5, comments=[f"c{i}" for i in range(230)])

    comments = gh.comments(5)

    assert [c.body for c in comments] == [f"c{i}" for i in range(230)]
    assert len(fake_github.requests_to(r"/comments$")) == 3


def test_it_raises_unavailable_when_5xx_outlasts_the_retries(gh, fake_github):
    fake_github.inject("error", path=r"/labels$", status=503, times=20)

    with pytest.raises(github.GitHubUnavailable, match="kept failing"):
        gh.labels()
    assert len(fake_github.requests_to(r"/labels$")) == 6  # the request and its 5 retries


def test_it_waits_longer_before_each_retry_as_github_retry_backoff_says(fake_github, settings):
    # The suite retries without waiting (tests/conftest.py); here the waits are real: 0, 2, 4, 8, 16 x 0.05 s.
    settings.GITHUB_RETRY_BACKOFF = 0.05
    fake_github.inject("error", path=r"/labels$", status=502, times=5)

    assert connect.client().labels() == []

    sent = [r.at for r in fake_github.requests_to(r"/labels$")]
    gaps = [later - earlier for earlier, later in zip(sent, sent[1:])]
    assert len(sent) == 6 and all(gap >= 0.95 * want for gap, want in zip(gaps, (0, 0.1, 0.2, 0.4, 0.8))), gaps
    assert sum(gaps) < 5, gaps  # not production's 0.25: 7.5 s in all


def test_it_raises_page_gone_for_a_missing_issue(gh, fake_github):
    with pytest.raises(github.PageGone) as caught:
        gh.issue(404404)
    assert caught.value.status == 404


def test_it_raises_rate_limited_when_the_reset_is_far(gh, fake_github):
    fake_github.add_issue(5)
    fake_github.inject("rate_limit_exhausted", path=r"/issues$", reset_in=3600)
    gh.issues_page(gh.issues_url())

    with pytest.raises(github.RateLimited) as caught:
        gh.issues_page(gh.issues_url())

    assert caught.value.reset_at > datetime.now(UTC)
    assert len(fake_github.requests) == 1  # it did not spend a request it knew would fail


def test_it_does_not_retry_a_write_that_timed_out(gh, fake_github):
    fake_github.add_issue(5)
    fake_github.inject("timeout", method="POST", delay=2.5)

    result = gh.add_label(5, "module: dynamo")

    assert (result.ok, result.status) == (False, None)
    assert "did not answer" in result.response
    assert len(fake_github.requests_to(r"/labels$", "POST")) == 1  # it may have landed: never repeated


def test_it_retries_a_write_refused_by_the_secondary_rate_limit(gh, fake_github):
    fake_github.add_issue(5)
    fake_github.inject("secondary_rate_limit", method="POST", retry_after=1)

    result = gh.add_label(5, "module: dynamo")

    assert result.ok and result.labels == ("module: dynamo", "oncall: pt2")
    first, second = fake_github.requests_to(r"/labels$", "POST")
    assert (first.status, second.status) == (403, 200) and second.at - first.at >= 0.95


def test_it_reports_a_refused_write_with_githubs_answer(gh, fake_github):
    fake_github.add_issue(5)
    fake_github.inject("error", method="DELETE", status=403, message="Resource not accessible by integration")

    result = gh.remove_label(5, "oncall: pt2")

    assert (result.action, result.target, result.status, result.ok) == ("remove_label", "oncall: pt2", 403, False)
    assert "Resource not accessible" in result.response


def test_it_quotes_label_names_in_urls(gh, fake_github):
    fake_github.add_issue(5, labels=["oncall: pt2", "module: a/b"])

    assert gh.remove_label(5, "module: a/b").ok
    assert fake_github.labels_of(5) == ["oncall: pt2"]


def test_it_never_logs_the_token(gh, fake_github, caplog):
    fake_github.add_issue(5, comments=["x"])
    fake_github.inject("secondary_rate_limit", path=r"/issues$", retry_after=1)
    fake_github.inject("error", method="POST", status=502)
    caplog.set_level(logging.DEBUG)

    gh.issues_page(gh.issues_url())
    gh.comments(5)
    gh.add_label(5, "module: dynamo")

    assert caplog.records  # something was logged ...
    assert TOKEN not in caplog.text  # ... but never the token
