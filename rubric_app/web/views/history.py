"""The history page (/history): the issues that carried a queue label and are in no lane, searchable."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from rubric_app.github import history
from rubric_app.web.forms import HistorySearchForm
from rubric_app.web.views.access import PAGE_SIZE, page_or_last, partial_template, require


@login_required
@require_GET
def history_page(request: HttpRequest) -> HttpResponse:
    """History issues (closed, or no longer labelled for the queue), newest closed first, or best match first."""
    require(request, "view_issue")
    form = HistorySearchForm(request.GET)
    query = form.cleaned_data["q"] if form.is_valid() else ""
    rows = history.history_issues().only(*history.LISTED).prefetch_related("labels")
    rows = rows.search(query) if query else rows.order_by("-closed_at", "-updated_at", "-number")
    page, page_note = page_or_last(rows, request.GET.get("page"))
    context = {"form": form, "page": page, "page_note": page_note, "query": query, "page_size": PAGE_SIZE}
    return render(request, partial_template(request, "rubric_app/history.html", "history-table"), context)
