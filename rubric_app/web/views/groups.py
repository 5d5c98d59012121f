"""The failure-signature group page: the open issues that share one failure, decided together."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Prefetch
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from rubric_app.github import skill_files
from rubric_app.models import (
    Issue,
    Label,
    Suggestion,
    TriageDecision,
    WorkerHeartbeat,
)
from rubric_app.triage import decisions, evidence
from rubric_app.web.decision_forms import GroupDecisionForm
from rubric_app.web.views.access import partial_template, require, waiting


def _group_for_user(request: HttpRequest, key: str, perm: str = "view_issue") -> tuple[list[Issue], list[Issue]]:
    """(the open queue issues sharing the failure signature `key`, with labels and suggestions prefetched;
    the other issues of the mirror sharing it), or 403/404."""
    require(request, perm)
    sharing_it = Issue.objects.filter(signature=key).order_by("number")
    members = list(
        sharing_it.in_queue().prefetch_related(
            "labels",
            Prefetch(
                "suggestions", queryset=Suggestion.objects.filter(kind=Suggestion.Kind.ADD).order_by("-confidence")
            ),
            Prefetch(
                "decisions", queryset=TriageDecision.objects.order_by("-created_at", "-pk"), to_attr="recent_decisions"
            ),
        )
    )
    others = list(sharing_it.exclude(pk__in=[i.pk for i in members]).prefetch_related("labels"))
    if not members and not others:
        raise Http404(f"No issue has the failure signature {key}.")
    return members, others


def _group_form(members: list[Issue], data=None) -> GroupDecisionForm:
    descriptions = skill_files.in_use().descriptions()
    return GroupDecisionForm(data, members=members, allowed=Label.objects.triage_catalog(), descriptions=descriptions)


@login_required
@require_GET
def signature_group(request: HttpRequest, key: str) -> HttpResponse:
    """The issues sharing one failure signature, and one decision for the open ones."""
    members, others = _group_for_user(request, key)
    context = {
        "key": key,
        "members": members,
        "others": others,
        "form": _group_form(members),
        "text": (members or others)[0].signature_text,
        "disagreement": evidence.group_components(members),
    }
    return render(request, "rubric_app/group.html", context)


@login_required
@require_POST
def group_preview(request: HttpRequest, key: str) -> HttpResponse:
    """Every ticked issue's changes and, where it would be refused, why; changes nothing."""
    members, others = _group_for_user(request, key)
    form = _group_form(members, request.POST)
    rows = []
    if form.is_valid():
        plans = form.plans()
        refusals = decisions.group_refusals(plans=plans, user=request.user, catalog=form.allowed)
        rows = [(issue, plan, why) for (issue, plan), why in zip(plans, refusals)]
    context = {
        "key": key,
        "members": members,
        "others": others,
        "form": form,
        "rows": rows,
        "text": (members or others)[0].signature_text,
    }
    return render(request, partial_template(request, "rubric_app/group.html", "group-outcome"), context)


@login_required
@require_POST
def group_apply(request: HttpRequest, key: str) -> HttpResponse:
    """One TriageDecision per ticked issue, each queued (or refused) and audited on its own."""
    members, _ = _group_for_user(request, key, perm="apply_labels")
    form = _group_form(members, request.POST)
    if not form.is_valid():
        return HttpResponse(f"Invalid decision: {form.errors.as_text()}", status=400, content_type="text/plain")
    made = decisions.request_group(
        plans=form.plans(),
        user=request.user,
        labels_seen=form.cleaned_data["labels_seen"],
        redirect=form.redirect_to(),
        catalog=form.allowed,
    )
    if request.htmx:
        context = {"key": key, "made": made, "form": form, **waiting(WorkerHeartbeat.objects.queues())}
        return render(request, "rubric_app/group.html#group-outcome", context)
    queued = sum(1 for _, d in made if d and d.status == TriageDecision.Status.PENDING)
    refused = sum(1 for _, d in made if d and d.status == TriageDecision.Status.REFUSED)
    messages.success(
        request,
        f"{queued} decision{'s' if queued != 1 else ''} queued, {refused} refused: "
        "each issue's row and page show its outcome.",
    )
    return redirect("rubric_app:signature_group", key=key)
