"""Shared by the pages' views: permission checks, access helpers that check and prefetch together, the
htmx partial and polling helpers."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.core.paginator import InvalidPage, Page, Paginator
from django.db.models import OuterRef, Prefetch, Subquery
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.template.loader import render_to_string
from django_htmx.http import HttpResponseStopPolling

from rubric_app.models import (
    BisectionRun,
    Comment,
    Issue,
    Suggestion,
    TriageDecision,
)

PAGE_SIZE = 50


def require(request: HttpRequest, perm: str) -> None:
    if not request.user.has_perm(f"rubric_app.{perm}"):
        raise PermissionDenied(f"You need the {perm.replace('_', ' ')} permission.")


def page_or_last(rows, number: str | None) -> tuple[Page, str]:
    """The requested page, or the last one with a note saying so (never a silent page 1)."""
    paginator = Paginator(rows, PAGE_SIZE)
    try:
        return paginator.page(number or 1), ""
    except InvalidPage:
        page = paginator.page(paginator.num_pages)
        return page, f"There is no page {number}: showing page {page.number}, the last."


def partial_template(request: HttpRequest, template: str, partial: str) -> str:
    return f"{template}#{partial}" if request.htmx else template


def polled(request: HttpRequest, partial: str, context: dict, finished: bool) -> HttpResponse:
    """An issue-page fragment that htmx polls; once finished it is answered with 286 so polling stops."""
    template = f"rubric_app/issue.html#{partial}"
    if finished:
        return HttpResponseStopPolling(render_to_string(template, context, request))
    return render(request, template, context)


def latest_done_run(field: str, **kwargs) -> Subquery:
    """One field of the issue's newest finished bisection, as a column: one query for the whole page."""
    runs = BisectionRun.objects.filter(issue=OuterRef("pk"), status=BisectionRun.Status.DONE).order_by("-created_at")
    return Subquery(runs.values(field)[:1], **kwargs)


def latest_verdict() -> Subquery:
    """The newest finished bisection's summary, as a column."""
    return latest_done_run("verdict_summary")


def get_issue_for_user(request: HttpRequest, number: int, perm: str = "view_issue") -> Issue:
    """Return the issue with everything its page shows prefetched, or 403/404."""
    require(request, perm)
    qs = Issue.objects.select_related("possible_duplicate").prefetch_related(
        "labels",
        Prefetch("comments", queryset=Comment.objects.order_by("created_at", "github_id")),
        Prefetch("suggestions", queryset=Suggestion.objects.order_by("kind", "-confidence", "label")),
        # The page shows a run's results and sandbox, never its log nor its code.
        Prefetch(
            "bisection_runs",
            queryset=BisectionRun.objects.select_related("requested_by")
            .defer("log", "repro_code")
            .order_by("-created_at"),
        ),
    )
    return get_object_or_404(qs, number=number)


def waiting(
    live: dict[str, list[str]], *, run: BisectionRun | None = None, decision: TriageDecision | None = None
) -> dict:
    """What the run and decision fragments need to say whether a worker will take them (RUBRIC-free liveness)."""
    return {
        "workers": live,
        "run_workers": live.get(run.queue_name, []) if run else [],
        "decision_workers": live.get("github", []),
        "wait_minutes": settings.QUEUE_WAIT_TIMEOUT_MINUTES,
    }
