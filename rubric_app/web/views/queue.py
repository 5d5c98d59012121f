"""The queue page (`/`): lanes, filters, the cached table, pagination."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.template.loader import render_to_string
from django.views.decorators.http import require_GET

from rubric_app.models import (
    Issue,
)
from rubric_app.triage import similar
from rubric_app.vocabulary import LANE_MINE
from rubric_app.web import queue_cache
from rubric_app.web.forms import QueueFilterForm
from rubric_app.web.labels import module_label_names
from rubric_app.web.views.access import latest_verdict, page_or_last, require


@login_required
@require_GET
def queue(request: HttpRequest) -> HttpResponse:
    """The queue; its table is queue_cache's when nothing the table shows has changed (never an old one)."""
    require(request, "view_issue")
    form = QueueFilterForm(request.GET)
    table = queue_cache.table(request, lambda **markers: _queue_table(request, form, markers))
    # A history restore (Back, past htmx's own snapshots) asks for the whole page, lanes and filters with the table.
    if request.htmx and not request.htmx.history_restore_request:
        return HttpResponse(table)
    context = {"table": table, "form": form, "lane": form.lane_value(), "lanes": QueueFilterForm.LANES}
    return render(request, "rubric_app/queue.html", context)


def _queue_table(request: HttpRequest, form: QueueFilterForm, markers: dict) -> str:
    """The #queue-table fragment: one page of the lane's rows, the count, the pager, the issue a search names."""
    lane = form.lane_value()
    rows = form.filter(Issue.objects.for_queue(lane)).defer("body").annotate(latest_verdict=latest_verdict())
    rows = rows.with_decision_in_flight()  # the rows `j` passes over (queue_row's data-waiting)
    rows = _with_assignee(rows, request.user, mine=lane == LANE_MINE)
    page, page_note = page_or_last(rows, request.GET.get("page"))
    context = {
        "page": page,
        "page_note": page_note,
        "lane": lane,
        "form": form,
        "module_labels": module_label_names(),
        "query": _query_without_page(request),
        "reference": form.reference(),
        "groups": similar.signature_groups(Issue.objects.for_queue(lane)),
        **markers,
    }
    return render_to_string("rubric_app/queue.html#queue-table", context, request)


def _query_without_page(request: HttpRequest) -> str:
    params = request.GET.copy()
    params.pop("page", None)
    return params.urlencode()


def _with_assignee(rows, user, *, mine: bool):
    """The queue rows with who took each (one join); the "mine" lane keeps the user's own."""
    rows = rows.select_related("assignment__user")
    return rows.filter(assignment__user=user) if mine else rows
