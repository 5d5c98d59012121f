"""The dashboard's pages: queue, issue (checklist, apply, bisection), meeting, bisections, audit.

Every view has one shape: fetch through an access helper (permission check and
prefetching together), call domain code, then render (the named partial when
htmx asks) or redirect (PRG for plain form posts).
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import Exists, OuterRef, Prefetch, Subquery
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.utils.http import url_has_allowed_host_and_scheme
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseStopPolling, reswap, retarget, trigger_client_event

from . import bisect_runs, decisions, metrics, sharing
from .bisection import extract_repro
from .forms import MEETING_DECISIONS, BisectForm, MeetingDecisionForm, QueueFilterForm, TriageForm, module_label_names
from .forms import DutyForm, MetricsForm
from .models import BisectionRun, Comment, Duty, Issue, Label, Meeting, Suggestion, TriageDecision

PAGE_SIZE = 50


def _require(request: HttpRequest, perm: str) -> None:
    if not request.user.has_perm(f"rubric_app.{perm}"):
        raise PermissionDenied(f"You need the {perm.replace('_', ' ')} permission.")


def _partial(request: HttpRequest, template: str, partial: str) -> str:
    return f"{template}#{partial}" if request.htmx else template


def _polled(request: HttpRequest, partial: str, context: dict, finished: bool) -> HttpResponse:
    """An issue-page fragment that htmx polls; once finished it is answered with 286 so polling stops."""
    template = f"rubric_app/issue.html#{partial}"
    if finished:
        return HttpResponseStopPolling(render_to_string(template, context, request))
    return render(request, template, context)


def _latest_verdict() -> Subquery:
    """The newest finished bisection's summary, as a column: one query for the whole page."""
    runs = BisectionRun.objects.filter(issue=OuterRef("pk"), status=BisectionRun.Status.DONE).order_by("-created_at")
    return Subquery(runs.values("verdict_summary")[:1])


def _get_issue_for_user(request: HttpRequest, number: int, perm: str = "view_issue") -> Issue:
    """Return the issue with everything its page shows prefetched, or 403/404."""
    _require(request, perm)
    qs = Issue.objects.prefetch_related(
        "labels",
        Prefetch("comments", queryset=Comment.objects.order_by("created_at", "github_id")),
        Prefetch("suggestions", queryset=Suggestion.objects.order_by("kind", "-confidence", "label")),
        Prefetch("bisection_runs", queryset=BisectionRun.objects.select_related("requested_by").order_by("-created_at")),
    )
    return get_object_or_404(qs, number=number)


def _triage_form(issue: Issue, data=None) -> TriageForm:
    allowed = Label.objects.triage_catalog()
    return TriageForm(data, issue=issue, suggestions=list(issue.suggestions.all()), allowed=allowed)


def _repro_for(issue: Issue) -> str:
    """The best repro found in the issue text (body first, then comments), or "" for the triager to paste one."""
    found = extract_repro([issue.body] + [c.body for c in issue.comments.all()])
    return found.code if found else ""


def _neighbours(issue: Issue) -> tuple[int | None, int | None]:
    """The queue's previous and next issue numbers (newest activity first), for j/k."""
    queue = Issue.objects.in_queue().exclude(pk=issue.pk).values_list("number", flat=True)
    prev = queue.filter(updated_at__gte=issue.updated_at).order_by("updated_at", "number").first()
    nxt = queue.filter(updated_at__lt=issue.updated_at).order_by("-updated_at", "-number").first()
    return prev, nxt


def _issue_context(issue: Issue, **extra) -> dict:
    """Everything the issue page shows; extra overrides (a bound form with errors, a preview plan)."""
    runs = list(issue.bisection_runs.all())
    form = extra.pop("form", None) or _triage_form(issue)
    checkable = {name for name, _ in form.fields["labels"].choices}
    add = [s for s in issue.suggestions.all() if s.kind == Suggestion.Kind.ADD]
    for s in add:  # one checkbox per label, on its most confident suggestion
        s.checkbox = s.label in checkable
        checkable.discard(s.label)
    prev_number, next_number = _neighbours(issue)
    context = {
        "issue": issue,
        "comments": list(issue.comments.all()),
        "add_suggestions": add,
        "avoid_suggestions": [s for s in issue.suggestions.all() if s.kind == Suggestion.Kind.AVOID],
        "form": form,
        "prev_number": prev_number,
        "next_number": next_number,
        "bisect_form": extra.pop("bisect_form", None) or BisectForm(initial={"code": _repro_for(issue)}),
        "run": runs[0] if runs else None,
        "earlier_runs": runs[1:],
        "decision": issue.decisions.select_related("user").order_by("-created_at").first(),
    }
    return {**context, **extra}


@login_required
@require_GET
def queue(request: HttpRequest) -> HttpResponse:
    _require(request, "view_issue")
    form = QueueFilterForm(request.GET)
    lane = form.lane_value()
    rows = form.filter(Issue.objects.for_queue(lane)).defer("body").annotate(latest_verdict=_latest_verdict())
    rows = _with_assignee(rows, request.user, mine=lane == "mine")
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    context = {"page": page, "lane": lane, "form": form, "lanes": QueueFilterForm.LANES,
               "module_labels": module_label_names(), "query": _query_without_page(request)}
    return render(request, _partial(request, "rubric_app/queue.html", "queue-table"), context)


def _query_without_page(request: HttpRequest) -> str:
    params = request.GET.copy()
    params.pop("page", None)
    return params.urlencode()


@login_required
@require_GET
def issue_detail(request: HttpRequest, number: int) -> HttpResponse:
    issue = _get_issue_for_user(request, number)
    return render(request, "rubric_app/issue.html", _issue_context(issue))


@login_required
@require_POST
def issue_preview(request: HttpRequest, number: int) -> HttpResponse:
    """Show exactly what Apply will add and remove on GitHub; changes nothing."""
    issue = _get_issue_for_user(request, number)
    form = _triage_form(issue, request.POST)
    if "accept" in request.POST:  # "accept the suggestions" from the queue or the `a` key
        form = _triage_form(issue, _form_data(form))
    plan = decisions.plan_changes(issue, chosen=form.chosen(), route=form.route_value(),
                                  review=form.cleaned_data["review"]) if form.is_valid() else None
    context = {"form": form, "plan": plan, "in_queue": "in_queue" in request.POST}
    if request.htmx:
        # htmx swaps only 2xx answers: form errors come back as 200 so the triager sees them.
        return render(request, "rubric_app/issue.html#apply-preview", {"issue": issue, **context})
    return render(request, "rubric_app/issue.html", _issue_context(issue, **context))


def _form_data(form: TriageForm) -> dict:
    """The suggested values as POST-like data, so "accept" goes through the same validation."""
    return {**form.suggested, "review": "on" if form.suggested["review"] else ""}


@login_required
@require_POST
def issue_apply(request: HttpRequest, number: int) -> HttpResponse:
    """Record the decision (pending) and queue it; the result fragment polls until GitHub answered."""
    issue = _get_issue_for_user(request, number, perm="apply_labels")
    form = _triage_form(issue, request.POST)
    if not form.is_valid():
        if request.htmx:
            return render(request, "rubric_app/issue.html#apply-preview", {"issue": issue, "form": form})
        return render(request, "rubric_app/issue.html", _issue_context(issue, form=form), status=400)
    # Re-plan on the server: the posted form says what the triager chose, never what to send.
    add, remove = decisions.plan_changes(issue, chosen=form.chosen(), route=form.route_value(),
                                         review=form.cleaned_data["review"])
    decision = decisions.request_decision(issue=issue, user=request.user, add=add, remove=remove,
                                          labels_seen=form.cleaned_data["labels_seen"], redirect=form.redirect_to())
    if request.htmx:
        return render(request, "rubric_app/issue.html#decision", {"decision": decision, "issue": issue})
    return redirect(issue)


@login_required
@require_GET
def decision_status(request: HttpRequest, pk: int) -> HttpResponse:
    """The decision fragment; polled every second, answered with 286 (stop) once it is finished."""
    _require(request, "view_issue")
    decision = get_object_or_404(TriageDecision.objects.select_related("issue", "user"), pk=pk)
    if not request.htmx:
        return redirect(decision.issue)
    return _polled(request, "decision", {"decision": decision, "issue": decision.issue}, decision.is_finished)


@login_required
@require_POST
def bisect(request: HttpRequest, number: int) -> HttpResponse:
    issue = _get_issue_for_user(request, number, perm="run_bisection")
    form = BisectForm(request.POST)
    run = None
    if form.is_valid():
        try:
            run = bisect_runs.start_bisection(issue=issue, user=request.user, code=form.cleaned_data["code"],
                                              device=form.cleaned_data["device"])
        except ValueError as exc:  # the harness's own checks: say why, keep the code in the form
            form.add_error(None, str(exc))
    if run is None:
        if request.htmx:
            # The form targets the run slot; a form with errors must replace the form instead.
            response = render(request, "rubric_app/issue.html#bisect-form", {"issue": issue, "bisect_form": form})
            return reswap(retarget(response, "#bisect-form"), "outerHTML")
        return render(request, "rubric_app/issue.html", _issue_context(issue, bisect_form=form), status=400)
    if request.htmx:
        return render(request, "rubric_app/issue.html#bisection-run", {"run": run, "issue": issue})
    return redirect(f"{issue.get_absolute_url()}#bisection")


@login_required
@require_GET
def bisection_status(request: HttpRequest, pk: int) -> HttpResponse:
    """One run's progress fragment; polled every second, answered with 286 once the run ended."""
    _require(request, "view_issue")
    run = get_object_or_404(BisectionRun.objects.select_related("issue", "requested_by"), pk=pk)
    if not request.htmx:
        return redirect(f"{run.issue.get_absolute_url()}#bisection")
    context = {"run": run, "issue": run.issue, "just_finished": run.is_finished}
    response = _polled(request, "bisection-run", context, run.is_finished)
    # The issue page refetches its triage panel: the verdict is in the suggestions now.
    return trigger_client_event(response, "bisection-finished") if run.is_finished else response


@login_required
@require_GET
def bisections(request: HttpRequest) -> HttpResponse:
    _require(request, "view_bisectionrun")
    page = Paginator(BisectionRun.objects.recent().defer("log", "repro_code"), PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, _partial(request, "rubric_app/bisections.html", "runs-table"), {"page": page})


@login_required
@require_GET
def audit(request: HttpRequest) -> HttpResponse:
    _require(request, "view_triagedecision")
    page = Paginator(TriageDecision.objects.for_audit(), PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, _partial(request, "rubric_app/audit.html", "audit-table"), {"page": page})


# --- the weekly meeting -------------------------------------------------------------------------

AGENDA_GROUPS = [
    ("crash", ("segfault", "sigsegv", "illegal memory access", "device-side assert", "crash", "core dumped", "abort")),
    ("silent correctness", ("silent", "wrong result", "incorrect", "differs from eager", "mismatch", "accuracy", "nan")),
    ("regression", ("regression", "regressed", "worked in", "used to work", "flaky")),
    ("performance", ("slow", "performance", "perf", "speedup", "latency", "throughput", "memory usage")),
]


def agenda_group(issue: Issue) -> str:
    """Which R11 reason put the issue on the agenda: crash, silent correctness, regression, performance or other.

    The rubric's `triage review` suggestion (R11) says why; the title breaks ties.
    """
    why = " ".join(f"{s.reason} {s.evidence}" for s in issue.suggestions.all() if s.label == "triage review")
    for text in (f"{why} {issue.title}".lower(), issue.body[:4000].lower()):
        for group, words in AGENDA_GROUPS:
            if any(word in text for word in words):
                return group
    return "other"


def _agenda(meeting: Meeting | None) -> list[tuple[str, list[Issue]]]:
    """The agenda grouped in AGENDA_GROUPS order; issues decided in this meeting drop off."""
    last = Meeting.objects.last_held()
    qs = Issue.objects.for_meeting(since=last.ended_at if last else None).annotate(latest_verdict=_latest_verdict())
    if meeting is not None:
        decided = TriageDecision.objects.filter(issue=OuterRef("pk"), meeting=meeting).exclude(
            status__in=[TriageDecision.Status.REFUSED, TriageDecision.Status.FAILED, TriageDecision.Status.CONFLICT])
        qs = qs.exclude(Exists(decided))
    groups: dict[str, list[Issue]] = {name: [] for name, _ in AGENDA_GROUPS + [("other", ())]}
    for issue in qs:
        groups[agenda_group(issue)].append(issue)
    return [(name, issues) for name, issues in groups.items() if issues]


@login_required
@require_GET
def meeting(request: HttpRequest) -> HttpResponse:
    _require(request, "view_meeting")
    current = Meeting.objects.filter(ended_at__isnull=True).select_related("chair").first()
    context = {"meeting": current, "agenda": _agenda(current), "decisions": MEETING_DECISIONS,
               "recorded": current.decisions.select_related("issue", "user").order_by("created_at") if current else [],
               "last": Meeting.objects.last_held()}
    return render(request, _partial(request, "rubric_app/meeting.html", "agenda"), context)


@login_required
@require_POST
def meeting_start(request: HttpRequest) -> HttpResponse:
    _require(request, "record_meeting_decision")
    if not Meeting.objects.filter(ended_at__isnull=True).exists():  # one meeting at a time
        Meeting.objects.create(chair=request.user)
    return redirect("rubric_app:meeting")


@login_required
@require_POST
def meeting_end(request: HttpRequest) -> HttpResponse:
    _require(request, "record_meeting_decision")
    Meeting.objects.filter(ended_at__isnull=True).update(ended_at=timezone.now())
    return redirect("rubric_app:meeting")


@login_required
@require_POST
def meeting_decide(request: HttpRequest, number: int) -> HttpResponse:
    """Record one meeting decision through the same path as Apply; the issue leaves the agenda."""
    issue = _get_issue_for_user(request, number, perm="apply_labels")
    form = MeetingDecisionForm(request.POST)
    if not form.is_valid():
        return HttpResponse(f"Invalid decision: {form.errors.as_text()}", status=400, content_type="text/plain")
    current = Meeting.objects.filter(ended_at__isnull=True).first()
    add, remove, close = form.plan(issue)
    decision = decisions.request_decision(
        issue=issue, user=request.user, add=add, remove=remove, labels_seen=form.cleaned_data["labels_seen"],
        meeting_decision=form.cleaned_data["decision"], close=close, meeting=current)
    if request.htmx:
        return render(request, "rubric_app/issue.html#decision", {"decision": decision, "issue": issue})
    return redirect("rubric_app:meeting")


@login_required
@require_GET
def meeting_minutes(request: HttpRequest, pk: int) -> HttpResponse:
    """The meeting's decisions as a Markdown download: issue, decision, who, GitHub's outcome."""
    _require(request, "view_meeting")
    held = get_object_or_404(Meeting.objects.select_related("chair"), pk=pk)
    rows = held.decisions.select_related("issue", "user").order_by("created_at")
    text = render_to_string("rubric_app/minutes.md", {"meeting": held, "rows": rows})
    response = HttpResponse(text, content_type="text/markdown; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="triage-minutes-{held.started_at:%Y-%m-%d}.md"'
    return response


# --- queue health -------------------------------------------------------------------------------


@login_required
@require_GET
def metrics_page(request: HttpRequest) -> HttpResponse:
    """Queue health over the last weeks: charts with their numbers in tables beside them."""
    _require(request, "view_triagedecision")
    form = MetricsForm(request.GET)
    health = metrics.queue_health(weeks=form.weeks_value())
    return render(request, "rubric_app/metrics.html", {"health": health, "form": form})


@login_required
@require_GET
def rubric_health(request: HttpRequest) -> HttpResponse:
    """Per rule id: its suggestions shown, applied, unticked, and its precision, from applied decisions."""
    _require(request, "view_triagedecision")
    rules, added = metrics.rubric_health(TriageDecision.objects.outcomes())
    return render(request, "rubric_app/rubric.html", {"rules": rules, "added": added})


@login_required
@require_GET
def rubric_health_csv(request: HttpRequest) -> HttpResponse:
    """The rubric health table as CSV; ?rows=outcomes gives one row per decision and label instead."""
    _require(request, "view_triagedecision")
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="rubric-health.csv"'
    metrics.write_rubric_csv(response, TriageDecision.objects.outcomes(), per_outcome=request.GET.get("rows") == "outcomes")
    return response



# --- sharing the queue ----------------------------------------------------------------------------


def _with_assignee(rows, user, *, mine: bool):
    """The queue rows with who took each (one join); the "mine" lane keeps the user's own."""
    rows = rows.select_related("assignment__user")
    return rows.filter(assignment__user=user) if mine else rows


def _back(request: HttpRequest, default: str = "rubric_app:meeting") -> HttpResponse:
    target = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return redirect(target)
    return redirect(default)


@login_required
@require_POST
def roster_add(request: HttpRequest) -> HttpResponse:
    """Put a triager on this week's roster (the chair does)."""
    _require(request, "record_meeting_decision")
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
    _require(request, "record_meeting_decision")
    Duty.objects.filter(pk=pk).delete()
    return redirect("rubric_app:meeting")


@login_required
@require_POST
def share_out(request: HttpRequest) -> HttpResponse:
    """Share the unassigned untriaged issues among this week's roster (by preferred modules, else in turn)."""
    _require(request, "record_meeting_decision")
    count = sharing.share_out(by=request.user)
    messages.success(request, f"{count} untriaged issue{'s' if count != 1 else ''} shared out.")
    return redirect("rubric_app:meeting")


@login_required
@require_POST
def issue_assign(request: HttpRequest, number: int) -> HttpResponse:
    """Take an issue (no `to`) or give it to another triager: one click, local to the dashboard."""
    issue = _get_issue_for_user(request, number, perm="apply_labels")
    username = request.POST.get("to") or request.user.get_username()
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None or not user.has_perm("rubric_app.apply_labels"):
        messages.error(request, f"#{number} not reassigned: {username!r} is not a triager.")
    else:
        sharing.assign(issue=issue, user=user, by=request.user)
    return _back(request)
