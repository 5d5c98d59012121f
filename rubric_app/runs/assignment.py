"""Giving runs to runners: the coordinator binds each queued run to one registered runner and sends the job to that
runner's own queue (docs/bisection.md#runners), as a CI coordinator gives each job to one agent.

A run is bound before its job leaves: only the runner it is assigned to can claim it, and only its signed reports
count (coordinator.record), so a job read by anyone else helps them to nothing. assign() runs whenever that could give
a run somewhere to go (a run queued, a runner's beat, a run finished or put back, the sweep), under one lock, and
gives the queued runs in order (a person's, then the automatic ones, then the re-checks; oldest first) to live runners
that serve the run's lane, device and torch build and have a free slot. A person's run that finds every such runner
busy with automatic runs is given to one of them anyway: its job waits in that runner's queue, and the automatic run
makes way at its next mode boundary (runner.person_waiting). A job that vanished (its runner's beat shows it neither
holds nor waits for it) or whose runner went silent goes back to the queue with a new token and to another runner.
"""

from __future__ import annotations

import logging
import secrets
import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Count, F, Q
from django.utils import timezone

from rubric_app import dispatch
from rubric_app.models import BisectionRun, Runner, WorkerHeartbeat
from rubric_app.runs import broker, jobs

log = logging.getLogger(__name__)

QUEUED, RUNNING = BisectionRun.Status.QUEUED, BisectionRun.Status.RUNNING
# The device each registered device's runner serves (runner.SERVES, by queue): a GPU runner takes cuda and "both".
DEVICES = {"cpu": ("cpu",), "cuda": ("cuda", "both")}
# One number for the lock that makes assignments one at a time (PostgreSQL's advisory lock).
_LOCK = 4_920_049


def longest_run() -> timedelta:
    """An upper bound on one bisection: six modes plus four re-runs, each at most the timeout, plus slack."""
    return timedelta(seconds=10 * settings.BISECTION_TIMEOUT_S + 300)


@dataclass
class Slot:
    """A live runner as assign() sees it: what it serves, what it holds."""

    runner: Runner
    lanes: frozenset[str]
    builds: frozenset[str]
    slots: int
    held: int = 0
    # Whether everything it holds (runs or waits for) is an automatic run, which makes way for a person's.
    only_automatic: bool = True

    def serves(self, run: BisectionRun) -> bool:
        return self.serves_lane(run) and (not run.build or run.build in self.builds)

    def serves_lane(self, run: BisectionRun) -> bool:
        return run.queue_name in self.lanes and run.device in DEVICES[self.runner.device]


def job_for(run: BisectionRun) -> jobs.Job:
    """The self-contained job of a run: the repro, its modes' device, the build, the limits, whether it makes way."""
    # Untrusted code nobody asked for: its compile modes share one budget (auto_bisect.py, issue 35). A re-check on a
    # newer build re-runs a repro that already reproduced, with the limits its first run had.
    budget = settings.AUTO_BISECT_BUDGET_S if run.automatic and not run.recheck_of_id else None
    return jobs.Job(
        run_id=run.pk,
        token=run.job_token,
        repro=run.repro_code,
        style=run.repro_style if run.repro_style in ("script", "module") else "script",
        device=run.device,
        build=run.build,
        limits=jobs.Limits(
            timeout_s=settings.BISECTION_TIMEOUT_S, memory_mb=settings.BISECTION_MEMORY_MB, budget_s=budget
        ),
        may_make_way=run.automatic,
    )


def live_runners(now=None) -> list[Slot]:
    """The registered, unrevoked runners whose beat is fresh, with what they serve and hold, in two queries."""
    now = now or timezone.now()
    stale = now - timedelta(seconds=settings.WORKER_HEARTBEAT_STALE_S)
    beats = (
        WorkerHeartbeat.objects.filter(runner__revoked_at__isnull=True, seen_at__gte=stale)
        .select_related("runner")
        .order_by("runner__name")
    )
    found = {
        beat.runner_id: Slot(beat.runner, frozenset(beat.queues), frozenset(beat.builds), max(1, beat.slots))
        for beat in beats
    }
    held = (
        BisectionRun.objects.filter(assigned_to__in=found, status__in=(QUEUED, RUNNING))
        .values("assigned_to")
        .annotate(held=Count("pk"), people=Count("pk", filter=Q(automatic=False)))
    )
    for row in held:
        slot = found[row["assigned_to"]]
        slot.held, slot.only_automatic = row["held"], row["people"] == 0
    return list(found.values())


def assign(now=None) -> int:
    """Give the queued runs to live runners that can take them (see the module); returns how many were given. Each
    job is sent once this transaction commits."""
    now = now or timezone.now()
    given = 0
    waiting = BisectionRun.objects.filter(status=QUEUED, assigned_to__isnull=True)
    if not waiting.exists():
        return 0  # most beats: one query, and no transaction holding locks on several tables
    with transaction.atomic():
        _serialize()
        slots = live_runners(now)
        if not slots:
            return 0
        in_order = waiting.order_by("automatic", F("recheck_of").asc(nulls_first=True), "created_at").defer("log")
        for run in in_order[:500]:
            slot = _free(slots, run) or (None if run.automatic else _making_way(slots, run))
            if slot is not None and give(run, slot.runner, now):
                slot.held += 1
                slot.only_automatic = slot.only_automatic and run.automatic
                given += 1
            elif slot is None and run.build:
                _refuse_unhosted_build(slots, run, now)
    return given


def _refuse_unhosted_build(slots: list[Slot], run: BisectionRun, now) -> None:
    """End a run asking for a torch build no live runner of its lane hosts, while some are live: it would wait for
    nothing (the issue page offers only the builds the live runners host; this is a runner changed meanwhile)."""
    serving = [slot for slot in slots if slot.serves_lane(run)]
    if not serving or any(run.build in slot.builds for slot in serving):
        return
    hosted = ", ".join(sorted(set().union(*(slot.builds for slot in serving))))
    BisectionRun.objects.filter(pk=run.pk, status=QUEUED, assigned_to__isnull=True).update(
        status=BisectionRun.Status.FAILED,
        finished_at=now,
        error=f"No live runner of the {run.queue_name} lane hosts the torch build {run.build!r} (they host "
        f"{hosted}: TORCH_BUILDS). Nothing ran; start it again on one of those.",
    )


def _free(slots: list[Slot], run: BisectionRun) -> Slot | None:
    free = [slot for slot in slots if slot.serves(run) and slot.held < slot.slots]
    return min(free, key=lambda slot: slot.held, default=None)


def _making_way(slots: list[Slot], run: BisectionRun) -> Slot | None:
    """A runner, busy with automatic runs only, that will make way for this person's run."""
    return next((s for s in slots if s.serves(run) and s.held == s.slots and s.only_automatic), None)


def give(run: BisectionRun, runner: Runner, now=None) -> bool:
    """Bind the queued run to `runner` with a new token and send it the job on commit; False if someone was faster."""
    token = secrets.token_urlsafe(24)
    bound = BisectionRun.objects.filter(pk=run.pk, status=QUEUED, assigned_to__isnull=True).update(
        assigned_to=runner, assigned_at=now or timezone.now(), job_token=token
    )
    if not bound:
        return False
    run.job_token, run.assigned_to = token, runner
    job = job_for(run).as_message()
    queue, expires = broker.jobs_queue(runner.name), longest_run().total_seconds()
    transaction.on_commit(lambda: dispatch.send_job(job, queue=queue, message_id=str(uuid.uuid4()), expires=expires))
    log.info("run %s given to runner %s", run.pk, runner.name)
    return True


def unassigned(**fields) -> dict:
    """The fields of a run back in the queue, bound to no runner: the next assignment makes its token anew."""
    return dict(
        status=QUEUED,
        assigned_to=None,
        assigned_at=None,
        job_token="",
        started_at=None,
        worker="",
        runner="",
        runner_boot="",
        message_id="",
        attempt="",
        current_mode="",
        results=[],
        **fields,
    )


def take_back(rows, why: str) -> int:
    """Put the queued-but-not-started runs of `rows` back in the queue (their job was lost, or their runner left);
    returns how many."""
    taken = rows.filter(status=QUEUED).exclude(assigned_to=None).update(**unassigned())
    if taken:
        log.warning("%d run(s) taken back from their runner: %s", taken, why)
    return taken


def reconcile(runner: Runner, beat: WorkerHeartbeat) -> int:
    """Take back the runs given to `runner` whose job it neither holds nor has waiting, by a beat it sent a beat's
    interval or more after the job was sent: the message vanished on the broker. Returns how many."""
    if beat.waiting or beat.sent_at is None:
        return 0
    sent_before = beat.sent_at - timedelta(seconds=settings.WORKER_HEARTBEAT_S)
    lost = BisectionRun.objects.filter(
        assigned_to=runner, status=QUEUED, assigned_at__lt=sent_before, message_id=""
    ).exclude(pk__in=beat.active or [0])
    return take_back(lost, f"runner {runner.name} neither holds nor waits for their job")


def release_silent(now=None) -> int:
    """Take back the runs given to runners that went silent (no beat for WORKER_HEARTBEAT_STALE_S) or were revoked
    before starting them."""
    now = now or timezone.now()
    stale = now - timedelta(seconds=settings.WORKER_HEARTBEAT_STALE_S)
    alive = WorkerHeartbeat.objects.filter(runner__isnull=False, seen_at__gte=stale, runner__revoked_at__isnull=True)
    rows = BisectionRun.objects.filter(status=QUEUED, assigned_at__lt=stale).exclude(
        assigned_to__in=alive.values("runner")
    )
    return take_back(rows, "their runner went silent or was revoked")


def _serialize() -> None:
    """Take the assignment lock for the rest of the transaction: two assigners would give one runner two jobs."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [_LOCK])
    else:  # SQLite (the embedded default): a write statement takes its one writer's lock now, not at the first bind
        WorkerHeartbeat.objects.filter(pk=-1).update(waiting=0)
