"""The local mirror of GitHub's issues: what a sync, the history backfill or a webhook read is stored here.

Issues (with their comments and label events), the label catalog, and tombstones. An issue is only overwritten by data
with a newer updated_at. GitHub is read first (comments, label events), outside any transaction; then one transaction
writes, deciding again under the rows' locks what is newer (store_issues).

A deleted or transferred issue keeps its row with a tombstone (Issue.gone_at, GitHub's stamp): data no newer than it,
a late webhook above all, never puts it back in the queue (bury).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.db import DataError, transaction
from django.db.models import Q
from django.utils import timezone

from rubric_app.github import client as github
from rubric_app.github import skill_files
from rubric_app.models import Comment, Issue, Label, LabelEvent
from rubric_app.rubric.reading.catalog import allowed_for_triage
from rubric_app.vocabulary import HIGH_PRIORITY, TRIAGE_REVIEW, is_automation_label

log = logging.getLogger(__name__)

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
    "replaced",
    "gone_at",
    "gone",
    "left_queue_at",
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
    transferred: int = 0  # issues listed in another repository: transferred away, tombstoned (bury)
    gone: int = 0  # issues whose own addresses answered 404/410: deleted or transferred, tombstoned
    lost_labels: list[int] = field(default_factory=list)  # ids of issues that lost a label GitHub no longer has
    # (number, why) of the issues left out: ones the database refused, items of a page GitHub sent without a field.
    skipped_issues: list[tuple[int | str, str]] = field(default_factory=list)
    # What follows a change of issues (the caller's: triage/followups.issues_changed), told after each stored page
    # which issues changed and why ("sync", "departure", "skill", "label gone"); None: nothing follows (the benchmark
    # times the sync alone).
    on_changed: Callable[[list[int], str], None] | None = field(default=None, repr=False, compare=False)

    def changed(self, issue_ids: list[int], cause: str = "sync") -> None:
        if self.on_changed is not None and issue_ids:
            self.on_changed(issue_ids, cause)

    def summary(self) -> str:
        if self.skipped:
            return f"{self.mode} sync skipped: another sync is running"
        return (
            f"{self.mode} sync{' (resumed)' if self.resumed else ''}: {self.issues_fetched} issues fetched, "
            f"{self.issues_changed} changed, {self.left_queue} left the queue, "
            f"{self.gone + self.transferred} deleted or transferred, "
            f"{self.comments_fetched} comments, {self.labels_synced} labels, "
            f"{self.requests} requests ({self.not_modified} answered 304){skipped_issues(self.skipped_issues)}"
        )


def skipped_issues(skipped: list[tuple[int | str, str]]) -> str:
    """The issues a run left out, for its summary line: "; 1 issue left out: #12 (not stored: ...)"."""
    if not skipped:
        return ""
    listed = "; ".join(f"#{number} ({why})" for number, why in skipped[:5])
    more = f"; and {len(skipped) - 5} more" if len(skipped) > 5 else ""
    return f"; {len(skipped)} issue{'s' if len(skipped) != 1 else ''} left out: {listed}{more}"


def skipped_rows(skipped: list[tuple[int | str, str]]) -> list[dict]:
    """What SyncState.skipped keeps of a run's left-out issues (the health check lists them)."""
    return [{"number": number, "reason": why} for number, why in skipped[:100]]


def in_queue(data: github.IssueData) -> bool:
    """Open, not a PR, and labelled with one of the queue labels."""
    names = {label.name for label in data.labels}
    return data.state == "open" and not data.is_pull_request and bool(names & set(settings.GITHUB_QUEUE_LABELS))


# --- storing ---------------------------------------------------------------------------------


def sync_labels(gh: github.Client, report: SyncReport | None = None) -> int:
    """Mirror the repo's label catalog; returns how many labels GitHub has.

    allowed_for_triage = in the triage skill's catalog in use (skill_files) and not forbidden by G7;
    labels GitHub no longer has keep their row with in_catalog=False, and leave every issue (GitHub took them off;
    their ids go to report.lost_labels, whose suggestions follow). Every label's order is known again (unconfirmed
    cleared).
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
        gone = Label.objects.exclude(name__in=[d.name for d in remote])
        carried = Issue.labels.through.objects.filter(label__in=gone)
        lost = sorted(set(carried.values_list("issue_id", flat=True)))
        carried.delete()
        gone.update(in_catalog=False)
        Label.objects.filter(unconfirmed=True).update(unconfirmed=False)
    if report is not None:
        report.lost_labels += lost
    return len(remote)


def gone_label(name: str, stamp: datetime | None = None, *, unconfirmed: bool = False) -> list[int]:
    """A label GitHub no longer has (deleted, or renamed away): out of the catalog and off every issue of the mirror,
    as GitHub takes it off them; a row is kept (with the event's stamp) even for a label the mirror never had, so a
    late event naming it finds it gone. unconfirmed: the events could not be ordered, the next sync asks GitHub.
    Returns the ids of the issues that carried it."""
    fields = {"in_catalog": False, "unconfirmed": unconfirmed, **({"event_stamp": stamp} if stamp else {})}
    label, _ = Label.objects.update_or_create(name=name, defaults=fields)
    through = Issue.labels.through.objects.filter(label=label)
    carried = sorted(through.values_list("issue_id", flat=True))
    through.delete()
    return carried


def confirm_labels(gh: github.Client) -> list[int]:
    """Ask GitHub about each label that events it could not order left gone (Label.unconfirmed), one request each
    (none most of the time): back in the catalog if GitHub has it, else gone for sure and off every issue. Returns
    the ids of the issues that lost one."""
    unconfirmed = list(Label.objects.filter(unconfirmed=True))
    if not unconfirmed:
        return []
    lost: list[int] = []
    allowed = skill_files.in_use().names()
    for label in unconfirmed:
        found = gh.label(label.name)
        if found is not None and found.name == label.name:
            label.color, label.description, label.in_catalog = found.color, found.description, True
            label.allowed_for_triage, label.unconfirmed = allowed_for_triage(found.name, allowed), False
            label.save(update_fields=["color", "description", "in_catalog", "allowed_for_triage", "unconfirmed"])
        else:
            lost += gone_label(label.name)
    return sorted(set(lost))


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


ROW_FIELDS = ("pk", "number", "updated_at", "comments_count", "in_queue", "review_flagged_at", "comments_synced_at")


def _rows(numbers: list[int], *, authoritative: bool, lock: bool) -> tuple[dict[int, dict], dict[int, set[str]]]:
    """The mirror's rows of these issues by number (locked, in number order, when `lock`), and the label names of
    those an authoritative read may tie with (same updated_at)."""
    qs = Issue.objects.filter(number__in=numbers).order_by("number")
    qs = qs.select_for_update() if lock else qs
    rows = {row["number"]: row for row in qs.values(*ROW_FIELDS, "title", "state", "gone_at", "left_queue_at")}
    labels: dict[int, set[str]] = {row["pk"]: set() for row in rows.values()}
    if authoritative and rows:
        through = Issue.labels.through.objects.filter(issue_id__in=labels)
        for pk, name in through.values_list("issue_id", "label__name"):
            labels[pk].add(name)
    return rows, labels


def _newer(
    items: list[github.IssueData],
    rows: dict[int, dict],
    labels: dict[int, set[str]],
    *,
    known_only: bool,
    tie: bool,
    revived: frozenset[int] = frozenset(),
) -> tuple[list[github.IssueData], list[int]]:
    """(the items to store, the ids of rows the others match): never older data over newer, never an issue the
    mirror does not know outside the queue (known_only), never data no newer than an issue's tombstone, unless
    GitHub itself showed the issue back in this repository's queue (revived: see _revive).

    tie: the data was just read from GitHub, so when its updated_at equals ours (second resolution) but the content
    differs, it wins; a webhook's data does not."""
    changed, touched = [], []
    for data in items:
        row, queued = rows.get(data.number), in_queue(data)
        if row is None and not queued and known_only:
            continue
        if row is not None and row["gone_at"] and data.number in revived:
            changed.append(data)  # GitHub shows it here whatever the stamps: the tombstone was wrong or undone
            continue
        if row is not None and row["gone_at"] and data.updated_at <= row["gone_at"]:
            continue  # sent before it was deleted or transferred: a late event must not bring it back
        same = (row["title"], row["state"], row["comments_count"], labels[row["pk"]]) if row else None
        if row is not None and (
            data.updated_at < row["updated_at"]
            or (
                data.updated_at == row["updated_at"]
                and row["in_queue"] == queued
                and row["comments_synced_at"]
                and (not tie or same == (data.title[:1024], data.state, data.comments_count, set(data.label_names)))
            )
        ):
            touched.append(row["pk"])  # older or the same: never overwrite newer data with older
            continue
        changed.append(data)
    return changed, touched


def _revive(
    items: list[github.IssueData], gh: github.Client, *, read_one_by_one: bool
) -> tuple[list[github.IssueData], frozenset[int]]:
    """A listing shows in this repository's queue an issue the mirror has tombstoned with a stamp no older than the
    listed data (a `transferred` event undone, a transient 404, a listing that lags a deletion): the issue is read
    again, one request each (none most of the time). Shown here again, its tombstone goes whatever the stamps, and the
    fresh read is stored; answered 404, the listing lagged and the tombstone stays (the item is left out); shown in
    another repository, it stays buried (store_issues' transferred). read_one_by_one: the items are such reads
    already (a departure's, a tombstone's re-read), not read again. Returns (items, numbers revived)."""
    here = [i for i in items if not transferred(i) and (read_one_by_one or in_queue(i))]
    buried = dict(
        Issue.objects.filter(number__in=[i.number for i in here]).exclude(gone_at=None).values_list("number", "gone_at")
    )
    suspects = {i.number for i in here if i.number in buried and i.updated_at <= buried[i.number]}
    if read_one_by_one or not suspects:
        return items, frozenset(suspects)
    kept, revived = [], set()
    for data in items:
        if data.number not in suspects:
            kept.append(data)
            continue
        try:
            fresh = gh.issue(data.number)
        except github.PageGone:
            continue
        kept.append(fresh)
        if not transferred(fresh):
            revived.add(fresh.number)
    return kept, frozenset(revived)


@dataclass
class Thread:
    """What was read from GitHub for one changed issue before its transaction: its comments (None: unchanged, not
    read) and its label events (None: not needed)."""

    comments: list[github.CommentData] | None
    events: list[github.LabelEventData] | None


def _read_threads(
    changed: list[github.IssueData], rows: dict[int, dict], gh: github.Client, report: SyncReport
) -> tuple[dict[int, Thread], list[github.IssueData]]:
    """GitHub's comments (where the count or updated_at changed) and label events (where the automation's labels
    need them) of the changed issues; returns them by number, and the issues whose comments or events answered
    404/410: deleted or transferred since they were listed."""
    threads: dict[int, Thread] = {}
    gone: list[github.IssueData] = []
    for data in changed:
        row = rows.get(data.number)
        stale = (
            row is None
            or row["comments_count"] != data.comments_count
            or row["updated_at"] != data.updated_at
            or not row["comments_synced_at"]
        )
        try:
            comments = (gh.comments(data.number) if data.comments_count else []) if stale else None
            events = gh.label_events(data.number) if needs_label_events(data.label_names) else None
        except github.PageGone:
            gone.append(data)
            continue
        report.comments_fetched += len(comments or [])
        threads[data.number] = Thread(comments, events)
    return threads, gone


def store_issues(
    items: list[github.IssueData],
    *,
    gh: github.Client | None,
    report: SyncReport,
    only_known_or_queued: bool = True,
    authoritative: bool = True,
    read_one_by_one: bool = False,
) -> list[int]:
    """Upsert issues (skipping PRs and older data) and their comments; returns the ids that changed.

    Issues not in the queue and unknown locally are ignored. Comments are fetched
    (gh given) only when comments_count or updated_at changed. authoritative: the data was
    just read from GitHub, so when its updated_at equals ours (second resolution) but the
    content differs, it wins; a webhook's data does not. read_one_by_one: each item is a read of the issue's own
    address, not a listing's (see _revive).

    GitHub is read first (comments, label events), outside any transaction: neither a request nor a rate-limit wait
    ever holds the rows locked, so call it outside one when gh is given. Then one transaction writes, deciding again
    under the rows' locks what is newer (a webhook may have stored newer data meanwhile). Issues listed in another
    repository, or whose comments answer 404, are tombstoned (bury). When the database refuses the data (DataError:
    a value it cannot hold), each issue is written in a transaction of its own, and one it refuses is left out with
    the reason (report.skipped_issues): one bad issue never stops the others. Other database errors (a lost
    connection, a constraint) fail the whole call, to be retried.
    """
    items = sorted((i for i in items if not i.is_pull_request), key=lambda i: i.number)
    revived: frozenset[int] = frozenset()
    if gh is not None and authoritative:
        items, revived = _revive(items, gh, read_one_by_one=read_one_by_one)
    moved = [i for i in items if transferred(i)]
    items = [i for i in items if i not in moved]
    threads: dict[int, Thread] = {}
    vanished: list[github.IssueData] = []
    if gh is not None:  # what is newer, unlocked, only to choose whose threads to read: _write decides again
        rows, labels = _rows([i.number for i in items], authoritative=authoritative, lock=False)
        changed, _ = _newer(items, rows, labels, known_only=only_known_or_queued, tie=authoritative, revived=revived)
        threads, vanished = _read_threads(changed, rows, gh, report)
    for data in moved:
        bury(data.number, data.updated_at, f"transferred to {moved_to(data)}")
    for data in vanished:
        bury(data.number, data.updated_at, "deleted or transferred (its comments answered 404)")
    report.transferred, report.gone = report.transferred + len(moved), report.gone + len(vanished)
    items = [i for i in items if i not in vanished]
    options = {"known_only": only_known_or_queued, "tie": authoritative, "revived": revived}
    try:
        with transaction.atomic():
            ids, counts = _write(items, threads, **options)
    except (DataError, ValueError):  # what the database refuses in the data (ValueError: text psycopg cannot encode)
        ids, counts = [], [0, 0]
        for data in items:
            try:
                with transaction.atomic():
                    one, (changed_one, left_one) = _write([data], threads, **options)
            except (DataError, ValueError) as exc:
                log.warning("issue #%s not stored: %s", data.number, exc)
                report.skipped_issues.append((data.number, f"not stored: {exc.__class__.__name__}: {_first_line(exc)}"))
                continue
            ids += one
            counts = [counts[0] + changed_one, counts[1] + left_one]
    report.issues_changed += counts[0]
    report.left_queue += counts[1]
    return ids


def _first_line(exc: BaseException) -> str:
    return github.excerpt(str(exc).strip().splitlines()[0] if str(exc).strip() else "", 200)


def _write(
    items: list[github.IssueData],
    threads: dict[int, Thread],
    *,
    known_only: bool,
    tie: bool,
    revived: frozenset[int] = frozenset(),
) -> tuple[list[int], list[int]]:
    """store_issues' transaction: the rows locked, what is newer decided again, written with the comments and events
    read for them; returns (ids changed, [how many changed, how many left the queue])."""
    now = timezone.now()
    rows, labels = _rows([i.number for i in items], authoritative=tie, lock=True)
    changed, touched = _newer(items, rows, labels, known_only=known_only, tie=tie, revived=revived)
    if touched:
        Issue.objects.filter(pk__in=touched).update(last_synced_at=now)
    left = sum(1 for d in changed if rows.get(d.number, {}).get("in_queue") and not in_queue(d))
    if not changed:
        return [], [0, left]
    Issue.objects.bulk_create(
        [_issue_row(data, rows.get(data.number) or {}, now) for data in changed],
        update_conflicts=True,
        unique_fields=["number"],
        update_fields=ISSUE_FIELDS,
    )
    ids = dict(Issue.objects.filter(number__in=[d.number for d in changed]).values_list("number", "pk"))
    label_ids = _label_ids([label for d in changed for label in d.labels])
    if not tie:  # a webhook's issue, sent before its label was deleted or renamed: the label is not put back
        gone = set(Label.objects.filter(pk__in=label_ids.values(), in_catalog=False).values_list("name", flat=True))
        label_ids = {name: pk for name, pk in label_ids.items() if name not in gone}
    else:  # GitHub just showed an issue carrying a label the catalog lost: the sync's end asks GitHub (confirm_labels)
        Label.objects.filter(pk__in=label_ids.values(), in_catalog=False, unconfirmed=False).update(unconfirmed=True)
    through = Issue.labels.through
    through.objects.filter(issue_id__in=ids.values()).delete()
    through.objects.bulk_create(
        [
            through(issue_id=ids[d.number], label_id=label_ids[label.name])
            for d in changed
            for label in d.labels
            if label.name in label_ids
        ],
        ignore_conflicts=True,
    )
    read = [(ids[d.number], threads[d.number]) for d in changed if d.number in threads]
    store_comments({pk: thread.comments for pk, thread in read if thread.comments is not None}, now)
    store_label_events({pk: thread.events for pk, thread in read if thread.events is not None})
    return list(ids.values()), [len(changed), left]


def _issue_row(data: github.IssueData, row: dict, now: datetime) -> Issue:
    flagged = TRIAGE_REVIEW in data.label_names
    return Issue(
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
        left_queue_at=_left_queue_at(data, row),
        replaced=dict(data.replaced),
        gone_at=None,
        gone="",
    )


def _left_queue_at(data: github.IssueData, row: dict) -> datetime | None:
    """When it left the queue open (metrics): GitHub's stamp of the change that took it out, kept while it stays out."""
    if in_queue(data) or data.state != "open":
        return None
    return data.updated_at if row.get("in_queue") or not row.get("left_queue_at") else row["left_queue_at"]


def transferred(data: github.IssueData) -> bool:
    """The listing shows it in another repository: it was transferred away (GitHub lists it there for a while)."""
    here = f"/repos/{settings.GITHUB_REPO}".lower()
    return bool(data.repository_url) and not data.repository_url.lower().endswith(here)


def moved_to(data: github.IssueData) -> str:
    """The repository a transferred issue is listed in ("pytorch/vision")."""
    return "/".join(data.repository_url.rstrip("/").split("/")[-2:])


def bury(number: int, stamp: datetime, why: str) -> int:
    """Tombstone an issue of the mirror deleted on GitHub or transferred away (why), as of GitHub's `stamp`: it
    leaves the queue, and no data as old as the stamp brings it back (_newer). Returns 1 when the mirror has it."""
    rows = Issue.objects.filter(number=number)
    rows.filter(Q(gone_at__isnull=True) | Q(gone_at__lt=stamp)).update(gone_at=stamp, gone=why[:200])
    rows.filter(in_queue=True).update(left_queue_at=timezone.now())  # the metrics' "left" (when, not GitHub's stamp)
    return rows.update(in_queue=False, last_synced_at=timezone.now())


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
                replaced=dict(c.replaced),
            )
            for issue_id, comments in fetched.items()
            for c in comments
        ],
        update_conflicts=True,
        unique_fields=["github_id"],
        update_fields=["issue", "author", "author_association", "body", "updated_at", "replaced"],
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
