"""The repository's history: every issue that carried a queue label, open or closed, mirrored from GitHub.

History is what the similar issues find a closed original in, what the search and the metrics count, and what
the learned labeler trains on (triage/model_store.py, train_label_model --from-db): pytorch/pytorch holds thousands of
triaged PT2 issues with whole label lists and threads.

History rows are Issue rows, not a model of their own: an issue that left the queue was already kept as a row
with in_queue=False, and the backfill only adds the ones the mirror never saw. So the queue's querysets
(IssueQuerySet.in_queue, for_queue, the lanes: in_queue and open, on the issue_queue_idx index), the search, the
similar issues' index (IssueTerm) and the metrics (every issue by created_at and closed_at) read them with no
new code and no new query, and an issue that returns to the queue is the same row. in_queue stays what
mirror.in_queue() says (open and carrying a queue label): a closed history issue is in no lane.

Backfill (manage.py sync_history, and the beat task in slices): for each queue label (GITHUB_QUEUE_LABELS), the
issues listing with state=all, 100 a page, oldest first by creation, a stable order while new issues arrive. Each
page is stored by mirror.store_issues (GitHub read first, then one transaction: upserts, never older data over newer,
comments only for an issue whose comment count or updated_at changed and that has comments, label events only where the
automation's labels need them: an unchanged issue costs no request beyond its share of the page), then the next
page's URL is saved (the cursor): a killed backfill resumes at the first page it had not stored, and nothing is
stored twice. Pull requests and issues transferred to another repository are skipped. The reads wait out
GitHub's rate limits (github.PacedClient) and leave HISTORY_RATE_RESERVE requests of each hour to the queue's sync
and the decisions, which share the token; each page and each wait print a progress line with an estimate.

Incremental (beat, once the backfill is done): per label, the issues updated since the last run, first page with
its ETag (a 304 when nothing changed: one request, no rate limit).

What a label listing cannot see: an issue whose queue label was removed before the backfill (handed off to
another oncall). The mirror keeps those it saw while they were in the queue; the others are not in history.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import parse_qs, urlsplit

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from rubric_app import processes
from rubric_app.github import client as github
from rubric_app.github import connect, mirror, repository_pairs
from rubric_app.github.data import parse_time
from rubric_app.models import Issue, SyncState

log = logging.getLogger(__name__)

BACKFILL_KEY = "history:backfill"
INCREMENTAL_PREFIX = "history:incremental:"
LOCK_KEY = "history:lock"
# Longer than a rate limit's reset (an hour) plus a page: the claim is renewed after each page and each wait.
LEASE = timedelta(hours=2)
# A token's requests an hour (GitHub's primary rate limit): what the estimates count a reset as giving back.
HOURLY_REQUESTS = 5000


@dataclass
class HistoryReport:
    """What one run did. requests counts HTTP requests (pages, comments, label events); waited_s the rate-limit
    waits; paused: the time budget ran out with the cursor saved; skipped: another run holds the claim."""

    mode: str = "backfill"
    pages: int = 0
    listed: int = 0
    stored: int = 0
    pull_requests: int = 0
    transferred: int = 0
    gone: int = 0
    skipped_issues: list[tuple[int | str, str]] = field(default_factory=list)  # (number, why) of issues left out
    comments_fetched: int = 0
    requests: int = 0
    not_modified: int = 0
    waited_s: float = 0.0
    resumed: bool = False
    paused: bool = False
    skipped: bool = False
    # What follows a change of issues (the caller's: triage/followups.issues_changed), told after each stored page.
    on_changed: Callable[[list[int], str], None] | None = field(default=None, repr=False, compare=False)

    def summary(self) -> str:
        if self.skipped:
            return "history sync skipped: another one holds the claim"
        return (
            f"history {self.mode}{' (resumed)' if self.resumed else ''}"
            f"{': paused at its time budget, the cursor saved' if self.paused else ''}: {self.pages} pages, "
            f"{self.listed} issues listed, {self.stored} stored, {self.pull_requests} pull requests and "
            f"{self.transferred + self.gone} transferred or deleted skipped, {self.comments_fetched} comments, "
            f"{self.requests} requests ({self.not_modified} answered 304), "
            f"{self.waited_s:.0f} s waited for the rate limit{mirror.skipped_issues(self.skipped_issues)}"
        )


class Progress:
    """The progress lines of a run: one per page and one per rate-limit wait, each with an estimate of what is left."""

    def __init__(self, report: HistoryReport, out: Callable[[str], None]) -> None:
        self.report, self.out = report, out
        self.started = time.monotonic()
        self.label, self.page, self.last, self.done = "", 0, None, 0
        self.gh: github.PacedClient | None = None

    def estimate(self) -> str:
        """Pages left (of this label's listing: its rel="last"), the requests they should take at this run's rate so
        far, and the time: at this run's pace, or until the budget comes back (its reset, then an hour a budget)
        when they need more than is left above the reserve."""
        if not self.last or not self.done:
            return "how much is left is known after the first page"
        gh, pages_left = self.gh, max(self.last - self.page, 0)
        requests_left = round(pages_left * gh.requests_made / self.done)
        seconds = (time.monotonic() - self.started - gh.waited_s) / self.done * pages_left
        if gh.rate_remaining is not None and gh.rate_reset:
            usable, per_hour = max(gh.rate_remaining - gh.reserve, 0), max(HOURLY_REQUESTS - gh.reserve, 1)
            if requests_left > usable:
                budgets = -(-(requests_left - usable) // per_hour)
                seconds = max(seconds, gh.rate_reset - time.time() + 3600 * (budgets - 1))
        more = " (then the next label's)" if self.label != settings.GITHUB_QUEUE_LABELS[-1] else ""
        pages = f"{pages_left} page{'' if pages_left == 1 else 's'}"
        return f"about {pages}{more} and {requests_left} requests to go, ~{_duration(seconds)}"

    def page_done(self) -> None:
        self.done += 1
        r, gh = self.report, self.gh
        left = f"; {gh.rate_remaining} requests left this hour" if gh.rate_remaining is not None else ""
        of = f" of {self.last}" if self.last else ""
        self.out(
            f"history: {self.label} page {self.page}{of}: {r.listed} issues listed, {r.stored} stored, "
            f"{gh.requests_made} requests{left}; {self.estimate()}"
        )

    def waiting(self, seconds: float, why: str) -> None:
        _renew_claim()
        until = timezone.localtime(timezone.now() + timedelta(seconds=seconds))
        self.out(
            f"history: rate limit, waiting {_duration(seconds)} (until {until:%H:%M:%S}): {why}; "
            f"{self.report.stored} issues stored so far; {self.estimate()}"
        )


def _duration(seconds: float) -> str:
    seconds = max(seconds, 0)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def sync_history(
    *,
    since: datetime | None = None,
    restart: bool = False,
    budget_s: float | None = None,
    gh: github.PacedClient | None = None,
    out: Callable[[str], None] = log.info,
    sleep: Callable[[float], None] = time.sleep,
    on_changed: Callable[[list[int], str], None] | None = None,
) -> HistoryReport:
    """Backfill history, or keep it current; returns a HistoryReport.

    A backfill under way resumes at its cursor (restart: from the first page); none done yet, or `since` given
    (issues updated since then, GitHub's `since`), starts one; else the incremental run. budget_s: stop after
    about this long with the cursor saved (the beat task's slices); None runs to the end. Only one run at a time:
    while another holds the claim this one returns at once with report.skipped (a killed run's claim is taken
    over). Raises github.GitHubError when GitHub stays unusable (not for rate limits: those are waited out); what
    was stored stays, and the next run resumes from the cursor. on_changed(issue_ids, "history"): told after each
    stored page.
    """
    report = HistoryReport(on_changed=on_changed)
    if not _claim():
        report.skipped = True
        out(report.summary())
        return report
    progress = Progress(report, out)
    try:
        gh = gh or connect.paced_client(sleep=sleep, on_wait=progress.waiting, reserve=settings.HISTORY_RATE_RESERVE)
        progress.gh = gh
        state, _ = SyncState.objects.get_or_create(key=BACKFILL_KEY)
        if restart:
            state.resume_url = ""
        try:
            if state.resume_url or since is not None or state.last_full_sync_at is None:
                _backfill(gh, state, since, budget_s, progress)
            else:
                report.mode = "incremental"
                _incremental(gh, progress)
        except github.GitHubError as exc:
            state.last_error = f"{exc.__class__.__name__}: {exc.message}"
            state.last_requests, state.skipped = gh.requests_made, _skipped(state, report)
            state.save(update_fields=["last_error", "last_requests", "skipped"])
            raise
        report.requests, report.not_modified, report.waited_s = gh.requests_made, gh.not_modified, gh.waited_s
        state.last_requests, state.last_error, state.last_finished_at = gh.requests_made, "", timezone.now()
        state.skipped = _skipped(state, report)
        state.save(update_fields=["last_requests", "last_error", "last_finished_at", "skipped"])
    finally:
        SyncState.objects.filter(key=LOCK_KEY, holder=processes.this_process()).update(running_since=None, holder="")
    out(report.summary())
    return report


def _skipped(state: SyncState, report: HistoryReport) -> list[dict]:
    """The issues left out, as SyncState.skipped keeps them: a resumed backfill's add to its earlier slices'."""
    earlier = state.skipped if report.resumed else []
    return (earlier + mirror.skipped_rows(report.skipped_issues))[:100]


def _claim() -> bool:
    """Take the history claim (a conditional UPDATE): free, past its lease, or held by a process of this host that
    is gone (a killed backfill)."""
    SyncState.objects.get_or_create(key=LOCK_KEY)
    now, me = timezone.now(), processes.this_process()
    free = Q(running_since__isnull=True) | Q(running_since__lt=now - LEASE)
    if SyncState.objects.filter(key=LOCK_KEY).filter(free).update(running_since=now, holder=me):
        return True
    held = SyncState.objects.filter(key=LOCK_KEY).values_list("holder", flat=True).first() or ""
    here = socket.gethostname()
    # Another host's holder is judged by the lease alone: this host cannot see its processes.
    if (processes.holder(held) or ("",))[0] == here and processes.is_dead(held, set(), here):
        return bool(SyncState.objects.filter(key=LOCK_KEY, holder=held).update(running_since=now, holder=me))
    return False


def _renew_claim() -> None:
    SyncState.objects.filter(key=LOCK_KEY, holder=processes.this_process()).update(running_since=timezone.now())


def _label_of(url: str) -> str:
    return parse_qs(urlsplit(url).query).get("labels", [""])[0]


def _since_of(url: str) -> datetime | None:
    value = parse_qs(urlsplit(url).query).get("since", [""])[0]
    return parse_time(value) if value else None


def _backfill(
    gh: github.PacedClient, state: SyncState, since: datetime | None, budget_s: float | None, progress: Progress
) -> None:
    """Every page of every queue label's state=all listing from the cursor on; the cursor saved after each page."""
    report, labels = progress.report, list(settings.GITHUB_QUEUE_LABELS)
    started = time.monotonic()
    if state.resume_url:
        report.resumed, url = True, state.resume_url
        since = _since_of(url)
        first = labels.index(_label_of(url)) if _label_of(url) in labels else 0
    else:
        state.last_started_at = timezone.now()
        state.save(update_fields=["last_started_at"])
        first, url = 0, gh.issues_url(label=labels[0], state="all", since=since, sort="created")
    for index in range(first, len(labels)):
        progress.label = labels[index]
        url = url or gh.issues_url(label=labels[index], state="all", since=since, sort="created")
        while url:
            page = gh.issues_page(url)
            progress.page = int(parse_qs(urlsplit(url).query).get("page", ["1"])[0])
            progress.last = connect.last_page(gh.last_link) or progress.last or progress.page
            store_page(page, gh, report)
            url = page.next_url
            if url:
                state.resume_url = url
            elif index + 1 < len(labels):
                state.resume_url = gh.issues_url(label=labels[index + 1], state="all", since=since, sort="created")
            else:
                state.resume_url = ""
            state.save(update_fields=["resume_url"])
            _renew_claim()
            progress.page_done()
            if budget_s is not None and state.resume_url and time.monotonic() - started >= budget_s:
                report.paused = True
                return
        progress.last = None
    state.last_full_sync_at = timezone.now()
    state.save(update_fields=["last_full_sync_at"])
    refresh_statistics()
    # What changed while the backfill walked the listing is the incremental runs' from its start on.
    for label in labels:
        mark, _ = SyncState.objects.get_or_create(key=INCREMENTAL_PREFIX + label)
        if mark.high_water_mark is None or mark.high_water_mark < state.last_started_at:
            mark.high_water_mark, mark.etag = state.last_started_at, ""
            mark.save(update_fields=["high_water_mark", "etag"])


def _incremental(gh: github.PacedClient, progress: Progress) -> None:
    """Per queue label, the issues updated since its mark (any state), first page with its ETag."""
    report = progress.report
    for label in settings.GITHUB_QUEUE_LABELS:
        progress.label = label
        state, _ = SyncState.objects.get_or_create(key=INCREMENTAL_PREFIX + label)
        mark = state.high_water_mark
        state.last_started_at = timezone.now()
        state.save(update_fields=["last_started_at"])
        page = gh.issues_page(gh.issues_url(label=label, state="all", since=mark, sort="updated"), etag=state.etag)
        first_etag = page.etag
        while not page.not_modified:
            store_page(page, gh, report)
            if page.items:  # sorted by updated_at, oldest first: everything up to this page's newest is stored
                newest = max(i.updated_at for i in page.items)
                state.high_water_mark = max(state.high_water_mark, newest) if state.high_water_mark else newest
                state.save(update_fields=["high_water_mark"])
            if not page.next_url:
                break
            page = gh.issues_page(page.next_url)
        # The ETag only means something for the same `since`: kept only while the mark did not move.
        state.etag = first_etag if state.high_water_mark == mark else ""
        state.last_finished_at = timezone.now()
        state.save(update_fields=["etag", "last_finished_at"])


def store_page(page: github.Page, gh: github.PacedClient, report: HistoryReport) -> list[int]:
    """Store one listing page (mirror.store_issues: GitHub read first, then one transaction); returns the ids of the
    issues that changed.

    What follows is report.on_changed's (triage/followups.py: the queue issues' suggestions refreshed, the history
    ones reindexed for similar issues). Issues listed in another repository (transferred), or whose comments answer
    404 (transferred or deleted since the page was listed), are left out (tombstoned where the mirror has them); an
    issue the database refuses is left out with the reason; the rest of the page is stored.
    """
    report.pages += 1
    report.skipped_issues += page.skipped
    report.listed += len(page.items)
    report.pull_requests += sum(1 for i in page.items if i.is_pull_request)
    counts = mirror.SyncReport(mode="history", on_changed=report.on_changed)
    changed = mirror.store_issues(page.items, gh=gh, report=counts, only_known_or_queued=False)
    report.stored += counts.issues_changed
    report.comments_fetched += counts.comments_fetched
    report.transferred, report.gone = report.transferred + counts.transferred, report.gone + counts.gone
    report.skipped_issues += counts.skipped_issues
    # The repository's own duplicate pairs (the mark's calibration): the timeline is read only for the issues GitHub
    # closed as duplicates (one request each), the threads of the others are already stored.
    closed_as_duplicates = [i.number for i in page.items if i.state_reason == "duplicate" and not i.is_pull_request]
    stored = set(Issue.objects.filter(pk__in=changed, number__in=closed_as_duplicates).values_list("number", flat=True))
    repository_pairs.record(changed, {number: gh.duplicate_events(number) for number in sorted(stored)})
    counts.changed(changed, "history")
    return changed


def refresh_statistics() -> None:
    """After a backfill, on SQLite: ANALYZE, so that its planner knows the queue is a few of the issues (it starts
    from the queue's partial index, issue_open_queue_idx, instead of scanning every issue's signature: the queue page
    3x slower with 20,000 history issues). PostgreSQL's autovacuum analyzes a table that grew by itself."""
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")


def history_issues():
    """The issues of history that are in no lane of the queue: closed, or open but no longer carrying a queue label."""
    return Issue.objects.filter(is_pull_request=False).exclude(in_queue=True, state=Issue.State.OPEN)


# What a list of history issues shows of each (the history page).
LISTED = ("number", "title", "state", "state_reason", "closed_at", "updated_at", "in_queue", "html_url")
