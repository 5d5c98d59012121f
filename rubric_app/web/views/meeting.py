"""The weekly meeting: the agenda, its decisions and minutes, the roster and sharing out the queue."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import JSONField, OuterRef, QuerySet, Subquery
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseStopPolling

from rubric_app.models import AgendaItem, Duty, Issue, Label, Meeting, TriageDecision
from rubric_app.rubric.engine.agenda import AGENDA_ORDER, agenda_group
from rubric_app.triage import decisions, meeting_followups, metrics, sharing
from rubric_app.vocabulary import TRIAGE_REVIEW
from rubric_app.web.decision_forms import MEETING_DECISIONS, MeetingDecisionForm
from rubric_app.web.forms import AgendaItemForm, DutyForm
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


def _agenda_issues(meeting: Meeting | None) -> QuerySet[Issue]:
    """The undecided agenda items (Issue.objects.for_meeting), each with its latest bisection verdict and labels, and
    the owner and note `meeting` recorded for it."""
    return Issue.objects.for_meeting().annotate(
        latest_verdict=latest_verdict(), latest_verdict_labels=_latest_verdict_labels(), **_with_item(meeting)
    )


def _held(meeting: Meeting | None) -> list[Issue]:
    """The issues `meeting` decided whose decision is still held for its undo window: their decided cards (with Undo)
    keep their place on the agenda until it closes, after a reload too. Each issue carries its decision
    (held_decision) and the item's owner and note."""
    if meeting is None:
        return []
    rows = meeting.decisions.filter(status=TriageDecision.Status.PENDING, not_before__gt=timezone.now())
    rows = rows.select_related("issue", "user").prefetch_related("issue__suggestions")
    held = []
    for decision in rows.annotate(**_with_item(meeting, "issue")):
        issue = decision.issue
        issue.held_decision, issue.item_owner, issue.item_note = decision, decision.item_owner, decision.item_note
        held.append(issue)
    return held


def _agenda(meeting: Meeting | None = None) -> list[tuple[str, list[Issue]]]:
    """The agenda grouped in AGENDA_ORDER: every flagged issue no decision has settled, and those `meeting` decided
    within the undo window (as decided cards), in the order they were flagged; one query for the issues, whatever
    their number."""
    groups: dict[str, list[Issue]] = {name: [] for name in AGENDA_ORDER}
    for issue in [*_agenda_issues(meeting), *_held(meeting)]:
        issue.unsettled = getattr(issue, "last_try_status", "") in UNSETTLED  # a refused or failed try stays, marked
        why = " ".join(f"{s.reason} {s.evidence}" for s in issue.suggestions.all() if s.label == TRIAGE_REVIEW)
        groups[agenda_group(title=issue.title, body=issue.body, review_reasons=why)].append(issue)
    for issues in groups.values():  # for_meeting's order (nulls last), the held cards in their places
        issues.sort(key=lambda i: (i.review_flagged_at is None, i.review_flagged_at or timezone.now(), i.number))
    return [(name, issues) for name, issues in groups.items() if issues]


@login_required
@require_GET
def meeting(request: HttpRequest) -> HttpResponse:
    require(request, "view_meeting")
    current = Meeting.objects.filter(ended_at__isnull=True).select_related("chair").first()
    return render(
        request, partial_template(request, "rubric_app/meeting.html", "agenda"), _meeting_context(request, current)
    )


def _meeting_context(request: HttpRequest, current: Meeting | None, agenda=None) -> dict:
    context = {
        "meeting": current,
        "agenda": _agenda(current) if agenda is None else agenda,
        "decisions": MEETING_DECISIONS,
        "last": Meeting.objects.last_held(),
    }
    if not request.htmx:  # the agenda fragment shows neither the decisions, the queue's health, the roster nor labels
        context.update(health=metrics.queue_health(weeks=4), roster=sharing.roster(), modules=module_label_names())
        context["followups"] = meeting_followups.follow_ups()
        context.update(_recorded_context(current))
        if request.user.has_perm("rubric_app.apply_labels"):  # the cards' label pickers type ahead from it
            context["pickable"] = MeetingDecisionForm(allowed=Label.objects.triage_catalog()).pickable
    return context


def _recorded_context(meeting: Meeting | None) -> dict:
    """The meeting's decisions ("Decided in this meeting"), and whether one is still on its way to GitHub (the table
    then polls itself)."""
    recorded = list(_recorded(meeting)) if meeting else []
    return {"recorded": recorded, "recorded_in_flight": any(not d.is_finished for d in recorded)}


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
    """Record one meeting decision through the same path as Apply, with the labels picked on the card and the owner
    and note typed there; the card shows it decided (with Undo) until its undo window closes. Only an item of the
    agenda, while a meeting is in progress: anything else is decided on its issue page."""
    issue = get_issue_for_user(request, number, perm="apply_labels")
    current = Meeting.objects.filter(ended_at__isnull=True).first()
    form = MeetingDecisionForm(request.POST, allowed=Label.objects.triage_catalog())
    notes = AgendaItemForm(request.POST) if current and {"owner", "note"} & set(request.POST) else None
    if not form.is_valid() or (notes and not notes.is_valid()):
        return _undecided(request, current, number, form, notes)
    why = _off_agenda(issue, current)
    if why:
        if request.htmx:
            return HttpResponse(why, status=409, content_type="text/plain")
        messages.error(request, why)
        return redirect("rubric_app:meeting")
    if notes:
        notes.record_changes(meeting=current, issue=issue, by=request.user)
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
    if request.htmx and decision.status == TriageDecision.Status.REFUSED:  # still to decide: the card, and why
        back = _on_agenda(current, number)
        if back is not None:
            back.decide_error, back.picked, back.unsettled = (
                decision.result_message,
                form.cleaned_data["add_labels"],
                False,
            )
            return _card(request, current, back)
    if request.htmx:
        return _decided(request, decision)
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


def _on_agenda(current: Meeting | None, number: int) -> Issue | None:
    """The issue's undecided agenda item as the agenda shows it, or None when it is not on the agenda."""
    issue = _agenda_issues(current).filter(number=number).first()
    if issue is not None:
        issue.unsettled = issue.last_try_status in UNSETTLED
    return issue


def _card(request: HttpRequest, current: Meeting | None, issue: Issue) -> HttpResponse:
    context = {"issue": issue, "meeting": current, "decisions": MEETING_DECISIONS}
    return render(request, "rubric_app/meeting.html#agenda-card", context)


def _undecided(request: HttpRequest, current: Meeting | None, number: int, form, notes) -> HttpResponse:
    """A decision click with a bad label or owner: nothing decided, the card again with what was typed and why."""
    errors = [e for f in (form, notes) if f is not None for errs in f.errors.values() for e in errs]
    if form.has_error("decision") or form.has_error("labels_seen"):
        return HttpResponse(f"Invalid decision: {' '.join(errors)}", status=400, content_type="text/plain")
    agenda = None if request.htmx else _agenda(current)
    if request.htmx:
        issue = _on_agenda(current, number)
    else:
        issue = next((i for _, issues in agenda for i in issues if i.number == number), None)
    if issue is None:  # no longer on the agenda (decided meanwhile, or unflagged)
        return HttpResponse(
            f"#{number} is not on the agenda: {' '.join(errors)}", status=400, content_type="text/plain"
        )
    issue.decide_error, issue.picked = " ".join(errors), form.data.getlist("add_labels")
    if notes is not None:
        issue.item_owner, issue.item_note = notes.data.get("owner", ""), notes.data.get("note", "")
    if request.htmx:  # htmx swaps only 2xx answers: the card with its error comes back as 200
        return _card(request, current, issue)
    return render(request, "rubric_app/meeting.html", _meeting_context(request, current, agenda), status=400)


def _decided(request: HttpRequest, decision: TriageDecision) -> HttpResponse:
    """The decided card of an htmx click, with the owner and note the meeting has for its issue."""
    issue = decision.issue
    item = AgendaItem.objects.filter(meeting=decision.meeting_id, issue=issue).select_related("owner").first()
    issue.item_owner = item.owner.get_username() if item and item.owner else ""
    issue.item_note = item.note if item else ""
    return render(request, "rubric_app/meeting.html#decided", {"decision": decision, "issue": issue})


@login_required
@require_GET
def meeting_card(request: HttpRequest, pk: int) -> HttpResponse:
    """A decided card once its undo window has closed: still held (a clock ahead), the card again; back on the agenda
    (undone), its undecided card; else it leaves, and "Decided in this meeting" (out of band) shows it on its way."""
    require(request, "view_meeting")
    decision = get_object_or_404(TriageDecision.objects.select_related("issue", "user", "meeting"), pk=pk)
    if not request.htmx:
        return redirect("rubric_app:meeting")
    if decision.held:
        return _decided(request, decision)
    current = decision.meeting if decision.meeting and decision.meeting.ended_at is None else None
    back = _on_agenda(current, decision.issue.number)
    if back is not None:
        return _card(request, current, back)
    return render(request, "rubric_app/meeting.html#recorded", {**_recorded_context(current), "oob": True})


@login_required
@require_GET
def meeting_recorded(request: HttpRequest) -> HttpResponse:
    """ "Decided in this meeting", polled while a decision of it is on its way to GitHub (answered 286 after)."""
    require(request, "view_meeting")
    if not request.htmx:
        return redirect("rubric_app:meeting")
    context = _recorded_context(Meeting.objects.filter(ended_at__isnull=True).first())
    html = render_to_string("rubric_app/meeting.html#recorded", context, request)
    return HttpResponse(html) if context["recorded_in_flight"] else HttpResponseStopPolling(html)


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
    followups = meeting_followups.follow_ups()
    dismissed = held.dismissals.select_related("decision__issue", "by").order_by("at")
    context = {"meeting": held, "rows": rows, "discussed": discussed, "followups": followups, "dismissed": dismissed}
    text = render_to_string("rubric_app/minutes.md", context)
    response = HttpResponse(text, content_type="text/markdown; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="triage-minutes-{held.started_at:%Y-%m-%d}.md"'
    return response


@login_required
@require_POST
def followup_readd(request: HttpRequest, pk: int) -> HttpResponse:
    """The chair puts a follow-up back on the agenda: `triage review` flagged on GitHub (R11), audited."""
    require(request, "record_meeting_decision")
    decision = get_object_or_404(meeting_followups.pending(), pk=pk)
    flagged = meeting_followups.readd(decision, by=request.user, note=request.POST.get("note", ""))
    done = flagged.status != TriageDecision.Status.REFUSED
    message = f"#{decision.issue.number}: " + ("flagged for the agenda." if done else flagged.result_message)
    return _followups(request, message, ok=done)


@login_required
@require_POST
def followup_dismiss(request: HttpRequest, pk: int) -> HttpResponse:
    """The chair sets a follow-up aside, saying why (FollowUpDismissal: the audit record)."""
    require(request, "record_meeting_decision")
    decision = get_object_or_404(meeting_followups.pending(), pk=pk)
    current = Meeting.objects.filter(ended_at__isnull=True).first()
    try:
        meeting_followups.dismiss(decision, by=request.user, note=request.POST.get("note", ""), meeting=current)
    except ValueError as exc:
        return _followups(request, f"#{decision.issue.number}: not dismissed. {exc}", ok=False)
    return _followups(request, f"#{decision.issue.number}: dismissed.", ok=True)


def _followups(request: HttpRequest, message: str, *, ok: bool) -> HttpResponse:
    if request.htmx:
        context = {"followups": meeting_followups.follow_ups(), "followup_message": message}
        return render(request, "rubric_app/meeting.html#followups", context, status=200 if ok else 400)
    (messages.success if ok else messages.error)(request, message)
    return redirect(f"{reverse('rubric_app:meeting')}#followups")


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
