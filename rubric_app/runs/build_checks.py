"""An issue's repro across torch builds (issue #29): what its runs on several builds say, and re-checking the open
issues' repros on a newer build once a worker reports one.

compare_issue() runs when a bisection finishes, and compare_issues() when the sync or a webhook changes issues (an
edit may give the reporter's version): the same repro's runs on one device, newest version first, go to
bisection.builds.compare(); "regression" (passes on an older build, fails on a newer: R11) and "may_be_fixed"
(reproduced on an older build, or the reporter's, and passes on a newer) are stored on the issue for the queue's
markers, its "may be fixed" lane and the suggestions (Issue.regression_evidence).

queue_rechecks() runs with the sweep (every 5 minutes) and from `manage.py recheck_builds`: for each open queue
issue whose repro's newest run (reproduced or passed: a timeout tells nothing) was on an older torch than a live
worker of its queue hosts, it queues a re-run on that build in the lowest-priority queues (cpu_recheck,
gpu_recheck). What reproduced goes first (passing now: may be fixed); then what passed (failing now: a regression,
or a report against the nightly the release could not show). Bounded as every automatic run is, by a budget of its
own (RECHECK_PER_HOUR) so a new nightly's backlog never takes the arrivals' (AUTO_BISECT_PER_HOUR).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rubric_app.bisection import builds
from rubric_app.models import BisectionRun, Issue, WorkerHeartbeat
from rubric_app.runs.auto_bisect import TASK
from rubric_app.vocabulary import MAY_BE_FIXED, REGRESSION

FINDINGS = (REGRESSION, MAY_BE_FIXED)
RECHECKED = ("reproduced", "passed")
# A re-check that failed (no worker, a refused sandbox) is not tried again for this long: the budget is for runs.
RETRY_AFTER = timedelta(days=1)


COMPARED = ("pk", "repro_hash", "device", "build", "torch_version", "results")


def compare_issue(issue: Issue) -> builds.Comparison | None:
    """Compare the runs of the issue's latest repro, on the latest run's device, across torch versions; store the
    finding on the issue. (A CUDA run passing where a CPU run failed says nothing about a fix.)"""
    runs = list(_finished(issue.bisection_runs.all()).values_list(*COMPARED))
    comparison = _compare(runs, issue.body)
    issue.build_finding, issue.build_comparison = _stored(comparison)
    Issue.objects.filter(pk=issue.pk).update(build_finding=issue.build_finding, build_comparison=issue.build_comparison)
    return comparison


def compare_issues(issue_ids: list[int]) -> int:
    """Compare again the issues whose text changed (the reporter's version may have), reading all their runs in
    one query; store the findings that changed and return how many did."""
    runs: dict[int, list] = defaultdict(list)
    for issue_id, *row in _finished(BisectionRun.objects.filter(issue_id__in=issue_ids)).values_list(
        "issue_id", *COMPARED
    ):
        runs[issue_id].append(row)
    changed = 0
    for issue in Issue.objects.filter(pk__in=list(runs)).only("pk", "body", "build_finding", "build_comparison"):
        finding, comparison = _stored(_compare(runs[issue.pk], issue.body))
        if (finding, comparison) != (issue.build_finding, issue.build_comparison):
            Issue.objects.filter(pk=issue.pk).update(build_finding=finding, build_comparison=comparison)
            changed += 1
    return changed


def _finished(runs):
    return runs.filter(status=BisectionRun.Status.DONE).exclude(torch_version="").order_by("-finished_at", "-pk")


def _compare(runs: list[tuple], body: str) -> builds.Comparison | None:
    """runs: COMPARED rows, newest first. The latest run's repro and device are the ones compared."""
    if not runs:
        return None
    current = tuple(runs[0][1:3])
    same = [
        builds.BuildRun(pk, build, version, results)
        for pk, code, device, build, version, results in runs
        if (code, device) == current
    ]
    return builds.compare(same, builds.reported_version(body))


def _stored(comparison: builds.Comparison | None) -> tuple[str, dict]:
    """(Issue.build_finding, Issue.build_comparison) for a comparison."""
    if comparison is None:
        return "", {}
    return (comparison.kind if comparison.kind in FINDINGS else ""), comparison.as_dict()


def side_by_side(runs: list[BisectionRun]) -> list[BisectionRun]:
    """Of an issue's runs (newest first), the latest repro's finished runs on its device, one per torch version (its
    newest run), oldest version first; [] unless there are two versions to set side by side (the issue page)."""
    if not runs:
        return []
    current, per_version = (runs[0].repro_hash, runs[0].device), {}
    for run in runs:
        if (run.repro_hash, run.device) == current and run.status == BisectionRun.Status.DONE and run.torch_version:
            per_version.setdefault(run.torch_version, run)
    if len(per_version) < 2:
        return []
    return sorted(per_version.values(), key=lambda r: builds.version_key(r.torch_version))


@dataclass(frozen=True)
class Recheck:
    """One issue considered for a re-check: the run queued (or None) and why."""

    issue_number: int
    run: BisectionRun | None
    reason: str


def queue_rechecks(now=None) -> list[Recheck]:
    """Queue a re-run, on the newest live build, of each queue issue whose newest run was on an older one."""
    if settings.AUTO_BISECT == "off":
        return []
    now = now or timezone.now()
    newest = {queue: builds.newest(hosted) for queue, hosted in WorkerHeartbeat.objects.hosted_builds(now).items()}
    if settings.AUTO_BISECT != "all":
        newest["gpu"] = None
    done: list[Recheck] = []
    # What reproduced first: passing on the newer build is the finding triagers act on (may be fixed).
    for run in sorted(_latest_runs(), key=lambda r: r.outcome != "reproduced"):
        target = newest[BisectionRun.QUEUES[run.device]]
        if target is None or run.outcome not in RECHECKED or not builds.newer(target[1], run.torch_version):
            continue
        done.append(_queue_one(run, *target, now=now))
        if done[-1].reason.startswith("over"):
            break
    return done


def _latest_runs() -> list[BisectionRun]:
    """Each open queue issue's newest finished run (by torch version, then time) of its latest repro, oldest
    checked first."""
    rows = (
        BisectionRun.objects.filter(
            status=BisectionRun.Status.DONE, issue__in_queue=True, issue__state=Issue.State.OPEN
        )
        .exclude(torch_version="")
        .select_related("issue")
        .defer("log", "results", "sandbox_report")
        .order_by("issue_id", "-finished_at", "-pk")
    )
    latest: dict[int, BisectionRun] = {}
    current: dict[int, str] = {}
    for run in rows:
        current.setdefault(run.issue_id, run.repro_hash)
        if run.repro_hash != current[run.issue_id]:
            continue
        kept = latest.get(run.issue_id)
        if kept is None or builds.newer(run.torch_version, kept.torch_version):
            latest[run.issue_id] = run
    return sorted(latest.values(), key=lambda r: (r.finished_at, r.pk))


def _queue_one(run: BisectionRun, build: str, version: str, *, now) -> Recheck:
    issue = run.issue
    with transaction.atomic():
        Issue.objects.select_for_update().filter(pk=issue.pk).first()
        others = BisectionRun.objects.filter(issue=issue, repro_hash=run.repro_hash)
        if others.filter(status__in=[BisectionRun.Status.QUEUED, BisectionRun.Status.RUNNING]).exists():
            return Recheck(issue.number, None, "a run of this repro is already waiting or running")
        if others.filter(status=BisectionRun.Status.DONE, torch_version=version).exists():
            return Recheck(issue.number, None, f"already run on {version}")
        if others.filter(
            recheck_of__isnull=False, status=BisectionRun.Status.FAILED, finished_at__gte=now - RETRY_AFTER
        ).exists():
            return Recheck(issue.number, None, "a re-check failed within the last day")
        recent = BisectionRun.objects.filter(recheck_of__isnull=False, created_at__gte=now - timedelta(hours=1))
        if recent.count() >= settings.RECHECK_PER_HOUR:
            return Recheck(
                issue.number,
                None,
                f"over the hourly budget ({settings.RECHECK_PER_HOUR} re-checks an hour, RECHECK_PER_HOUR)",
            )
        recheck = BisectionRun.objects.create(
            issue=issue,
            device=run.device,
            repro_code=run.repro_code,
            repro_style=run.repro_style,
            repro_hash=run.repro_hash,
            build=build,
            automatic=True,
            recheck_of=run,
            caused_by=f"a newer build: {build} {version} (re-check of run {run.pk} on {run.torch_version})",
        )
        queue = recheck.queue_name
        transaction.on_commit(lambda: current_app.send_task(TASK, args=(recheck.pk,), queue=queue))
    return Recheck(issue.number, recheck, "queued")
