"""Bisect a repro when it arrives, without anyone clicking (issue #29): the rubric's best evidence is what the
compiler does with the repro (R2), and a triager opening an issue should find a verdict already there.

It is untrusted code run at an outsider's request, so every run is bounded here, before anything is queued:
- AUTO_BISECT: off, cpu (repros that do not name CUDA), or all (CUDA repros too, when a GPU worker is live);
- one run per repro per issue: the code's hash, so an edit that keeps the code runs nothing;
- AUTO_BISECT_PER_HOUR runs in all and AUTO_BISECT_PER_AUTHOR a day for whoever posted the repro; but an author's
  first report is never turned away by a flood of others' (issue 35): over the hourly budget it gets a place
  (status waiting) that the sweep sends, oldest first, as soon as the budget frees (release_waiting);
- a bounded cost: its compile modes together get one per-mode timeout after the eager run (AUTO_BISECT_BUDGET_S,
  harness.bisect's budget_s), and it makes way for a run a person asks for at its next mode (runner.py);
- no run for a repro that downloads models or data: the sandbox has no network, so it is recorded at once as
  failed with "needs network" instead of spending a run to learn it;
- its own low-priority queues (cpu_auto, gpu_auto): a worker takes a human's run (cpu, gpu) first.
Each automatic run is a BisectionRun with automatic=True and caused_by saying whose post caused it. Its repro is
the reporter's or a maintainer's (repro_sources.py): another commenter's is never run without a triager choosing it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from rubric_app import bisection
from rubric_app.bisection import builds
from rubric_app.bisection.builds import repro_hash
from rubric_app.models import BisectionRun, Issue, WorkerHeartbeat
from rubric_app.runs import coordinator, repro_sources

# A repro that fetches weights, data sets or anything else over the network: it cannot pass in the sandbox.
NEEDS_NETWORK = re.compile(
    r"\bfrom_pretrained\(|\btorch\.hub\.|\bload_dataset\(|\burllib\.request\b|\brequests\.(?:get|post)\("
    r"|\bwget\b|\bsnapshot_download\(|\bhf_hub_download\(|download\s*=\s*True"
)


@dataclass(frozen=True)
class Outcome:
    """What auto-bisect did for one issue: the run it recorded (queued, or failed at once), or why none."""

    run: BisectionRun | None
    reason: str


def queue_for_issues(issue_ids: list[int], *, cause: str, backlog: bool = False) -> list[Outcome]:
    """Consider each issue's repro for an automatic run (see the module's bounds); return what was done.

    cause: what brought the text ("sync", "webhook"), shown with the run as who caused it. backlog: an operator's
    pass over issues already here (manage.py auto_bisect): see queue_for_issue.
    """
    if settings.AUTO_BISECT == "off" or not issue_ids:
        return []
    issues = Issue.objects.filter(pk__in=issue_ids, is_pull_request=False, state=Issue.State.OPEN)
    issues = issues.prefetch_related("comments")
    return [queue_for_issue(issue, cause=cause, backlog=backlog) for issue in issues]


def queue_for_issue(issue: Issue, *, cause: str, backlog: bool = False) -> Outcome:
    """backlog: an operator asked for the open queue's repros (manage.py auto_bisect; make run's demo at each start).
    The hourly budget bounds what outsiders' posts can start, one arrival at a time; an operator's pass is bounded by
    the queue it names, so it neither waits for that budget nor spends it (the demo's 20-odd repros sat waiting
    behind it for minutes after each start, and then starved the hour's arrivals). The rest holds: one run per repro,
    each author's daily budget, the sandbox, the automatic lanes' low priority."""
    if settings.AUTO_BISECT == "off":
        return Outcome(None, "automatic bisection is off (AUTO_BISECT=off)")
    # Whose repro counts (repro_sources.py): the reporter's or a maintainer's, never another commenter's on its own.
    posted = repro_sources.posted_repros(issue, list(issue.comments.all()))
    chosen = repro_sources.default_repro(posted)
    if chosen is None:
        others = ", ".join(sorted({f"@{p.author}" for p in posted})) or "no one"
        return Outcome(
            None,
            f"no repro from the reporter or a maintainer (offered on the issue page, never run automatically: "
            f"{others}'s)"
            if posted
            else "no repro in the issue",
        )
    repro, poster = chosen.repro, chosen.author
    code_hash = repro_hash(repro.code)
    device = BisectionRun.Device.CUDA if bisection.names_cuda(repro.original or repro.code) else BisectionRun.Device.CPU
    if device == BisectionRun.Device.CUDA:
        if settings.AUTO_BISECT != "all":
            return Outcome(None, "the repro needs CUDA and AUTO_BISECT=cpu runs CPU repros only")
        if not WorkerHeartbeat.objects.queues().get("gpu"):
            return Outcome(None, "the repro needs CUDA and no GPU worker is live")
    with transaction.atomic():
        # One automatic run at a time decides against the budgets: the row lock on the issue orders two
        # deliveries for one issue; the budgets are counted inside the same transaction.
        Issue.objects.select_for_update().filter(pk=issue.pk).first()
        if BisectionRun.objects.filter(issue=issue, repro_hash=code_hash).exists():
            return Outcome(None, "this repro was already bisected")
        refusal = _over_budget(poster, hourly=not backlog)
        # An author's first report waits for the hourly budget instead of being dropped (the per-author one cannot
        # refuse it): a flood of throwaway reports can delay a newcomer's run, never take it away.
        waits = bool(refusal) and bool(poster) and not _has_reported(poster)
        if refusal and not waits:
            return Outcome(None, refusal)
        # The newest build a live worker hosts (a nightly, when there is one): a verdict on a build older than the
        # report says little, and one on the reporter's build or newer is the evidence R2 means.
        newest = builds.newest(WorkerHeartbeat.objects.hosted_builds()[BisectionRun.QUEUES[device]])
        run = BisectionRun.objects.create(
            issue=issue,
            device=device,
            build=newest[0] if newest else "",
            repro_code=repro.code,
            repro_style=repro.style,
            repro_hash=code_hash,
            automatic=True,
            caused_by=f"@{poster} ({cause})" if poster else cause,
            caused_by_login=poster,
            repro_author=poster,
            backlog=backlog,
            status=BisectionRun.Status.WAITING if waits else BisectionRun.Status.QUEUED,
        )
        fetches = NEEDS_NETWORK.search(repro.code)
        if fetches:
            now = timezone.now()
            run.status, run.started_at, run.finished_at = BisectionRun.Status.FAILED, now, now
            run.error = (
                f"needs network: the repro downloads ({fetches.group(0).strip()}) and the sandbox has none. "
                "Nothing ran; ask for a repro that builds its own inputs."
            )
            run.save(update_fields=["status", "started_at", "finished_at", "error"])
            return Outcome(run, "needs network")
        if waits:
            return Outcome(run, f"waiting: @{poster}'s first report, sent when the hourly budget frees ({refusal})")
        coordinator.start_run(run)
    return Outcome(run, "queued")


def hourly_spent(now=None) -> QuerySet[BisectionRun]:
    """The automatic runs that spend this hour's budget (AUTO_BISECT_PER_HOUR): sent in the last hour, not
    re-checks (build_checks.py has their budget), not an operator's backlog pass (queue_for_issue)."""
    now = now or timezone.now()
    automatic = BisectionRun.objects.filter(automatic=True, recheck_of__isnull=True, backlog=False)
    # A waiting place spends the hourly budget only once it is sent (release_waiting dates it then).
    return automatic.exclude(status=BisectionRun.Status.WAITING).filter(created_at__gte=now - timedelta(hours=1))


def _over_budget(poster: str, *, hourly: bool = True) -> str:
    """Why the budgets refuse another automatic run now ("" when they allow it). Re-checks on a new build have a
    budget of their own (build_checks.py) and do not count here."""
    now = timezone.now()
    automatic = BisectionRun.objects.filter(automatic=True, recheck_of__isnull=True)
    if hourly and hourly_spent(now).count() >= settings.AUTO_BISECT_PER_HOUR:
        return f"over the hourly budget ({settings.AUTO_BISECT_PER_HOUR} automatic runs an hour, AUTO_BISECT_PER_HOUR)"
    if poster:
        today = automatic.filter(caused_by_login=poster, created_at__gte=now - timedelta(days=1)).count()
        if today >= settings.AUTO_BISECT_PER_AUTHOR:
            return (
                f"over @{poster}'s budget ({settings.AUTO_BISECT_PER_AUTHOR} automatic runs a day, "
                "AUTO_BISECT_PER_AUTHOR)"
            )
    return ""


def _has_reported(poster: str) -> bool:
    """Whether an automatic run was ever recorded for `poster`'s repro (any status, waiting included): their
    first report is the one without."""
    return BisectionRun.objects.filter(automatic=True, recheck_of__isnull=True, caused_by_login=poster).exists()


def release_waiting(now=None) -> int:
    """Send the waiting automatic runs (authors' first reports), oldest first, as far as the hourly budget allows now;
    returns how many. Each is dated when sent, so it spends the budget of this hour. The sweep calls it (beat, every
    5 minutes), so a place is honoured within minutes of the budget freeing."""
    now = now or timezone.now()
    room = settings.AUTO_BISECT_PER_HOUR - hourly_spent(now).count()
    if room <= 0 or settings.AUTO_BISECT == "off":
        return 0
    with transaction.atomic():
        waiting = (
            BisectionRun.objects.select_for_update(skip_locked=True)
            .filter(status=BisectionRun.Status.WAITING)
            .order_by("created_at", "pk")[:room]
        )
        runs = list(waiting)
        for run in runs:
            # Conditional: a second sweep at the same moment finds it no longer waiting.
            BisectionRun.objects.filter(pk=run.pk, status=BisectionRun.Status.WAITING).update(
                status=BisectionRun.Status.QUEUED, created_at=now
            )
            coordinator.start_run(run)
    return len(runs)
