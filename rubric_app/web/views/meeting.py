"""The weekly meeting: the agenda, its decisions and minutes, the roster and sharing out the queue."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import JSONField, OuterRef, Subquery
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from rubric_app.models import AgendaItem, Duty, Issue, Meeting, TriageDecision
from rubric_app.rubric.agenda import AGENDA_ORDER, agenda_group
from rubric_app.triage import decisions, metrics, sharing
from rubric_app.vocabulary import TRIAGE_REVIEW
from rubric_app.web.forms import MEETING_DECISIONS, AgendaItemForm, DutyForm, MeetingDecisionForm
from rubric_app.web.labels import module_label_names
from rubric_app.web.views.access import get_issue_for_user, latest_done_run, latest_verdict, partial_template, require

UNSETTLED = {TriageDecision.Status.REFUSED, TriageDecision.Status.FAILED, TriageDecision.Status.CONFLICT}


def _latest_verdict_labels() -> Subquery:
    """The newest finished bisection's labels (label, rule_id, evidence dicts), as a column."""
    return latest_done_run("verdict_labels", output_field=JSONField())


def _with_item(meeting: Meeting | None, issue_ref: str = "pk") -> dict:
    """The owner's name and the note `meeting` recorded for an issue (AgendaItem), as two columns of the query that
    reads the issues (or their decisions: issue_ref "issue"); none without a meeting."""
    if meeting is None:
        return {}
    items = AgendaItem.objects.filter(meeting=meeting, issue=OuterRef(issue_ref))
    return {
        "item_owner": Subquery(items.values("owner__username")[:1]),
        "item_note": Subquery(items.values("note")[:1]),
    }


def _agenda(meeting: Meeting | None = None) -> list[tuple[str, list[Issue]]]:
    """The agenda grouped in AGENDA_ORDER: every flagged issue no decision has settled (Issue.objects.for_meeting),
    each with its latest bisection verdict and labels, and the owner and note `meeting` recorded for it; one query
    for the issues, whatever their number."""
    qs = Issue.objects.for_meeting().annotate(
        latest_verdict=latest_verdict(), latest_verdict_labels=_latest_verdict_labels(), **_with_item(meeting)
    )
    groups: dict[str, list[Issue]] = {name: [] for name in AGENDA_ORDER}
    for issue in qs:
        issue.unsettled = issue.last_try_status in UNSETTLED  # a refused or failed try stays on, marked
        why = " ".join(f"{s.reason} {s.evidence}" for s in issue.suggestions.all() if s.label == TRIAGE_REVIEW)
        groups[agenda_group(title=issue.title, body=issue.body, review_reasons=why)].append(issue)
    return [(name, issues) for name, issues in groups.items() if issues]


@login_required
@require_GET
def meeting(request: HttpRequest) -> HttpResponse:
    require(request, "view_meeting")
    current = Meeting.objects.filter(ended_at__isnull=True).select_related("chair").first()
    context = {
        "meeting": current,
        "agenda": _agenda(current),
        "decisions": MEETING_DECISIONS,
        "recorded": _recorded(current) if current else [],
        "last": Meeting.objects.last_held(),
    }
    if not request.htmx:  # the agenda fragment shows neither the queue's health nor the roster
        context.update(health=metrics.queue_health(weeks=4), roster=sharing.roster(), modules=module_label_names())
    return render(request, partial_template(request, "rubric_app/meeting.html", "agenda"), context)


def _recorded(meeting: Meeting):
    """The meeting's decisions in order, each with its issue, who decided, and the item's owner and note."""
    rows = meeting.decisions.select_related("issue", "user").annotate(**_with_item(meeting, "issue"))
    return rows.order_by("created_at", "pk")


@login_required
@require_POST
def meeting_start(request: HttpRequest) -> HttpResponse:
    require(request, "record_meeting_decision")
    if not Meeting.objects.filter(ended_at__isnull=True).exists():  # one meeting at a time
        Meeting.objects.create(chair=request.user)
    return redirect("rubric_app:meeting")


@login_required
@require_POST
def meeting_end(request: HttpRequest) -> HttpResponse:
    require(request, "record_meeting_decision")
    Meeting.objects.filter(ended_at__isnull=True).update(ended_at=timezone.now())
    return redirect("rubric_app:meeting")


@login_required
@require_POST
def meeting_decide(request: HttpRequest, number: int) -> HttpResponse:
    """Record one meeting decision through the same path as Apply; the issue leaves the agenda. Only an item of the
    agenda, while a meeting is in progress: anything else is decided on its issue page."""
    issue = get_issue_for_user(request, number, perm="apply_labels")
    form = MeetingDecisionForm(request.POST)
    if not form.is_valid():
        return HttpResponse(f"Invalid decision: {form.errors.as_text()}", status=400, content_type="text/plain")
    current = Meeting.objects.filter(ended_at__isnull=True).first()
    why = _off_agenda(issue, current)
    if why:
        if request.htmx:
            return HttpResponse(why, status=409, content_type="text/plain")
        messages.error(request, why)
        return redirect("rubric_app:meeting")
    # One click writes to GitHub: held MEETING_UNDO_SECONDS first, with an Undo button on the decided card.
    decision = decisions.request_decision(
        issue=issue,
        user=request.user,
        plan=form.plan(issue),
        labels_seen=form.cleaned_data["labels_seen"],
        meeting_decision=form.cleaned_data["decision"],
        meeting=current,
        hold_s=settings.MEETING_UNDO_SECONDS,
    )
    if request.htmx:
        item = current.items.filter(issue=issue).select_related("owner").first() if current else None
        return render(request, "rubric_app/meeting.html#decided", {"decision": decision, "issue": issue, "item": item})
    return redirect("rubric_app:meeting")


def _off_agenda(issue: Issue, meeting: Meeting | None) -> str:
    """Why the meeting may not decide this issue, or "": its decisions are a meeting's (the minutes list them) and on
    its agenda's items (flagged `triage review`, no decision on its way: Issue.objects.for_meeting)."""
    if meeting is None:
        return "No meeting is in progress: start it first, the meeting's decisions are its minutes'."
    if not Issue.objects.for_meeting().filter(pk=issue.pk).exists():
        return (
            f"#{issue.number} is not on the meeting's agenda (not flagged triage review, out of the queue, or "
            "decided already): decide it on its issue page."
        )
    return ""


@login_required
@require_POST
def decision_undo(request: HttpRequest, pk: int) -> HttpResponse:
    """Take back a decision held for its undo window (a meeting's); too late once a worker has taken it."""
    require(request, "apply_labels")
    decision = get_object_or_404(TriageDecision.objects.select_related("issue", "user"), pk=pk)
    why = decisions.undo(decision=decision, user=request.user)
    if request.htmx:
        context = {"decision": decision, "issue": decision.issue, "undo_error": why}
        return render(request, "rubric_app/issue.html#decision", context)
    if why:
        messages.error(request, f"#{decision.issue.number} not undone: {why}")
    else:
        messages.success(request, f"#{decision.issue.number}: undone, nothing was sent to GitHub.")
    return redirect("rubric_app:meeting") if decision.meeting_id else redirect(decision.issue)


@login_required
@require_POST
def meeting_item(request: HttpRequest, number: int) -> HttpResponse:
    """Record an agenda item's owner and note for the minutes of the meeting in progress."""
    require(request, "apply_labels")
    issue = get_object_or_404(Issue, number=number)
    current = Meeting.objects.filter(ended_at__isnull=True).first()
    form = AgendaItemForm(request.POST)
    if current is None:
        form.add_error(None, "No meeting is in progress: start it first, the minutes are a meeting's.")
    item = form.record(meeting=current, issue=issue, by=request.user) if form.is_valid() else None
    if request.htmx:
        context = {"number": number, "owner_name": form.data.get("owner", ""), "note": form.data.get("note", "")}
        return render(request, "rubric_app/meeting.html#item-notes", {**context, "item_form": form, "saved": item})
    if item is None:
        messages.error(request, f"#{number}: not recorded. {' '.join(e for es in form.errors.values() for e in es)}")
    return redirect(f"{reverse('rubric_app:meeting')}#agenda-item-{number}")


@login_required
@require_GET
def meeting_minutes(request: HttpRequest, pk: int) -> HttpResponse:
    """The meeting's decisions as a Markdown download: issue, decision, who, GitHub's outcome."""
    require(request, "view_meeting")
    held = get_object_or_404(Meeting.objects.select_related("chair"), pk=pk)
    rows = list(_recorded(held))
    decided = {d.issue_id for d in rows}
    # Items the meeting gave an owner or a note without deciding them: in the minutes too.
    items = held.items.select_related("issue", "owner").order_by("issue__number")
    discussed = [item for item in items if item.issue_id not in decided]
    text = render_to_string("rubric_app/minutes.md", {"meeting": held, "rows": rows, "discussed": discussed})
    response = HttpResponse(text, content_type="text/markdown; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="triage-minutes-{held.started_at:%Y-%m-%d}.md"'
    return response


def _back(request: HttpRequest, default: str = "rubric_app:meeting") -> HttpResponse:
    target = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return redirect(target)
    return redirect(default)


@login_required
@require_POST
def roster_add(request: HttpRequest) -> HttpResponse:
    """Put a triager on this week's roster (the chair does)."""
    require(request, "record_meeting_decision")
    form = DutyForm(request.POST)
    try:
        if not form.is_valid():
            raise ValueError(" ".join(e for errs in form.errors.values() for e in errs))
        sharing.set_duty(username=form.cleaned_data["username"], modules=form.cleaned_data["modules"])
    except ValueError as exc:
        messages.error(request, f"Roster unchanged: {exc}")
    return redirect("rubric_app:meeting")


@login_required
@require_POST
def roster_remove(request: HttpRequest, pk: int) -> HttpResponse:
    require(request, "record_meeting_decision")
    Duty.objects.filter(pk=pk).delete()
    return redirect("rubric_app:meeting")


@login_required
@require_POST
def share_out(request: HttpRequest) -> HttpResponse:
    """Share the unassigned untriaged issues among this week's roster (by preferred modules, else in turn)."""
    require(request, "record_meeting_decision")
    count = sharing.share_out(by=request.user)
    messages.success(request, f"{count} untriaged issue{'s' if count != 1 else ''} shared out.")
    return redirect("rubric_app:meeting")


@login_required
@require_POST
def issue_assign(request: HttpRequest, number: int) -> HttpResponse:
    """Take an issue (no `to`) or give it to another triager: one click, local to the dashboard."""
    require(request, "apply_labels")
    issue = get_object_or_404(Issue, number=number)  # the row only: none of what the issue page shows
    username = request.POST.get("to") or request.user.get_username()
    user = sharing.find_triager(username)
    if user is None:
        messages.error(request, f"#{number} not reassigned: {username!r} is not a triager.")
    else:
        sharing.assign(issue=issue, user=user, by=request.user)
    return _back(request)
