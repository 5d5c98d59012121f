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
tombstoned, never put back by a late webhook.
"""

from __future__ import annotations

import logging
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
LOCK_KEY = "queue:lock"
# Longer than any sync should take; a claim this old belongs to a worker that died mid-sync.
SYNC_LEASE = timedelta(hours=1)


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
    for number in list(missing.values_list("number", flat=True)):
        try:
            data = gh.issue(number)
        except github.PageGone as exc:  # deleted or transferred: it left, but the row stays, tombstoned
            bury(number, timezone.now(), f"deleted or transferred (GitHub answered {exc.status})")
            report.gone, report.left_queue = report.gone + 1, report.left_queue + 1
            continue
        changed = store_issues([data], gh=gh, report=report, only_known_or_queued=False)
        report.changed(changed, "departure")
    SyncState.objects.update_or_create(key=DEPARTURES_KEY, defaults={"last_finished_at": timezone.now()})


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
    _check_departures(gh, report)


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
    for label in settings.GITHUB_QUEUE_LABELS:
        url = gh.issues_url(label=label, state="open", sort="created")
        while url:
            page = gh.issues_page(url)
            _store_page(page, gh, report)
            url = page.next_url
    _mark_departures(gh, started, report)
