"""Sync the oncall: pt2 queue from GitHub into the local mirror (a webhook delivery is events.py's).

Full sync: the label catalog, then every open issue of each queue label
(settings.GITHUB_QUEUE_LABELS), 100 a page, oldest first, following Link
headers; comments only for issues whose comment count or updated_at changed.
The next page's URL is saved after each page, so an interrupted sync resumes
there: a page is stored in one transaction, and storing is an upsert, so a
page seen twice leaves no duplicate and none is skipped. At the end, issues
that were in the queue but not listed are re-read one by one and marked
in_queue=False if they left (closed, relabelled); they are never deleted.

Incremental sync: the repo's issues updated since the high-water mark (any
state, any label, so that closing and relabelling are seen too), with the
first page's ETag: when nothing changed GitHub answers 304 and the sync costs
one request and no rate limit. Every DEPARTURE_CHECK_MINUTES it also lists the
open queue and re-reads the queued issues it no longer shows (deleted or
transferred away: no `since` listing shows those).

Pages are stored by github/mirror.py (store_issues): never older data over newer, deleted or transferred issues
tombstoned, never put back by a late webhook; but GitHub showing one in this repository's queue again (a listing
confirmed by a read of the issue, or a read of the issue itself) does, whatever the stamps. Each sync reads again the
issues tombstoned since the last.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from urllib.parse import parse_qs, urlsplit

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from rubric_app.github import client as github
from rubric_app.github import connect, skill_files
from rubric_app.github.mirror import SyncReport, bury, confirm_labels, skipped_rows, store_issues, sync_labels
from rubric_app.models import Issue, SyncState

log = logging.getLogger(__name__)

FULL_KEY = "queue:full"
INCREMENTAL_KEY = "queue:incremental"
DEPARTURES_KEY = "queue:departures"
TOMBSTONES_KEY = "queue:tombstones"
LOCK_KEY = "queue:lock"
# Longer than any sync should take; a claim this old belongs to a worker that died mid-sync.
SYNC_LEASE = timedelta(hours=1)
# How long a departure re-read answered 404 waits before asking again (_read_departed).
DEPARTURE_RECHECK_S = 1.0


# --- the syncs ---------------------------------------------------------------------------------


def sync_queue(
    *,
    full: bool = False,
    gh: github.Client | None = None,
    on_changed: Callable[[list[int], str], None] | None = None,
) -> SyncReport:
    """Sync the queue (full: every page; else since the high-water mark). Returns a SyncReport.

    Raises github.GitHubError (e.g. RateLimited) when GitHub stays unusable; what was
    stored so far stays, and the next run resumes from the saved point.
    on_changed(issue_ids, cause): told after each stored page (see SyncReport.on_changed).
    Only one sync runs at a time: while another holds the claim, this one returns at once
    with report.skipped set and makes no request.
    """
    report = SyncReport(mode="full" if full else "incremental", on_changed=on_changed)
    if not _claim_sync():
        report.skipped = True
        log.info("%s", report.summary())
        return report
    try:
        gh, started = gh or connect.client(), timezone.now()
        # The triage skill first: its catalog and the latest release decide this sync's suggestions.
        report.skill_changed = skill_files.sync_skill(gh).changed
        _sync(full=full, gh=gh, report=report)
        if report.skill_changed and report.on_changed is not None:
            # Every queued issue follows the new skill; those this sync refreshed already do.
            older = Q(suggestions_updated_at__lt=started) | Q(suggestions_updated_at=None)
            report.changed(list(Issue.objects.in_queue().filter(older).values_list("pk", flat=True)), "skill")
        return report
    finally:
        SyncState.objects.filter(key=LOCK_KEY).update(running_since=None)


def _sync(*, full: bool, gh: github.Client, report: SyncReport) -> SyncReport:
    """sync_queue's work, under the claim the caller holds."""
    state, _ = SyncState.objects.get_or_create(key=FULL_KEY if full else INCREMENTAL_KEY)
    try:
        report.lost_labels += confirm_labels(gh)
        if full:
            _full_sync(gh, state, report)
        else:
            _incremental_sync(gh, state, report)
        report.lost_labels += confirm_labels(gh)  # the labels this sync's listings showed on issues again
        report.changed(sorted(set(report.lost_labels)), "label gone")
    except github.GitHubError as exc:
        state.last_error = f"{exc.__class__.__name__}: {exc.message}"
        state.last_requests, state.skipped = gh.requests_made, skipped_rows(report.skipped_issues)
        state.save(update_fields=["last_error", "last_requests", "skipped"])
        raise
    report.requests, report.not_modified = gh.requests_made, gh.not_modified
    state.last_requests, state.last_error, state.last_finished_at = gh.requests_made, "", timezone.now()
    state.skipped = skipped_rows(report.skipped_issues)
    state.save(update_fields=["last_requests", "last_error", "last_finished_at", "skipped"])
    log.info("%s", report.summary())
    return report


def _claim_sync() -> bool:
    """Take the one sync claim with a conditional UPDATE; False when another sync holds it."""
    SyncState.objects.get_or_create(key=LOCK_KEY)
    now = timezone.now()
    return bool(
        SyncState.objects.filter(key=LOCK_KEY)
        .filter(Q(running_since__isnull=True) | Q(running_since__lt=now - SYNC_LEASE))
        .update(running_since=now)
    )


def _store_page(page: github.Page, gh: github.Client, report: SyncReport) -> None:
    report.skipped_issues += page.skipped
    changed = store_issues(page.items, gh=gh, report=report)
    report.issues_fetched += len(page.items)
    report.changed(changed)


def _full_sync(gh: github.Client, state: SyncState, report: SyncReport) -> None:
    labels = list(settings.GITHUB_QUEUE_LABELS)
    start_index, url = 0, ""
    if state.resume_url:
        report.resumed = True
        url = state.resume_url
        resumed_label = parse_qs(urlsplit(url).query).get("labels", [""])[0]
        start_index = labels.index(resumed_label) if resumed_label in labels else 0
    else:
        state.last_started_at = timezone.now()
        state.save(update_fields=["last_started_at"])
        report.labels_synced = sync_labels(gh, report)
    high_water = state.high_water_mark
    for index in range(start_index, len(labels)):
        url = url or gh.issues_url(label=labels[index], state="open", sort="created")
        restarted = False
        while url:
            try:
                page = gh.issues_page(url)
            except github.PageGone:
                # The listing changed under us (issues closed or relabelled): list it again
                # from the start, once; upserts make the pages seen twice harmless.
                if restarted:
                    raise
                restarted, url = True, gh.issues_url(label=labels[index], state="open", sort="created")
                continue
            _store_page(page, gh, report)
            if page.items:
                newest = max(i.updated_at for i in page.items)
                high_water = max(high_water, newest) if high_water else newest
            url = page.next_url
            # Where to resume if interrupted now: the next page, or the next label's first page.
            if url:
                state.resume_url = url
            elif index + 1 < len(labels):
                state.resume_url = gh.issues_url(label=labels[index + 1], state="open", sort="created")
            else:
                state.resume_url = ""
            state.high_water_mark = high_water
            state.save(update_fields=["resume_url", "high_water_mark"])
    _mark_departures(gh, state.last_started_at, report)
    state.resume_url, state.last_full_sync_at = "", timezone.now()
    state.save(update_fields=["resume_url", "last_full_sync_at"])
    incremental, _ = SyncState.objects.get_or_create(key=INCREMENTAL_KEY)
    if high_water and (incremental.high_water_mark is None or high_water > incremental.high_water_mark):
        incremental.high_water_mark = high_water
        incremental.save(update_fields=["high_water_mark"])


def _mark_departures(gh: github.Client, started_at: datetime, report: SyncReport) -> None:
    """Re-read each queued issue the listing did not show since started_at, to learn why it left; the departures are
    then checked until the next DEPARTURE_CHECK_MINUTES (_check_departures)."""
    missing = Issue.objects.filter(in_queue=True).exclude(last_synced_at__gte=started_at)
    for number, stamp in list(missing.values_list("number", "updated_at")):
        try:
            data = _read_departed(gh, number)
        except github.PageGone as exc:  # deleted or transferred: it left, but the row stays, tombstoned
            # As of GitHub's last stamp for it, never our clock: anything newer GitHub shows of it brings it back.
            bury(number, stamp, f"deleted or transferred (GitHub answered {exc.status})")
            report.gone, report.left_queue = report.gone + 1, report.left_queue + 1
            continue
        changed = store_issues([data], gh=gh, report=report, only_known_or_queued=False, read_one_by_one=True)
        report.changed(changed, "departure")
    SyncState.objects.update_or_create(key=DEPARTURES_KEY, defaults={"last_finished_at": timezone.now()})


def _read_departed(gh: github.Client, number: int) -> github.IssueData:
    """A departed issue read again; a 404 is asked once more after DEPARTURE_RECHECK_S, since GitHub answers a live
    issue 404 now and then (a replica behind): one stray answer must not bury it. PageGone when both say so."""
    try:
        return gh.issue(number)
    except github.PageGone:
        time.sleep(DEPARTURE_RECHECK_S)
        return gh.issue(number)


def _incremental_sync(gh: github.Client, state: SyncState, report: SyncReport) -> None:
    if state.high_water_mark is None:
        # Nothing to be incremental from: a full sync sets the mark.
        full = _sync(full=True, gh=gh, report=SyncReport(mode="full", on_changed=report.on_changed))
        report.mode = "full (first)"
        # Its counts, for the summary; what it left out is on the full sync's own state, and it followed up its own.
        counted = ["issues_fetched", "issues_changed", "comments_fetched", "left_queue", "labels_synced"]
        for name in [*counted, "transferred", "gone"]:
            setattr(report, name, getattr(full, name))
        return
    state.last_started_at = timezone.now()
    state.save(update_fields=["last_started_at"])
    since = state.high_water_mark
    page = gh.issues_page(gh.issues_url(state="all", since=since, sort="updated"), etag=state.etag)
    first_etag = page.etag
    while not page.not_modified:
        _store_page(page, gh, report)
        if page.items:
            # Sorted by updated_at, oldest first: everything up to this page's newest is stored.
            state.high_water_mark = max(state.high_water_mark, max(i.updated_at for i in page.items))
            state.save(update_fields=["high_water_mark"])
        if not page.next_url:
            break
        page = gh.issues_page(page.next_url)
    # The ETag only means something for the same `since`: keep it only when the mark did not move.
    state.etag = first_etag if state.high_water_mark == since else ""
    state.save(update_fields=["etag"])
    _recheck_tombstones(gh, report)
    _check_departures(gh, report)


def _recheck_tombstones(gh: github.Client, report: SyncReport) -> None:
    """Read again, once, each issue tombstoned since the previous sync (a webhook's `deleted` or `transferred`, a
    departure): a transfer undone or sent in error leaves the issue in this repository's queue, and no `since`
    listing shows it again (its updated_at does not move). One request each; none most of the time."""
    state, _ = SyncState.objects.get_or_create(key=TOMBSTONES_KEY)
    started = timezone.now()
    full = SyncState.objects.filter(key=FULL_KEY).values_list("last_started_at", flat=True).first()
    since = state.last_finished_at or full
    buried = Issue.objects.exclude(gone_at=None)
    buried = buried.filter(last_synced_at__gte=since) if since else buried.none()
    for number in list(buried.values_list("number", flat=True)):
        try:
            data = gh.issue(number)
        except github.PageGone:
            continue  # gone indeed
        changed = store_issues([data], gh=gh, report=report, only_known_or_queued=False, read_one_by_one=True)
        report.changed(changed, "departure")
    state.last_finished_at = started
    state.save(update_fields=["last_finished_at"])


def _check_departures(gh: github.Client, report: SyncReport) -> None:
    """Every DEPARTURE_CHECK_MINUTES: list the open queue (pages of 100, the unchanged issues cost nothing more) and
    re-read each queued issue it no longer shows. A `since` listing never shows an issue deleted or transferred
    away, so without this a missed webhook left it in the queue until a full sync by hand."""
    state, _ = SyncState.objects.get_or_create(key=DEPARTURES_KEY)
    started = timezone.now()
    if state.last_finished_at and started - state.last_finished_at < timedelta(
        minutes=settings.DEPARTURE_CHECK_MINUTES
    ):
        return
    # The catalog too: a label re-created on GitHub (its webhook missed) is back within the hour, not at a full sync.
    report.labels_synced = sync_labels(gh, report)
    for label in settings.GITHUB_QUEUE_LABELS:
        url = gh.issues_url(label=label, state="open", sort="created")
        while url:
            page = gh.issues_page(url)
            _store_page(page, gh, report)
            url = page.next_url
    _mark_departures(gh, started, report)
