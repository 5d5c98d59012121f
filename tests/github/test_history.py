"""History (rubric_app/github/history.py): every issue that carried a queue label, open or closed, backfilled through
PyGithub over HTTP from the fake GitHub, within its request budget, resumable after a kill, waiting out rate limits."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.urls import reverse

from rubric_app.github import history
from rubric_app.lanes import LANES
from rubric_app.models import Comment, Issue, LabelEvent, SyncState
from rubric_app.triage import metrics, similar
from rubric_app.triage.followups import issues_changed
from tests.fakegithub import TOKEN
from tests.helpers import ROOT, child_database_url, preview_duplicate, wait_until

START = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
TRACE = (
    "```\nTraceback (most recent call last):\n"
    '  File "/opt/conda/lib/python3.11/site-packages/torch/_inductor/lowering.py", line 2001, in constant_pad_nd\n'
    "    assert len(pad) % 2 == 0\n"
    "torch._inductor.exc.InductorError: LoweringException: AssertionError: expected a static pad amount\n```\n"
)


def seed(fake, count: int = 250, *, first: int = 1000) -> dict:
    """`count` issues of oncall: pt2 (a tenth oncall: cpu inductor), alternately open and closed, every third with
    two comments, every tenth bot-triaged (its label events are read), plus two pull requests and an issue
    transferred away that the listing still shows. Returns what the request budget counts."""
    with_comments = bot = 0
    for i in range(count):
        number = first + i
        labels = ["oncall: cpu inductor"] if i % 10 == 5 else ["oncall: pt2"]
        if i % 2:
            labels.append("triaged")
        if i % 10 == 3:
            labels.append("bot-triaged")
            bot += 1
        comments = [f"comment {number}.{k}" for k in range(2)] if i % 3 == 0 else []
        with_comments += bool(comments)
        fake.add_issue(
            number,
            title=f"history issue {number}",
            body=f"body of {number}",
            labels=labels,
            comments=comments,
            state="closed" if i % 2 else "open",
            state_reason="not_planned" if i % 4 == 1 else None,
            updated_at=START + timedelta(hours=i),
        )
    for number in (first + count, first + count + 1):
        fake.add_issue(number, labels=["oncall: pt2"], pull_request=True, updated_at=START)
    fake.add_issue(first + count + 2, labels=["oncall: pt2"], state="closed", updated_at=START)
    fake.move_issue(first + count + 2, "pytorch/vision")
    return {"issues": count, "with_comments": with_comments, "bot": bot}


def listing_pages(fake) -> list[tuple[str, str]]:
    return [(r.query.get("labels", ""), r.query.get("page", "1")) for r in fake.requests_to(r"/issues$")]


@pytest.mark.django_db
def test_it_backfills_closed_and_open_issues_within_the_request_budget(fake_github):
    counts = seed(fake_github)
    lines: list[str] = []

    report = history.sync_history(on_changed=issues_changed, out=lines.append)

    assert Issue.objects.count() == counts["issues"]  # no pull request, nothing transferred away
    assert report.pull_requests == 2 and report.transferred == 1
    closed = Issue.objects.filter(state="closed")
    assert closed.count() == 125 and not closed.filter(in_queue=True).exists()
    assert Issue.objects.get(number=1001).state_reason == "not_planned" and Issue.objects.get(number=1001).closed_at
    assert Issue.objects.filter(state="open", in_queue=True).count() == 125
    assert Comment.objects.count() == 2 * counts["with_comments"]
    assert LabelEvent.objects.filter(issue__number=1003).exists()
    # The budget: oncall: pt2 lists 228 items (3 pages), oncall: cpu inductor 25 (1 page); one comments request per
    # issue that has comments; the label events of the bot-triaged issues only. Nothing else.
    pages = listing_pages(fake_github)
    assert pages == [("oncall: pt2", "1"), ("oncall: pt2", "2"), ("oncall: pt2", "3"), ("oncall: cpu inductor", "1")]
    assert len(fake_github.requests_to(r"/comments$")) == counts["with_comments"]
    assert len(fake_github.requests_to(r"/events$")) == counts["bot"]
    assert report.requests == len(fake_github.requests) == 4 + counts["with_comments"] + counts["bot"]
    assert any("oncall: pt2 page 2 of 3" in line and "to go" in line for line in lines)
    state = SyncState.objects.get(key=history.BACKFILL_KEY)
    assert state.resume_url == "" and state.last_full_sync_at is not None

    # Again: what changed since the backfill started, per label. Nothing did: one page each, no comment read, and
    # with the ETags the run after costs a 304 per label.
    fake_github.requests.clear()
    again = history.sync_history(on_changed=issues_changed, out=lines.append)
    assert again.mode == "incremental" and again.stored == 0
    assert not fake_github.requests_to(r"/comments$") and not fake_github.requests_to(r"/events$")
    fake_github.requests.clear()
    third = history.sync_history(on_changed=issues_changed, out=lines.append)
    assert [r.status for r in fake_github.requests] == [304, 304] and third.not_modified == 2

    # A comment on a closed issue: its listing shows it, and only its comments are read again.
    fake_github.add_comment(1001, "fixed by #1234 in 2.6")
    fake_github.requests.clear()
    history.sync_history(on_changed=issues_changed, out=lines.append)
    assert [r.path.rsplit("/", 2)[-2] for r in fake_github.requests_to(r"/comments$")] == ["1001"]
    assert Issue.objects.get(number=1001).comments.filter(body__contains="2.6").exists()


@pytest.mark.django_db
def test_it_keeps_history_out_of_the_lanes_and_in_the_search_metrics_and_similar_issues(fake_github):
    fake_github.add_issue(501, title="pad lowering crash", body=TRACE, labels=["oncall: pt2"], updated_at=START)
    fake_github.add_issue(
        502,
        title="constant_pad_nd fails under inductor",
        body=TRACE,
        labels=["oncall: pt2", "module: inductor", "triaged"],
        state="closed",
        updated_at=START + timedelta(days=2),
    )
    history.sync_history(on_changed=issues_changed, out=lambda line: None)

    closed = Issue.objects.get(number=502)
    assert closed.queue_lanes() == []
    assert all(closed not in lane.filter(Issue.objects.in_queue()) for lane in LANES if not lane.per_user)
    assert set(Issue.objects.search("constant_pad_nd").values_list("number", flat=True)) == {501, 502}
    assert list(history.history_issues().search("inductor").values_list("number", flat=True)) == [502]
    weeks = metrics.queue_health(weeks=52, now=START + timedelta(days=7)).weeks
    assert sum(w.opened for w in weeks) == 2 and sum(w.closed for w in weeks) == 1
    assert [near.issue.number for near in similar.neighbours(Issue.objects.get(number=501))] == [502]


@pytest.mark.django_db
def test_it_waits_out_a_403_rate_limit_and_a_429_and_says_how_long(fake_github):
    seed(fake_github)
    fake_github.inject("rate_limited", path=r"/issues$", query={"page": "2"}, reset_in=2)
    fake_github.inject("too_many_requests", path=r"/issues/1003/comments$", retry_after=1)
    lines: list[str] = []
    started = time.monotonic()

    report = history.sync_history(on_changed=issues_changed, out=lines.append)

    assert time.monotonic() - started >= 3.0  # the waits were real: until the reset, then Retry-After
    assert Issue.objects.count() == 250 and report.waited_s >= 3.0
    page2 = [r for r in fake_github.requests_to(r"/issues$") if r.query.get("page") == "2"]
    assert [r.status for r in page2] == [403, 200] and page2[1].at - page2[0].at >= 2.0
    assert [r.status for r in fake_github.requests_to(r"/issues/1003/comments$")] == [429, 200]
    waits = [line for line in lines if "rate limit, waiting" in line]
    assert len(waits) == 2 and "GitHub answered 429" in waits[0] and "GitHub answered 403" in waits[1]
    assert "97 issues stored so far" in waits[1] and "about 2 pages (then the next label's)" in waits[1]


@pytest.mark.django_db
def test_it_leaves_the_hours_last_requests_to_the_queue(fake_github, settings):
    seed(fake_github, 40)
    settings.HISTORY_RATE_RESERVE = 3
    reset = int(time.time()) + 2
    fake_github.rate_limit_remaining, fake_github.rate_limit_reset = 6, reset
    lines: list[str] = []

    history.sync_history(on_changed=issues_changed, out=lines.append)

    assert Issue.objects.count() == 40
    sent = [r.at for r in fake_github.requests]
    # Three requests took the budget down to the reserve: the fourth waited for the reset, the rest followed.
    assert sent[2] < reset <= sent[3] and any("requests left until the reset" in x for x in lines)


@pytest.mark.django_db(transaction=True)
def test_it_resumes_a_killed_backfill_without_duplicates_or_requests_twice(fake_github):
    counts = seed(fake_github)
    fake_github.inject("timeout", path=r"/issues$", query={"page": "3"}, delay=30)
    env = {
        **os.environ,
        "DATABASE_URL": child_database_url(),
        "GITHUB_API_URL": fake_github.url,
        "GITHUB_TOKEN": TOKEN,
        "GITHUB_REPO": fake_github.repo,
    }
    proc = subprocess.Popen([sys.executable, "manage.py", "sync_history"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL)
    try:
        wait_until(lambda: any(r.query.get("page") == "3" for r in fake_github.requests_to(r"/issues$")), timeout=60)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    state = SyncState.objects.get(key=history.BACKFILL_KEY)
    assert "page=3" in state.resume_url and Issue.objects.count() == 197  # two pages less 2 PRs and 1 moved
    fetched_before = {r.path for r in fake_github.requests_to(r"/comments$")}
    fake_github.requests.clear()

    report = history.sync_history(
        on_changed=issues_changed, out=lambda line: None
    )  # the killed process's claim is taken over at once

    assert report.resumed and listing_pages(fake_github) == [("oncall: pt2", "3"), ("oncall: cpu inductor", "1")]
    assert Issue.objects.count() == counts["issues"] and Comment.objects.count() == 2 * counts["with_comments"]
    assert not fetched_before & {r.path for r in fake_github.requests_to(r"/comments$")}  # no comment read twice
    assert len(fetched_before) + len(fake_github.requests_to(r"/comments$")) == counts["with_comments"]


@pytest.mark.django_db
def test_it_skips_an_issue_transferred_after_its_page_was_listed(fake_github):
    seed(fake_github, 30)

    def transfer_first():
        with fake_github.lock:
            fake_github.transferred[1000] = ("pytorch/vision", "https://github.com/pytorch/vision/issues/1")
            del fake_github.issues[1000]

    fake_github.inject("race", path=r"/issues/1000/comments$", run=transfer_first)

    report = history.sync_history(on_changed=issues_changed, out=lambda line: None)

    assert report.gone == 1 and not Issue.objects.filter(number=1000).exists()
    assert Issue.objects.count() == 29


@pytest.mark.django_db
def test_it_restricts_a_backfill_to_issues_updated_since_a_date(fake_github):
    seed(fake_github, 30)
    out = []
    call_command("sync_history", "--since", "2025-03-02T09:00", stdout=_Lines(out))
    assert sorted(Issue.objects.values_list("number", flat=True)) == list(range(1024, 1030))
    assert all(r.query.get("since") == "2025-03-02T09:00:00Z" for r in fake_github.requests_to(r"/issues$"))
    assert "history backfill: 2 pages, 6 issues listed, 6 stored" in "".join(out)


def test_it_schedules_the_history_sync_when_there_is_a_token():
    code = "import triage_site.settings as s; print(s.CELERY_BEAT_SCHEDULE['sync-history']['task'])"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "GITHUB_TOKEN": "a-token"},
        capture_output=True,
        text=True,
    )
    assert result.stdout.strip() == "rubric_app.tasks.sync_history_task", result.stderr


class _Lines:
    def __init__(self, out: list[str]) -> None:
        self.out = out

    def write(self, text: str) -> None:
        self.out.append(text)

    def flush(self) -> None:
        pass


@pytest.mark.django_db
def test_it_leaves_the_queue_pages_queries_as_they_were(client, viewer, fake_github, django_assert_num_queries):
    client.force_login(viewer)
    fake_github.add_issue(1, title="in the queue", labels=["oncall: pt2"], updated_at=START)
    history.sync_history(on_changed=issues_changed, out=lambda line: None)
    # session, user, permissions (2), count, page of issues, labels, suggestions, failures shared: as without history.
    with django_assert_num_queries(9):
        before = client.get("/").content.decode()
    seed(fake_github)
    history.sync_history(on_changed=issues_changed, since=START - timedelta(days=1), out=lambda line: None)
    with django_assert_num_queries(9):
        after = client.get("/").content.decode()
    assert Issue.objects.count() == 251 and "126 issues" in after and "1 issue" in before


# --- closed originals ---------------------------------------------------------------------------------------------

HTMX = {"HX-Request": "true"}


@pytest.mark.django_db
def test_it_shows_a_closed_original_first_marked_closed_and_offers_it_as_the_duplicate(client, triager, fake_github):
    pad = "Padding under torch.compile with inductor fails in constant_pad_nd for a static pad amount.\n"
    fake_github.add_issue(
        610,
        title="constant_pad_nd lowering asserts",
        body=pad + TRACE,
        labels=["oncall: pt2", "module: inductor", "triaged"],
        state="closed",
        closed_at=datetime(2026, 3, 2, 15, 0, tzinfo=UTC),
        updated_at=datetime(2026, 3, 2, 15, 0, tzinfo=UTC),
    )
    fake_github.add_issue(611, title="pad crash again", body=pad + TRACE, labels=["oncall: pt2"], updated_at=START)
    fake_github.add_issue(
        612, title="constant_pad_nd static pad amount", body=pad, labels=["oncall: pt2"], updated_at=START
    )
    fake_github.add_issue(620, title="F.pad fails when compiled", body=TRACE, labels=["oncall: pt2"], updated_at=START)
    history.sync_history(on_changed=issues_changed, out=lambda line: None)
    client.force_login(triager)

    page = client.get(reverse("rubric_app:issue", args=[620])).content.decode()

    listed = re.findall(r'data-similar="(\d+)"', page)
    assert listed[:2] == ["610", "611"] and "612" in listed  # same signature, the closed one first; then text
    first = page[page.index('data-similar="610"') : page.index('data-similar="611"')]
    assert "closed as completed on 2026-03-02" in first and "same failure signature" in first
    # The possible-duplicate mark offers the closed original (before the open #611, a later report of the same
    # failure), and only there: no neighbour of the list offers to close it.
    mark = page[page.index("data-possible-duplicate=") : page.index('data-similar="610"')]
    assert 'data-possible-duplicate="610"' in mark and 'data-mark-duplicate="610"' in mark
    assert page.count("data-mark-duplicate=") == 1
    preview = preview_duplicate(client, 620, 610)
    assert 'data-close="duplicate"' in preview and "Duplicate of #610" in preview and "data-apply" in preview


# --- the history page ---------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_it_lists_and_searches_the_history_in_constant_queries(client, viewer, fake_github, django_assert_num_queries):
    fake_github.add_issue(701, title="dynamo guard failure on a closed report", state="closed", updated_at=START)
    fake_github.add_issue(702, title="still in the queue", labels=["oncall: pt2"], updated_at=START)
    history.sync_history(on_changed=issues_changed, out=lambda line: None)
    client.force_login(viewer)
    url = reverse("rubric_app:history")

    # session, user, permissions (2), count, page, labels
    with django_assert_num_queries(7):
        page = client.get(url).content.decode()
    assert 'data-history="701"' in page and 'data-history="702"' not in page and "closed as completed on" in page
    seed(fake_github, 120)
    history.sync_history(on_changed=issues_changed, since=START - timedelta(days=1), out=lambda line: None)
    with django_assert_num_queries(7):
        page = client.get(url, {"q": "guard"}).content.decode()
    assert re.findall(r'data-history="(\d+)"', page) == ["701"] and "best match first" in page

    fragment = client.get(url, {"q": "history issue"}, headers=HTMX).content.decode()
    assert "<html" not in fragment and 'id="history-table"' in fragment and "60 issues" in fragment
    queue = client.get(reverse("rubric_app:queue"), {"q": "guard"}).content.decode()
    assert "data-search-history" in queue  # the queue's search points at the history's


def test_it_keeps_the_history_from_outsiders(client, outsider):
    client.force_login(outsider)
    assert client.get(reverse("rubric_app:history")).status_code == 403
