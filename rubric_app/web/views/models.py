"""The learned labeler's page under /rubric: the model in use, its figures, and every candidate the gate judged."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from rubric_app.models import TrainedModel
from rubric_app.triage import duplicates as marking
from rubric_app.triage import model_store
from rubric_app.web.views.access import require

SHOWN = 50


@login_required
@require_GET
def models_page(request: HttpRequest) -> HttpResponse:
    """The model every process uses (promoted, else the file), and the newest candidates, promoted or refused, why."""
    require(request, "view_triagedecision")
    in_use = TrainedModel.objects.in_use_order().defer("data", "learned_numbers").first()
    candidates = list(TrainedModel.objects.for_page()[:SHOWN])
    for row in [in_use, *candidates]:
        if row is not None:
            row.figure_rows = model_store.figure_rows(row)
            row.reference_rows = model_store.figure_rows(row, "reference")
            row.mark_line = model_store.mark_summary(row.figures["mark"]) if row.figures.get("mark") else ""
    context = {"in_use": in_use, "candidates": candidates, "fallback": model_store.fallback_name()}
    context["mark_at"] = marking.mark_threshold()
    return render(request, "rubric_app/models.html", context)
