"""An issue's repro across torch builds (issue #29): what its runs on several builds say, and re-checking the open
issues' repros on a newer build once a worker reports one.

compare_issue() runs when a bisection finishes, and compare_issues() when the sync or a webhook changes issues (an
edit may give the reporter's version): each current repro's runs on each device, newest version first, go to
bisection.builds.compare(), and bisection.evidence.decide() weighs them together (issues #35, #36): "regression"
(a repro that counts passes on an older build and fails on a newer: R11) and "may_be_fixed" (only on evidence: the
same repro reproduced on an older build, or the reporter's, and passes on a newer on the report's device and hardware,
no other current repro still failing) are stored on the issue for the queue's markers, its "may be fixed" lane, the
confirm_fixed reply and the suggestions (Issue.regression_evidence).

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

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rubric_app.bisection import builds, evidence
from rubric_app.bisection.builds import repro_hash
from rubric_app.models import BisectionRun, Issue, WorkerHeartbeat
from rubric_app.runs import coordinator, repro_sources
from rubric_app.vocabulary import MAY_BE_FIXED, REGRESSION

FINDINGS = (REGRESSION, MAY_BE_FIXED)
RECHECKED = ("reproduced", "passed")
# A re-check that failed (no worker, a refused sandbox) is not tried again for this long: the budget is for runs.
RETRY_AFTER = timedelta(days=1)


COMPARED = (
    "pk",
    "repro_hash",
    "device",
    "build",
    "torch_version",
    "results",
    "repro_code",
    "repro_style",
    "repro_author",
    "repro_counts",
    "hardware",
)


def compare_issue(issue: Issue) -> builds.Comparison | None:
    """Compare the runs of each of the issue's current repros, on each device, across torch versions, and weigh them
    together (bisection/evidence.py); store the finding on the issue. (A CUDA run passing where a CPU run failed says
    nothing about a fix; a stranger's passing repro beside the reporter's failing one says nothing either.)"""
    runs = list(_finished(issue.bisection_runs.all()).values_list(*COMPARED, named=True))
    comparison = _compare(runs, issue, list(issue.comments.all()))
    issue.build_finding, issue.build_comparison = _stored(comparison)
    Issue.objects.filter(pk=issue.pk).update(build_finding=issue.build_finding, build_comparison=issue.build_comparison)
    return comparison


def compare_issues(issue_ids: list[int]) -> int:
    """Compare again the issues whose text changed (the reporter's version may have, or a repro), reading all their
    runs in one query and their comments in another; store the findings that changed and return how many did."""
    runs: dict[int, list] = defaultdict(list)
    for row in _finished(BisectionRun.objects.filter(issue_id__in=issue_ids)).values_list(
        "issue_id", *COMPARED, named=True
    ):
        runs[row.issue_id].append(row)
    changed = 0
    issues = Issue.objects.filter(pk__in=list(runs)).only(
        "pk", "title", "body", "author", "build_finding", "build_comparison"
    )
    for issue in issues.prefetch_related("comments"):
        finding, comparison = _stored(_compare(runs[issue.pk], issue, list(issue.comments.all())))
        if (finding, comparison) != (issue.build_finding, issue.build_comparison):
            Issue.objects.filter(pk=issue.pk).update(build_finding=finding, build_comparison=comparison)
            changed += 1
    return changed


def _finished(runs):
    return runs.filter(status=BisectionRun.Status.DONE).exclude(torch_version="").order_by("-finished_at", "-pk")


def _compare(runs: list, issue: Issue, comments: list) -> builds.Comparison | None:
    """runs: COMPARED rows (named), newest first. Every current repro counts: one still posted in the issue, or one no
    post holds (a triager typed it). A repro whose post was edited away or deleted no longer speaks for the issue."""
    if not runs:
        return None
    posted = repro_sources.posted_repros(issue, comments)
    post_of = {code_hash: post for post in posted for code_hash in post.hashes}
    default = repro_sources.default_repro(posted)
    report = evidence.read_report(
        issue.title, issue.body, (default.repro.original or default.repro.code) if default else ""
    )
    grouped: dict[str, list] = defaultdict(list)
    for row in runs:
        grouped[row.repro_hash].append(row)
    repros = []
    for code_hash, rows in grouped.items():
        post, first = post_of.get(code_hash), rows[0]
        if post is None and first.repro_author:
            continue
        # A run of the posted script's conversion: what the script did with the compiled results was dropped.
        converted = post is not None and post.repro.original and code_hash == repro_hash(post.repro.code)
        repros.append(
            evidence.Repro(
                repro_hash=code_hash,
                runs=tuple(
                    evidence.Run(
                        r.pk, r.build, r.torch_version, "cuda" if r.device == "cuda" else "cpu", r.results, r.hardware
                    )
                    for r in rows
                ),
                author=post.author if post else first.repro_author,
                counts=post.counts if post else first.repro_counts,
                by_reporter=post.by_reporter if post else False,
                checks_result=evidence.checks_result(
                    first.repro_code,
                    first.repro_style,
                    original=post.repro.original if converted else "",
                    raises=report.raises,
                ),
            )
        )
    return evidence.decide(report, repros)


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
    """Each open queue issue's newest finished run (by torch version, then time) of each of its repros, oldest
    checked first: every current repro's runs count (a repro still failing keeps an issue out of "may be fixed")."""
    rows = (
        BisectionRun.objects.filter(
            status=BisectionRun.Status.DONE, issue__in_queue=True, issue__state=Issue.State.OPEN
        )
        .exclude(torch_version="")
        .select_related("issue")
        .defer("log", "results", "sandbox_report")
        .order_by("issue_id", "-finished_at", "-pk")
    )
    latest: dict[tuple[int, str], BisectionRun] = {}
    for run in rows:
        kept = latest.get((run.issue_id, run.repro_hash))
        if kept is None or builds.newer(run.torch_version, kept.torch_version):
            latest[(run.issue_id, run.repro_hash)] = run
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
            repro_author=run.repro_author,
            repro_counts=run.repro_counts,
        )
        coordinator.start_run(recheck)
    return Recheck(issue.number, recheck, "queued")
