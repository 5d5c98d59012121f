"""The list pages: bisections, the audit, metrics, rubric health (and its CSV), and the health check."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from rubric_app.github import skill_files
from rubric_app.models import (
    BisectionRun,
    TriageDecision,
)
from rubric_app.triage import metrics
from rubric_app.web import health as health_check
from rubric_app.web.forms import MetricsForm
from rubric_app.web.views.access import PAGE_SIZE, partial_template, require


@login_required
@require_GET
def bisections(request: HttpRequest) -> HttpResponse:
    require(request, "view_bisectionrun")
    page = Paginator(
        BisectionRun.objects.recent().defer("log", "repro_code", "results", "sandbox_report"), PAGE_SIZE
    ).get_page(request.GET.get("page"))
    return render(request, partial_template(request, "rubric_app/bisections.html", "runs-table"), {"page": page})


@login_required
@require_GET
def audit(request: HttpRequest) -> HttpResponse:
    require(request, "view_triagedecision")
    page = Paginator(TriageDecision.objects.for_audit(), PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, partial_template(request, "rubric_app/audit.html", "audit-table"), {"page": page})


@login_required
@require_GET
def metrics_page(request: HttpRequest) -> HttpResponse:
    """Queue health over the last weeks: charts with their numbers in tables beside them."""
    require(request, "view_triagedecision")
    form = MetricsForm(request.GET)
    health = metrics.queue_health(weeks=form.weeks_value())
    return render(request, "rubric_app/metrics.html", {"health": health, "form": form})


@login_required
@require_GET
def rubric_health(request: HttpRequest) -> HttpResponse:
    """Per rule id: its suggestions shown, applied, unticked, and its precision, from applied decisions."""
    require(request, "view_triagedecision")
    rules, added = metrics.rubric_health(metrics.decision_outcomes())
    bot = metrics.bot_health(TriageDecision.objects.bot_reviews())
    context = {
        "rules": rules,
        "added": added,
        "ticked": metrics.preselection(rules),
        "bot": bot,
        "skill": skill_files.status(),
    }
    return render(request, "rubric_app/rubric.html", context)


@login_required
@require_GET
def rubric_health_csv(request: HttpRequest) -> HttpResponse:
    """The rubric health table as CSV; ?rows=outcomes gives one row per decision and label instead."""
    require(request, "view_triagedecision")
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="rubric-health.csv"'
    metrics.write_rubric_csv(response, metrics.decision_outcomes(), per_outcome=request.GET.get("rows") == "outcomes")
    return response


@require_GET
@never_cache
def health(request: HttpRequest) -> JsonResponse:
    """The proxy's and the orchestrator's probe: 200 when every part is up, 503 when one is down. No login: anonymous
    callers get only {"status"}; staff and the HEALTH_TOKEN bearer get which parts are up (rubric_app/web/health.py)."""
    up, report = health_check.check()
    if not health_check.may_see_details(request):
        report = {"status": report["status"]}
    return JsonResponse(report, status=200 if up else 503)
