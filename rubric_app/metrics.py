"""Queue health for the weekly meeting, derived from the mirror and the audit log (no GitHub calls).

- open queue size at the end of each week, inflow (opened) and outflow (closed, or left the
  queue open, e.g. handed off, G5) per week: from Issue.created_at / closed_at / in_queue;
- age of the untriaged `oncall: pt2` issues, in buckets;
- time to triage: from an issue's opening to its first decision made in the dashboard and applied
  (Issue.first_decided_at, set from the audit log's TriageDecision rows when one is applied);
  issues triaged on GitHub directly are not counted;
- decisions per triager in the window.

queue_health() makes five queries whatever the size of the data (the page asserts it).
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta

from django.db.models import Case, Count, DateField, DateTimeField, F, FloatField, Func, Q, Value, When
from django.db.models.functions import Coalesce, TruncWeek
from django.utils import timezone

from .models import PT2_ONCALL, TRIAGED, Issue, Outcome, TriageDecision, week_start

DEFAULT_WEEKS = 12
WEEK_S = 7 * 24 * 3600
MAX_WEEKS = 52
AGE_BUCKETS = [("< 1 week", 0, 7), ("1–4 weeks", 7, 28), ("1–3 months", 28, 91), ("> 3 months", 91, None)]


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
    triage_hours: list[float] = field(default_factory=list)
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

    @property
    def triage_median_h(self) -> float | None:
        return statistics.median(self.triage_hours) if self.triage_hours else None

    @property
    def triage_p90_h(self) -> float | None:
        return percentile(self.triage_hours, 0.9)


def percentile(values: list[float], q: float) -> float | None:
    """The q-quantile by the nearest-rank method (a value that occurred); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q * len(ordered)))) - 1]


def _left_at():
    """When an issue left the open queue: closed_at (its last update for rows synced before
    closed_at was kept), or its last update when it left open (handed off, relabelled); else NULL."""
    return Case(
        When(state=Issue.State.CLOSED, then=Coalesce("closed_at", "updated_at")),
        When(in_queue=False, then=F("updated_at")),
        default=None,
        output_field=DateTimeField(),
    )


def queue_health(*, weeks: int = DEFAULT_WEEKS, now: datetime | None = None) -> QueueHealth:
    """The figures of the metrics page for the last `weeks` weeks (the current one included)."""
    now = now or timezone.now()
    weeks = max(1, min(weeks, MAX_WEEKS))
    first = week_start(now) - timedelta(days=7 * (weeks - 1))
    bounds = [timezone.make_aware(datetime.combine(first + timedelta(days=7 * i), datetime.min.time()))
              for i in range(weeks + 1)]
    rows = _weekly_flow(bounds)
    health = QueueHealth(weeks=rows, age_buckets=_age_buckets(now))
    _time_to_triage(health, bounds)
    health.per_triager = _per_triager(bounds[0])
    return health


def _weekly_flow(bounds: list[datetime]) -> list[Week]:
    """Opened and left per week, and the open count at each week's end: two grouped queries, each
    one pass over the issues whatever the number of weeks (what came before the window is one group)."""
    opened = _per_week(Issue.objects.filter(is_pull_request=False), F("created_at"), bounds[0])
    left = _per_week(Issue.objects.filter(is_pull_request=False), _left_at(), bounds[0])
    open_count = opened.get(None, 0) - left.get(None, 0)
    rows = []
    for start in bounds[:-1]:
        day = timezone.localdate(start)
        open_count += opened.get(day, 0) - left.get(day, 0)
        rows.append(Week(start=day, opened=opened.get(day, 0), closed=left.get(day, 0), open_at_end=open_count))
    return rows


def _per_week(qs, moment, since: datetime) -> dict[date | None, int]:
    """{Monday: how many rows' moment fell in that week}, with None for every moment before since."""
    week = Case(When(moment__lt=since, then=None), default=TruncWeek("moment", output_field=DateField()),
                output_field=DateField())
    rows = qs.annotate(moment=moment).filter(moment__isnull=False).annotate(week=week).values("week").annotate(n=Count("pk"))
    # PostgreSQL answers the truncated week as a (local, naive) datetime, SQLite as a date.
    return {row["week"].date() if isinstance(row["week"], datetime) else row["week"]: row["n"] for row in rows.order_by()}


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
    """end - start in seconds, as a float computed by the database (PostgreSQL and SQLite).

    Fetching a float per issue rather than two timestamps keeps a year of issues cheap to read.
    """

    output_field = FloatField()
    arity = 2

    def as_postgresql(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, arg_joiner=" - ",
                           template="CAST(EXTRACT(EPOCH FROM (%(expressions)s)) AS double precision)", **extra)

    def as_sqlite(self, compiler, connection, **extra):
        return self.as_sql(compiler, connection, arg_joiner=") - julianday(",
                           template="((julianday(%(expressions)s)) * 86400.0)", **extra)


def _time_to_triage(health: QueueHealth, bounds: list[datetime]) -> None:
    """Hours from opening to the first decision, for issues first decided in the window; per week too."""
    firsts = (
        Issue.objects.filter(first_decided_at__gte=bounds[0]).order_by()
        .annotate(took=SecondsBetween("first_decided_at", "created_at"),
                  since=SecondsBetween("first_decided_at", Value(bounds[0], output_field=DateTimeField())))
        .values_list("took", "since")
    )
    per_week: list[list[float]] = [[] for _ in health.weeks]
    for took, since in firsts:
        hours = max(took / 3600, 0.0)
        health.triage_hours.append(hours)
        per_week[min(int(since // WEEK_S), len(per_week) - 1)].append(hours)
    for week, hours in zip(health.weeks, per_week):
        week.triaged = len(hours)
        week.triage_median_h = statistics.median(hours) if hours else None
        week.triage_p90_h = percentile(hours, 0.9)


def _per_triager(since: datetime) -> list[tuple[str, int, int]]:
    rows = (
        TriageDecision.objects.filter(created_at__gte=since)
        .values("user__username")
        .annotate(total=Count("pk"), applied=Count("pk", filter=Q(status=TriageDecision.Status.APPLIED)))
        .order_by("-total", "user__username")
    )
    return [(row["user__username"] or "(deleted user)", row["total"], row["applied"]) for row in rows]


# --- rubric health: the triagers' own decisions against the rubric's suggestions ----------------

ISSUE_LINKS = 8


@dataclass
class RuleHealth:
    """How one rule id's suggestions fared: shown, applied, unticked; precision = applied / decided."""

    rule_id: str
    shown: int = 0
    applied: int = 0
    unticked: int = 0
    applied_issues: list[int] = field(default_factory=list)   # newest first, at most ISSUE_LINKS
    unticked_issues: list[int] = field(default_factory=list)

    @property
    def precision(self) -> float | None:
        decided = self.applied + self.unticked
        return self.applied / decided if decided else None


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
        if o.applied:
            row.applied += 1
            _link(row.applied_issues, o.issue_number)
        elif o.unticked:
            row.unticked += 1
            _link(row.unticked_issues, o.issue_number)
    return (sorted(rules.values(), key=lambda r: (-r.shown, r.rule_id)),
            sorted(added.values(), key=lambda a: (-a.count, a.label)))


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
    writer.writerow(["rule_id", "label", "shown", "applied", "unticked", "added", "precision", "issues"])
    for r in rules:
        precision = "" if r.precision is None else f"{r.precision:.3f}"
        writer.writerow([r.rule_id, "", r.shown, r.applied, r.unticked, "", precision,
                         " ".join(f"#{n}" for n in r.applied_issues + r.unticked_issues)])
    for a in added:
        writer.writerow(["", a.label, "", "", "", a.count, "", " ".join(f"#{n}" for n in a.issues)])
