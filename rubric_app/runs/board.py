"""What the runners page shows (an operator's view, like a CI system's agents page): each registered runner with what
its last authenticated beat said and what it runs now, each lane's waiting runs and the oldest wait, and the automatic
runs that wait for their budget. A fixed number of queries, whatever the number of runners."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import BooleanField, Count, ExpressionWrapper, Min, Q
from django.utils import timezone

from rubric_app.models import BisectionRun, Runner, RunnerEvent
from rubric_app.vocabulary import BISECTION_QUEUES


@dataclass
class RunnerRow:
    runner: Runner
    beat: object | None  # its WorkerHeartbeat, or None before its first
    silent: bool
    running: list[BisectionRun] = field(default_factory=list)
    given: list[BisectionRun] = field(default_factory=list)  # given to it, not started yet

    @property
    def state(self) -> str:
        if not self.runner.is_active:
            return "revoked"
        if self.beat is None:
            return "never seen"
        if self.silent:
            return "silent"
        return "busy" if self.running else "idle"


@dataclass(frozen=True)
class Lane:
    name: str
    waiting: int
    oldest: datetime | None


@dataclass
class Board:
    runners: list[RunnerRow]
    lanes: list[Lane]
    budget_waiting: int
    budget_oldest: datetime | None
    events: object  # a lazy queryset of RunnerEvent
    stale_s: float
    budget: Budget | None = None


@dataclass
class Budget:
    """The hourly budget of automatic runs (runs/auto_bisect.py) as it stands, and the runs waiting for it: why
    they wait, and when the next place frees."""

    per_hour: int
    spent: int  # automatic runs sent in the last hour
    frees_at: datetime | None  # when the oldest of them leaves the hour (the sweep sends a waiting run then)
    waiting: object  # a lazy queryset: the waiting runs, oldest first, with their issues (read only where shown)

    @property
    def why(self) -> str:
        if self.spent >= self.per_hour:
            return (
                f"the hourly budget is spent: {self.spent} of {self.per_hour} automatic runs sent in the last hour "
                "(AUTO_BISECT_PER_HOUR)"
            )
        return f"{self.spent} of {self.per_hour} sent in the last hour: the next sweep (every 5 minutes) sends them"


def board(now=None) -> Board:
    """The runners page's content (see the module), in six queries (seven with runs waiting for the budget)."""
    now = now or timezone.now()
    stale = now - timedelta(seconds=settings.WORKER_HEARTBEAT_STALE_S)
    rows = {
        runner.pk: RunnerRow(runner, getattr(runner, "heartbeat", None), False)
        for runner in Runner.objects.select_related("heartbeat").order_by("revoked_at", "name")
    }
    for row in rows.values():
        row.silent = row.beat is not None and row.beat.seen_at < stale
    held = (
        BisectionRun.objects.filter(
            assigned_to__in=rows, status__in=(BisectionRun.Status.QUEUED, BisectionRun.Status.RUNNING)
        )
        .select_related("issue")
        .only("pk", "status", "current_mode", "automatic", "started_at", "assigned_to", "issue__number", "issue__title")
        .order_by("started_at")
    )
    for run in held:
        row = rows[run.assigned_to_id]
        (row.running if run.status == BisectionRun.Status.RUNNING else row.given).append(run)
    waiting = (
        BisectionRun.objects.filter(status=BisectionRun.Status.QUEUED, assigned_to__isnull=True)
        .annotate(recheck=ExpressionWrapper(Q(recheck_of__isnull=False), output_field=BooleanField()))
        .values("device", "automatic", "recheck")
        .annotate(count=Count("pk"), oldest=Min("created_at"))
    )
    by_lane: dict[str, Lane] = {}
    for group in waiting:
        name = BisectionRun.lane(group["device"], automatic=group["automatic"], recheck=group["recheck"])
        before = by_lane.get(name)
        oldest = min(filter(None, [group["oldest"], before.oldest if before else None]))
        by_lane[name] = Lane(name, group["count"] + (before.waiting if before else 0), oldest)
    lanes = [by_lane.get(name, Lane(name, 0, None)) for queue in BISECTION_QUEUES.values() for name in sorted(queue)]
    hour = now - timedelta(hours=1)
    sent = Q(automatic=True, recheck_of__isnull=True, backlog=False, created_at__gte=hour) & ~Q(
        status=BisectionRun.Status.WAITING
    )  # what auto_bisect.hourly_spent counts, in the same query as the waiting runs
    waiting_q = Q(status=BisectionRun.Status.WAITING)
    budget = BisectionRun.objects.filter(waiting_q | sent).aggregate(
        count=Count("pk", filter=waiting_q),
        oldest=Min("created_at", filter=waiting_q),
        spent=Count("pk", filter=sent),
        first_sent=Min("created_at", filter=sent),
    )
    waiting_runs = (
        BisectionRun.objects.filter(waiting_q)
        .select_related("issue")
        .only("pk", "created_at", "caused_by", "device", "issue__number", "issue__title")
        .order_by("created_at", "pk")[:20]
    )
    first_sent = budget["first_sent"]
    frees_at = first_sent + timedelta(hours=1) if first_sent else None
    hourly = Budget(settings.AUTO_BISECT_PER_HOUR, budget["spent"], frees_at, waiting_runs)
    events = RunnerEvent.objects.select_related("runner")[:20]  # read only where shown (not by the board's poll)
    return Board(
        list(rows.values()),
        lanes,
        budget["count"],
        budget["oldest"],
        events,
        settings.WORKER_HEARTBEAT_STALE_S,
        hourly,
    )
