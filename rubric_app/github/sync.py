"""Sync the oncall: pt2 queue from GitHub into the local mirror, and apply webhook deliveries.

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
one request and no rate limit.

Everywhere: an issue is only overwritten by data with a newer updated_at.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from urllib.parse import parse_qs, urlsplit

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from rubric_app.github import client as github
from rubric_app.github import connect, skill_files
from rubric_app.models import Comment, Issue, Label, LabelEvent, SyncState
from rubric_app.vocabulary import HIGH_PRIORITY, TRIAGE_REVIEW, allowed_for_triage, is_automation_label

log = logging.getLogger(__name__)

FULL_KEY = "queue:full"
INCREMENTAL_KEY = "queue:incremental"
LOCK_KEY = "queue:lock"
# Longer than any sync should take; a claim this old belongs to a worker that died mid-sync.
SYNC_LEASE = timedelta(hours=1)
ISSUE_FIELDS = [
    "repo",
    "title",
    "body",
    "state",
    "author",
    "html_url",
    "is_pull_request",
    "created_at",
    "updated_at",
    "comments_count",
    "in_queue",
    "last_synced_at",
    "review_flagged_at",
    "closed_at",
    "state_reason",
]


def needs_label_events(label_names) -> bool:
    """Whether an issue's label events are worth a request: it carries PyTorch automation's labels, or `high priority`
    (G12.2 asks whether a human added it)."""
    return any(is_automation_label(n) or n == HIGH_PRIORITY for n in label_names)


@dataclass
class SyncReport:
    """What one sync did. `requests` counts our HTTP requests; `not_modified` those answered 304."""

    mode: str
    issues_fetched: int = 0
    issues_changed: int = 0
    comments_fetched: int = 0
    left_queue: int = 0
    labels_synced: int = 0
    requests: int = 0
    not_modified: int = 0
    resumed: bool = False
    skipped: bool = False
    skill_changed: bool = False  # the triage skill's files or the latest release changed (skill_files)
    # What follows a change of issues (the caller's: triage/followups.issues_changed), told after each stored page
    # which issues changed and why ("sync", "departure", "skill"); None: nothing follows (the benchmark times the
    # sync alone).
    on_changed: Callable[[list[int], str], None] | None = field(default=None, repr=False, compare=False)

    def changed(self, issue_ids: list[int], cause: str = "sync") -> None:
        if self.on_changed is not None and issue_ids:
            self.on_changed(issue_ids, cause)

    def summary(self) -> str:
        if self.skipped:
            return f"{self.mode} sync skipped: another sync is running"
        return (
            f"{self.mode} sync{' (resumed)' if self.resumed else ''}: {self.issues_fetched} issues fetched, "
            f"{self.issues_changed} changed, {self.left_queue} left the queue, {self.comments_fetched} comments, "
            f"{self.labels_synced} labels, {self.requests} requests ({self.not_modified} answered 304)"
        )


def in_queue(data: github.IssueData) -> bool:
    """Open, not a PR, and labelled with one of the queue labels."""
    names = {label.name for label in data.labels}
    return data.state == "open" and not data.is_pull_request and bool(names & set(settings.GITHUB_QUEUE_LABELS))


# --- storing ---------------------------------------------------------------------------------


def sync_labels(gh: github.Client) -> int:
    """Mirror the repo's label catalog; returns how many labels GitHub has.

    allowed_for_triage = in the triage skill's catalog in use (skill_files) and not forbidden by G7;
    labels GitHub no longer has keep their row with in_catalog=False.
    """
    remote = gh.labels()
    allowed = skill_files.in_use().names()
    existing = {label.name: label for label in Label.objects.all()}
    with transaction.atomic():
        for data in remote:
            ok = allowed_for_triage(data.name, allowed)
            label = existing.get(data.name)
            if label is None:
                Label.objects.create(
                    name=data.name,
                    color=data.color,
                    description=data.description,
                    allowed_for_triage=ok,
                    in_catalog=True,
                )
            elif (label.color, label.description, label.allowed_for_triage, label.in_catalog) != (
                data.color,
                data.description,
                ok,
                True,
            ):
                label.color, label.description, label.allowed_for_triage, label.in_catalog = (
                    data.color,
                    data.description,
                    ok,
                    True,
                )
                label.save(update_fields=["color", "description", "allowed_for_triage", "in_catalog"])
        Label.objects.exclude(name__in=[d.name for d in remote]).update(in_catalog=False)
    return len(remote)


def _label_ids(labels) -> dict[str, int]:
    """Label ids by name, creating the unknown ones (not allowed for triage until a catalog sync says so)."""
    names = {label.name: label for label in labels}
    ids = dict(Label.objects.filter(name__in=names).values_list("name", "pk"))
    missing = [names[n] for n in names if n not in ids]
    if missing:
        Label.objects.bulk_create(
            [Label(name=m.name, color=m.color, description=m.description, allowed_for_triage=False) for m in missing],
            ignore_conflicts=True,
        )
        ids = dict(Label.objects.filter(name__in=names).values_list("name", "pk"))
    return ids


def store_issues(
    items: list[github.IssueData],
    *,
    gh: github.Client | None,
    report: SyncReport,
    only_known_or_queued: bool = True,
    authoritative: bool = True,
) -> list[int]:
    """Upsert issues (skipping PRs and older data) and their comments; returns the ids that changed.

    Issues not in the queue and unknown locally are ignored. Comments are fetched
    (gh given) only when comments_count or updated_at changed. Call inside a transaction.
    authoritative: the data was just read from GitHub, so when its updated_at equals ours
    (second resolution) but the content differs, it wins; a webhook's data does not.
    """
    items = [i for i in items if not i.is_pull_request]
    now = timezone.now()
    existing = {
        row["number"]: row
        for row in Issue.objects.filter(number__in=[i.number for i in items]).values(
            "pk",
            "number",
            "updated_at",
            "comments_count",
            "in_queue",
            "review_flagged_at",
            "comments_synced_at",
            "title",
            "state",
        )
    }
    ties = [
        existing[i.number]["pk"]
        for i in items
        if i.number in existing and i.updated_at == existing[i.number]["updated_at"]
    ]
    tie_labels: dict[int, set[str]] = {pk: set() for pk in ties}
    if authoritative and ties:
        for pk, name in Issue.labels.through.objects.filter(issue_id__in=ties).values_list("issue_id", "label__name"):
            tie_labels[pk].add(name)
    changed: list[github.IssueData] = []
    touched: list[int] = []
    for data in items:
        row = existing.get(data.number)
        queued = in_queue(data)
        if row is None and not queued and only_known_or_queued:
            continue
        if row is not None and (
            data.updated_at < row["updated_at"]
            or (
                data.updated_at == row["updated_at"]
                and row["in_queue"] == queued
                and row["comments_synced_at"]
                and (
                    not authoritative
                    or (
                        (row["title"], row["state"], row["comments_count"], tie_labels[row["pk"]])
                        == (data.title[:1024], data.state, data.comments_count, set(data.label_names))
                    )
                )
            )
        ):
            touched.append(row["pk"])  # older or the same: never overwrite newer data with older
            continue
        changed.append(data)
    if touched:
        Issue.objects.filter(pk__in=touched).update(last_synced_at=now)
    report.left_queue += sum(1 for d in changed if existing.get(d.number, {}).get("in_queue") and not in_queue(d))
    if not changed:
        return []
    rows = []
    for data in changed:
        row = existing.get(data.number) or {}
        flagged = TRIAGE_REVIEW in data.label_names
        rows.append(
            Issue(
                number=data.number,
                repo=settings.GITHUB_REPO,
                title=data.title[:1024],
                body=data.body,
                state=data.state,
                author=data.author[:100],
                html_url=data.html_url[:500],
                is_pull_request=False,
                created_at=data.created_at,
                updated_at=data.updated_at,
                comments_count=data.comments_count,
                in_queue=in_queue(data),
                last_synced_at=now,
                closed_at=data.closed_at,
                state_reason=data.state_reason[:20],
                review_flagged_at=(row.get("review_flagged_at") or data.updated_at) if flagged else None,
            )
        )
    Issue.objects.bulk_create(rows, update_conflicts=True, unique_fields=["number"], update_fields=ISSUE_FIELDS)
    ids = dict(Issue.objects.filter(number__in=[d.number for d in changed]).values_list("number", "pk"))
    label_ids = _label_ids([label for d in changed for label in d.labels])
    through = Issue.labels.through
    through.objects.filter(issue_id__in=ids.values()).delete()
    through.objects.bulk_create(
        [through(issue_id=ids[d.number], label_id=label_ids[label.name]) for d in changed for label in d.labels],
        ignore_conflicts=True,
    )
    fetched: dict[int, list[github.CommentData]] = {}
    for data in changed:
        row = existing.get(data.number)
        needs_comments = (
            row is None
            or row["comments_count"] != data.comments_count
            or (row["updated_at"] != data.updated_at)
            or not row["comments_synced_at"]
        )
        if gh is not None and needs_comments:
            fetched[ids[data.number]] = gh.comments(data.number) if data.comments_count else []
            report.comments_fetched += len(fetched[ids[data.number]])
    store_comments(fetched, now)
    if gh is not None:  # label events only where automation labelled the issue, and only when it changed
        events = {ids[d.number]: gh.label_events(d.number) for d in changed if needs_label_events(d.label_names)}
        store_label_events(events)
    report.issues_changed += len(changed)
    return list(ids.values())


def store_comments(fetched: dict[int, list[github.CommentData]], now: datetime) -> None:
    """Make each issue's local comments exactly GitHub's list (edits upserted, deleted ones dropped).

    fetched: {issue id: its comments}; three queries whatever the number of issues.
    """
    if not fetched:
        return
    Comment.objects.bulk_create(
        [
            Comment(
                issue_id=issue_id,
                github_id=c.github_id,
                author=c.author[:100],
                author_association=c.association,
                body=c.body,
                created_at=c.created_at,
                updated_at=c.updated_at,
            )
            for issue_id, comments in fetched.items()
            for c in comments
        ],
        update_conflicts=True,
        unique_fields=["github_id"],
        update_fields=["issue", "author", "author_association", "body", "updated_at"],
        batch_size=500,
    )
    keep = [c.github_id for comments in fetched.values() for c in comments]
    Comment.objects.filter(issue_id__in=fetched).exclude(github_id__in=keep).delete()
    Issue.objects.filter(pk__in=fetched).update(comments_synced_at=now)


def store_label_events(fetched: dict[int, list[github.LabelEventData]]) -> None:
    """Make each issue's stored label events exactly GitHub's list; two queries whatever the number of issues."""
    if not fetched:
        return
    LabelEvent.objects.filter(issue_id__in=fetched).delete()
    LabelEvent.objects.bulk_create(
        [
            LabelEvent(issue_id=pk, label=e.label[:100], action=e.action, actor=e.actor[:100], created_at=e.created_at)
            for pk, events in fetched.items()
            for e in events
        ],
        batch_size=500,
    )


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
        if full:
            _full_sync(gh, state, report)
        else:
            _incremental_sync(gh, state, report)
    except github.GitHubError as exc:
        state.last_error = f"{exc.__class__.__name__}: {exc.message}"
        state.last_requests = gh.requests_made
        state.save(update_fields=["last_error", "last_requests"])
        raise
    report.requests, report.not_modified = gh.requests_made, gh.not_modified
    state.last_requests, state.last_error, state.last_finished_at = gh.requests_made, "", timezone.now()
    state.save(update_fields=["last_requests", "last_error", "last_finished_at"])
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
    with transaction.atomic():
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
        report.labels_synced = sync_labels(gh)
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
    """Re-read each queued issue the listing did not show since started_at, to learn why it left."""
    missing = Issue.objects.filter(in_queue=True).exclude(last_synced_at__gte=started_at)
    for number in list(missing.values_list("number", flat=True)):
        try:
            data = gh.issue(number)
        except github.PageGone:  # deleted or transferred: it left, but the row stays
            Issue.objects.filter(number=number).update(in_queue=False, last_synced_at=timezone.now())
            report.left_queue += 1
            continue
        with transaction.atomic():
            changed = store_issues([data], gh=gh, report=report, only_known_or_queued=False)
        report.changed(changed, "departure")


def _incremental_sync(gh: github.Client, state: SyncState, report: SyncReport) -> None:
    if state.high_water_mark is None:
        # Nothing to be incremental from: a full sync sets the mark.
        full = _sync(full=True, gh=gh, report=SyncReport(mode="full", on_changed=report.on_changed))
        report.mode, report.issues_fetched, report.issues_changed = (
            "full (first)",
            full.issues_fetched,
            full.issues_changed,
        )
        report.comments_fetched, report.left_queue, report.labels_synced = (
            full.comments_fetched,
            full.left_queue,
            full.labels_synced,
        )
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
