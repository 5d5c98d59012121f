"""Queue health for the weekly meeting, derived from the mirror and the audit log (no GitHub calls).

- open queue size at the end of each week, inflow (opened) and outflow (closed, or left the
  queue open, e.g. handed off, G5) per week: from Issue.created_at / closed_at / in_queue;
- age of the untriaged `oncall: pt2` issues, in buckets;
- time to triage: from an issue's opening to its first decision made in the dashboard and applied
  (Issue.first_decided_at, set from the audit log's TriageDecision rows when one is applied);
  issues triaged on GitHub directly are not counted;
- decisions per triager in the window.

queue_health() makes four queries whatever the size of the data (the page asserts it), and the
database does the counting: rows are never fetched to be counted. On PostgreSQL the medians and
p90s are computed there too (percentile_disc); on SQLite, which has no percentiles, the hours of
the window's triaged issues are fetched and ranked in Python, by the same nearest-rank rules.
"""

from __future__ import annotations

import csv
import math
import statistics
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from functools import cached_property
from typing import NamedTuple

from django.contrib.postgres.fields import ArrayField
from django.db import connections
from django.db.models import Case, Count, DateTimeField, FloatField, Func, IntegerField, Q, Value, When
from django.db.models.functions import Coalesce, Greatest, Least
from django.db.models.lookups import IsNull, LessThan
from django.utils import timezone

from rubric_app.models import Issue, TriageDecision, week_start
from rubric_app.vocabulary import (
    BOT_TRIAGED,
    FEEDBACK_LABELS,
    PT2_ONCALL,
    TRIAGE_REVIEW,
    TRIAGED,
    is_home_oncall,
    is_oncall,
)

DEFAULT_WEEKS = 12
MAX_WEEKS = 52
AGE_BUCKETS = [("< 1 week", 0, 7), ("1–4 weeks", 7, 28), ("1–3 months", 28, 91), ("> 3 months", 91, None)]


class Outcome(NamedTuple):
    """One label of one triage decision, against what the rubric suggested (decision_outcomes())."""

    decision_id: int
    issue_id: int
    issue_number: int
    label: str
    rule_id: str  # "" for a label no rule suggested
    shown: bool
    applied: bool
    # Pre-selected (or, recorded before the ticks were kept, shown) and not applied: the triager took it off what
    # `a` would apply, the rule's miss.
    unticked: bool
    added: bool
    # Ticked for `a` when the triager decided; None where unknown (a label no rule suggested, or a decision
    # recorded before the page's ticks were kept).
    preselected: bool | None = None
    # Offered as possible, never ticked, and not applied: the rule did not claim it, so it is no miss.
    skipped: bool = False


def decision_outcomes() -> Iterator[Outcome]:
    """What triagers did with the rubric's suggestions: one Outcome per label of each decision.

    Only applied triage decisions that recorded what they were shown (suggestions_shown) count, and only what
    they decided about labels: meeting decisions settle the review; a close (a duplicate, a usage question),
    a transfer or a reply alone says nothing about the labels, and a hand-off (G5) only about the route, so
    those count for their `oncall:` labels alone. A shown suggestion was applied (the decision added it), unticked
    (pre-selected, and the triager took it off: neither added nor already there), skipped (offered as possible,
    never ticked, not applied) or already on the issue (neither); a label added that no rule suggested is `added`,
    with rule_id "", except `triaged` where the page did not show it (a flagged issue the triager marked triaged
    anyway): G6's, pre-selected when `a` did not flag the meeting; the feedback labels (`bot-mislabeled`)
    say what the triager thought of the automation, not of the rubric. Newest first, one query. Used by the
    rubric health page (/rubric). train_label_model --from-db reads the decisions itself
    (decision_examples): it also learns from labels removed, and from decisions recorded before
    suggestions_shown was kept.
    """
    rows = TriageDecision.objects.filter(
        status=TriageDecision.Status.APPLIED, meeting_decision="", suggestions_shown__isnull=False
    )
    rows = rows.order_by("-created_at", "-pk").values_list(
        "pk",
        "issue_id",
        "issue__number",
        "labels_seen",
        "labels_added",
        "suggestions_shown",
        "labels_removed",
        "close_reason",
        "transfer_to",
        "reply",
        "redirect",
    )
    for pk, issue_id, number, seen, added, shown, removed, close, transfer, reply, redirect in rows.iterator(
        chunk_size=2000
    ):
        if close or transfer or (reply and not added and not removed):
            continue
        handoff = bool(redirect) and not is_home_oncall(redirect)
        decided = is_oncall if handoff else (lambda label: True)
        shown_labels = set()
        for item in shown:
            label, rule_id = item.get("label", ""), item.get("rule_id", "")
            shown_labels.add(label)
            if not decided(label):
                continue
            applied, preselected = label in added, item.get("preselected")
            left = not applied and label not in seen
            yield Outcome(
                pk,
                issue_id,
                number,
                label,
                rule_id,
                True,
                applied,
                left and preselected is not False,
                False,
                preselected,
                left and preselected is False,
            )
        flagged = any(item.get("label") == TRIAGE_REVIEW and item.get("preselected") for item in shown)
        for label in added:
            if label in shown_labels or label in FEEDBACK_LABELS or not decided(label):
                continue
            if label == TRIAGED:
                yield Outcome(pk, issue_id, number, label, "G6", True, True, False, False, not flagged)
            else:
                yield Outcome(pk, issue_id, number, label, "", False, True, False, True)


@dataclass
class Week:
    start: date
    opened: int = 0
    closed: int = 0
    open_at_end: int = 0
    triaged: int = 0
    triage_median_h: float | None = None
    triage_p90_h: float | None = None

    @property
    def label(self) -> str:
        return f"{self.start:%m-%d}"


@dataclass
class QueueHealth:
    weeks: list[Week]
    age_buckets: list[tuple[str, int]]
    bounds: list[datetime] = field(default_factory=list)  # each week's start, then the window's end
    triaged: int = 0  # issues first decided in the window
    triage_median_h: float | None = None
    triage_p90_h: float | None = None
    per_triager: list[tuple[str, int, int]] = field(default_factory=list)  # (username, decisions, applied)

    @property
    def since(self) -> date:
        return self.weeks[0].start

    @property
    def open_now(self) -> int:
        return self.weeks[-1].open_at_end

    @property
    def untriaged(self) -> int:
        return sum(count for _, count in self.age_buckets)

    @cached_property
    def triage_hours(self) -> list[float]:
        """Each issue's time to triage in the window, in hours (one query on first use; the page needs only
        the figures above)."""
        return [hours for hours, _ in _triage_rows(self.bounds)]


def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile by the nearest-rank method (a value that occurred); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q * len(ordered)))) - 1]


def _left_week(bounds: list[datetime]) -> Case:
    """The week (WeekOf's numbering) an issue left the open queue in: when it was closed (closed_at, or its
    last update for rows synced before closed_at was kept), or when it left open (left_queue_at: handed off,
    transferred, deleted; else its last update); NULL while it is in the queue. A hand-off applied from the
    dashboard (G5) or a transfer (G2) leaves the issue's GitHub stamp (updated_at) where it was, in a week
    already past: counted by it, they were missed (issue 53).

    The week of each branch, not the week of one CASE of the moment: SQLite would evaluate that CASE
    again at each comparison of the search.
    """
    return Case(
        When(state=Issue.State.CLOSED, then=WeekOf(Coalesce("closed_at", "updated_at"), bounds)),
        When(in_queue=False, then=WeekOf(Coalesce("left_queue_at", "updated_at"), bounds)),
        default=None,
        output_field=IntegerField(),
    )


class WeekOf(Func):
    """Which week of the window a moment falls in, numbered as PostgreSQL's width_bucket does: i for
    bounds[i-1] <= moment < bounds[i] (the window's week i - 1), 0 before the window, len(bounds) from
    its end, NULL for no moment.

    A binary search over the bounds per row: width_bucket on PostgreSQL, nested CASEs on SQLite.
    Either way no date_trunc per row, and weeks start at the bounds themselves (Monday 00:00 in
    the current time zone).
    """

    output_field = IntegerField()
    function = "width_bucket"

    def __init__(self, moment, bounds: list[datetime]):
        super().__init__(moment, Value(list(bounds), output_field=ArrayField(DateTimeField())))
        self.bounds = list(bounds)

    def as_sql(self, compiler, connection, **extra):
        if connection.vendor == "postgresql":
            return super().as_sql(compiler, connection, **extra)
        moment = self.source_expressions[0]
        # Most rows are older than the window: one test says so; the others find their week by halves.
        search = Case(
            When(IsNull(moment, True), then=Value(None)),
            When(LessThan(moment, self.bounds[0]), then=Value(0)),
            default=self._halves(moment, 1, len(self.bounds)),
            output_field=IntegerField(),
        )
        return compiler.compile(search.resolve_expression(compiler.query))

    def _halves(self, moment, low: int, high: int):
        """The week number in [low, high] of a moment at or after bounds[low - 1]: a binary search as CASEs."""
        if low == high:
            return Value(low)
        middle = (low + high) // 2  # below bounds[middle]: at most middle
        return Case(
            When(LessThan(moment, self.bounds[middle]), then=self._halves(moment, low, middle)),
            default=self._halves(moment, middle + 1, high),
            output_field=IntegerField(),
        )


def queue_health(*, weeks: int = DEFAULT_WEEKS, now: datetime | None = None) -> QueueHealth:
    """The figures of the metrics page for the last `weeks` weeks (the current one included)."""
    now = now or timezone.now()
    weeks = max(1, min(weeks, MAX_WEEKS))
    first = week_start(now) - timedelta(days=7 * (weeks - 1))
    bounds = [
        timezone.make_aware(datetime.combine(first + timedelta(days=7 * i), datetime.min.time()))
        for i in range(weeks + 1)
    ]
    health = QueueHealth(weeks=_weekly_flow(bounds), age_buckets=_age_buckets(now), bounds=bounds)
    _time_to_triage(health)
    health.per_triager = _per_triager(bounds[0])
    return health


def _weekly_flow(bounds: list[datetime]) -> list[Week]:
    """Opened and left per week, and the open count at each week's end: one grouped query, one pass
    over the issues whatever the number of weeks (what came before the window is one group)."""
    rows = (
        Issue.objects.filter(is_pull_request=False)
        .order_by()
        .annotate(opened_week=WeekOf("created_at", bounds), left_week=_left_week(bounds))
        .values("opened_week", "left_week")
        .annotate(n=Count("*"))
    )
    opened, left = [0] * (len(bounds) + 1), [0] * (len(bounds) + 1)
    for row in rows:
        opened[row["opened_week"]] += row["n"]
        if row["left_week"] is not None:
            left[row["left_week"]] += row["n"]
    open_count = opened[0] - left[0]
    weeks = []
    for i, start in enumerate(bounds[:-1], start=1):
        open_count += opened[i] - left[i]
        weeks.append(Week(start=timezone.localdate(start), opened=opened[i], closed=left[i], open_at_end=open_count))
    return weeks


def _age_buckets(now: datetime) -> list[tuple[str, int]]:
    """Untriaged `oncall: pt2` issues (the queue's pt2 lane) by age: one aggregate query."""
    counts = {}
    for i, (_, low, high) in enumerate(AGE_BUCKETS):
        q = Q(created_at__lte=now - timedelta(days=low))
        if high is not None:
            q &= Q(created_at__gt=now - timedelta(days=high))
        counts[f"bucket_{i}"] = Count("pk", filter=q)
    lane = Issue.objects.in_queue().filter(labels__name=PT2_ONCALL).exclude(labels__name=TRIAGED)
    totals = lane.aggregate(**counts)
    return [(name, totals[f"bucket_{i}"]) for i, (name, _, _) in enumerate(AGE_BUCKETS)]


class SecondsBetween(Func):
    """end - start in seconds, as a float computed by the database (PostgreSQL and SQLite)."""

    output_field = FloatField()
    arity = 2

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(
            compiler,
            connection,
            arg_joiner=" - ",
            template="CAST(EXTRACT(EPOCH FROM (%(expressions)s)) AS double precision)",
            **extra,
        )

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(
            compiler,
            connection,
            arg_joiner=") - julianday(",
            template="((julianday(%(expressions)s)) * 86400.0)",
            **extra,
        )


def _triaged_in_window(bounds: list[datetime]):
    """(hours to triage, week) of each issue first decided in the window; the week counted from the
    window's weeks (0-based; a decision stamped after the window's end counts in its last week)."""
    return (
        Issue.objects.filter(first_decided_at__gte=bounds[0])
        .order_by()
        .annotate(
            hours=Greatest(SecondsBetween("first_decided_at", "created_at") / Value(3600.0), Value(0.0)),
            week=Least(WeekOf("first_decided_at", bounds), Value(len(bounds) - 1)) - Value(1),
        )
        .values_list("hours", "week")
    )


def _triage_rows(bounds: list[datetime]) -> list[tuple[float, int]]:
    return [(hours, int(week)) for hours, week in _triaged_in_window(bounds)]


# PostgreSQL ranks the hours itself (one sort per week, one for the window) and answers a row per week
# plus the window's (week NULL): percentile_disc(f) is the value at rank ceil(f * n), what percentile()
# picks; the median is, as statistics.median takes it, the mean of the two middle values (for an odd
# count the same value twice), each found by rank from one end. Cheaper than fetching the rows.
_RANKED = """SELECT week, count(*), percentile_disc(0.5) WITHIN GROUP (ORDER BY hours),
    percentile_disc(0.5) WITHIN GROUP (ORDER BY hours DESC), percentile_disc(0.9) WITHIN GROUP (ORDER BY hours)
    FROM ({rows}) AS triaged GROUP BY ROLLUP (week)"""


def _time_to_triage(health: QueueHealth) -> None:
    """Count, median and p90 of the hours to triage, for the window and for each week: one query."""
    figures: dict[int | None, tuple[int, float | None, float | None]] = {}  # None: the whole window
    rows = _triaged_in_window(health.bounds)
    if connections[rows.db].vendor == "postgresql":
        sql, params = rows.query.sql_with_params()
        with connections[rows.db].cursor() as cursor:
            cursor.execute(_RANKED.format(rows=sql), params)
            for week, n, low, high, p90 in cursor.fetchall():
                figures[None if week is None else int(week)] = (n, (low + high) / 2 if n else None, p90)
    else:  # SQLite has no percentiles: rank in Python, by the same rules
        hours_of: dict[int | None, list[float]] = {None: []}
        for hours, week in _triage_rows(health.bounds):
            hours_of[None].append(hours)
            hours_of.setdefault(week, []).append(hours)
        figures = {
            week: (len(hours), statistics.median(hours) if hours else None, percentile(hours, 0.9))
            for week, hours in hours_of.items()
        }
        health.triage_hours = hours_of[None]  # fetched anyway
    health.triaged, health.triage_median_h, health.triage_p90_h = figures.get(None, (0, None, None))
    for i, week in enumerate(health.weeks):
        week.triaged, week.triage_median_h, week.triage_p90_h = figures.get(i, (0, None, None))


def _per_triager(since: datetime) -> list[tuple[str, int, int]]:
    """(username, decisions, applied) in the window, most decisions first: an index-only scan of
    decision_window_idx, then a join of the dozen rows to their users."""
    rows = (
        TriageDecision.objects.filter(created_at__gte=since)
        .values("user__username")
        .annotate(total=Count("*"), applied=Count("status", filter=Q(status=TriageDecision.Status.APPLIED)))
        .order_by("-total", "user__username")
    )
    return [(row["user__username"] or "(deleted user)", row["total"], row["applied"]) for row in rows]


# --- rubric health: the triagers' own decisions against the rubric's suggestions ----------------

ISSUE_LINKS = 8


@dataclass
class RuleHealth:
    """How one rule id's suggestions fared: shown, applied, unticked (taken off the pre-selection: the rule's miss),
    skipped (offered, never ticked: no claim, no miss); precision = applied / (applied + unticked)."""

    rule_id: str
    shown: int = 0
    applied: int = 0
    unticked: int = 0
    skipped: int = 0
    applied_issues: list[int] = field(default_factory=list)  # newest first, at most ISSUE_LINKS
    unticked_issues: list[int] = field(default_factory=list)
    # Of its suggestions ticked for `a` (pre-selected) and not already on the issue: how many the triager kept.
    ticked: int = 0
    ticked_kept: int = 0

    @property
    def precision(self) -> float | None:
        decided = self.applied + self.unticked
        return self.applied / decided if decided else None

    @property
    def kept(self) -> float | None:
        """The pre-selection's precision as triagers judged it: what `a` would have applied, kept."""
        return self.ticked_kept / self.ticked if self.ticked else None


@dataclass
class AddedLabel:
    """A label triagers added that no rule suggested (a recall gap of the rubric)."""

    label: str
    count: int = 0
    issues: list[int] = field(default_factory=list)


def rubric_health(outcomes) -> tuple[list[RuleHealth], list[AddedLabel]]:
    """Per rule id (most shown first) and per label added unsuggested (most added first)."""
    rules: dict[str, RuleHealth] = {}
    added: dict[str, AddedLabel] = {}
    for o in outcomes:
        if o.added:
            row = added.setdefault(o.label, AddedLabel(o.label))
            row.count += 1
            _link(row.issues, o.issue_number)
            continue
        row = rules.setdefault(o.rule_id, RuleHealth(o.rule_id))
        row.shown += 1
        if o.preselected and (o.applied or o.unticked):
            row.ticked += 1
            row.ticked_kept += o.applied
        if o.applied:
            row.applied += 1
            _link(row.applied_issues, o.issue_number)
        elif o.unticked:
            row.unticked += 1
            _link(row.unticked_issues, o.issue_number)
        elif o.skipped:
            row.skipped += 1
    return (
        sorted(rules.values(), key=lambda r: (-r.shown, r.rule_id)),
        sorted(added.values(), key=lambda a: (-a.count, a.label)),
    )


def preselection(rules: list[RuleHealth]) -> RuleHealth:
    """Every rule's pre-selected suggestions together: the live check of what `a` promises (issue #12's
    "of the labels pre-selected, about 9 in 10 are right", as the triagers' own decisions judge it)."""
    return RuleHealth("all", ticked=sum(r.ticked for r in rules), ticked_kept=sum(r.ticked_kept for r in rules))


def _link(numbers: list[int], number: int) -> None:
    if len(numbers) < ISSUE_LINKS and number not in numbers:
        numbers.append(number)


def write_rubric_csv(out, outcomes, *, per_outcome: bool = False) -> None:
    """Write the rubric health table (or every outcome) as CSV to `out` (a file-like object)."""
    writer = csv.writer(out)
    if per_outcome:
        writer.writerow(Outcome._fields)
        writer.writerows(outcomes)
        return
    rules, added = rubric_health(outcomes)
    writer.writerow(
        [
            "rule_id",
            "label",
            "shown",
            "applied",
            "unticked",
            "added",
            "precision",
            "issues",
            "preselected",
            "preselected_kept",
            "offered_never_ticked",
        ]
    )
    for r in rules:
        precision = "" if r.precision is None else f"{r.precision:.3f}"
        writer.writerow(
            [
                r.rule_id,
                "",
                r.shown,
                r.applied,
                r.unticked,
                "",
                precision,
                " ".join(f"#{n}" for n in r.applied_issues + r.unticked_issues),
                r.ticked,
                r.ticked_kept,
                r.skipped,
            ]
        )
    for a in added:
        writer.writerow(["", a.label, "", "", "", a.count, "", " ".join(f"#{n}" for n in a.issues), "", "", ""])


# --- the triage bot's health: what triagers kept or removed of what PyTorch's triage bot labelled ------


@dataclass
class BotLabel:
    """One label on bot-triaged issues when a triager reviewed the bot: kept or removed, in all and per week."""

    label: str
    kept: int = 0
    removed: int = 0
    weeks: dict = field(default_factory=dict)  # week's Monday -> [kept, removed], oldest first when read

    @property
    def kept_share(self) -> float | None:
        return self.kept / (self.kept + self.removed) if self.kept + self.removed else None

    def by_week(self) -> list[tuple[date, int, int]]:
        return [(week, k, r) for week, (k, r) in sorted(self.weeks.items())]


def bot_health(reviews) -> list[BotLabel]:
    """Per label (most reviewed first), from applied bot reviews (TriageDecision.objects.bot_reviews()): of the
    labels the issue carried when a triager reviewed the bot, what the triager kept (confirmed, or left on while
    correcting) and removed. Until the sync stores label events, the labels present at review stand in for what
    the bot applied; `bot-triaged` and the feedback labels themselves are left out.
    """
    rows: dict[str, BotLabel] = {}
    for created_at, seen, removed in reviews:
        week = week_start(created_at)
        for label in seen:
            if label == BOT_TRIAGED or label in FEEDBACK_LABELS:
                continue
            row = rows.setdefault(label, BotLabel(label))
            gone = label in removed
            row.removed += gone
            row.kept += not gone
            counts = row.weeks.setdefault(week, [0, 0])
            counts[1 if gone else 0] += 1
    return sorted(rows.values(), key=lambda r: (-(r.kept + r.removed), r.label))
