"""The dashboard's pages: queue, issue (checklist, apply, bisection), meeting, bisections, audit.

Every view has one shape: fetch through an access helper (permission check and
prefetching together), call domain code, then render (the named partial when
htmx asks) or redirect (PRG for plain form posts).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import InvalidPage, Paginator
from django.db.models import JSONField, OuterRef, Prefetch, Subquery
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.loader import render_to_string
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseStopPolling, reswap, retarget, trigger_client_event

from . import bisect_runs, build_checks, decisions, metrics, queue_cache, sharing, similar, skill_files
from . import health as health_check
from .bisection import extract_repro
from .forms import (
    MEETING_DECISIONS,
    BisectForm,
    BotCorrectionForm,
    DutyForm,
    GroupDecisionForm,
    MeetingDecisionForm,
    MetricsForm,
    QueueFilterForm,
    TriageForm,
    module_label_names,
)
from .models import (
    BOT_TRIAGED,
    TRIAGE_REVIEW,
    BisectionRun,
    Comment,
    Duty,
    Issue,
    Label,
    Meeting,
    Suggestion,
    TriageDecision,
    WorkerHeartbeat,
)
from .rubric.agenda import AGENDA_ORDER, agenda_group
from .rubric.rules_skill import bot_breaches

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


def _latest_done_run(field: str, **kwargs) -> Subquery:
    """One field of the issue's newest finished bisection, as a column: one query for the whole page."""
    runs = BisectionRun.objects.filter(issue=OuterRef("pk"), status=BisectionRun.Status.DONE).order_by("-created_at")
    return Subquery(runs.values(field)[:1], **kwargs)


def _latest_verdict() -> Subquery:
    """The newest finished bisection's summary, as a column."""
    return _latest_done_run("verdict_summary")


def _get_issue_for_user(request: HttpRequest, number: int, perm: str = "view_issue") -> Issue:
    """Return the issue with everything its page shows prefetched, or 403/404."""
    _require(request, perm)
    qs = Issue.objects.prefetch_related(
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


def _bot_context(issue: Issue, bot_form: BotCorrectionForm | None, descriptions: dict[str, str]) -> dict:
    """The Automation panel's review part, only for issues the triage bot labelled (three queries then, else none),
    with what the bot did that it may not (G13)."""
    if BOT_TRIAGED not in issue.label_names():
        return {"bot_form": None, "bot_review": None, "bot_labelled": (), "bot_breaches": ()}
    reviews = issue.decisions.filter(bot_review__gt="").select_related("user").order_by("-created_at")
    by_bot = list(issue.label_events.filter(actor__endswith="[bot]").order_by("created_at"))
    labelled = [e for e in by_bot if e.action == "labeled"]
    allowed = Label.objects.triage_catalog()
    return {
        "bot_labelled": labelled,
        "bot_breaches": bot_breaches([e.label for e in labelled], [e.label for e in by_bot if e.action == "unlabeled"]),
        "bot_form": bot_form or BotCorrectionForm(issue=issue, allowed=allowed, descriptions=descriptions),
        "bot_review": reviews.first(),
    }


def _triage_form(issue: Issue, data=None, descriptions: dict[str, str] | None = None) -> TriageForm:
    """The apply form, with each label's description (the triage skill in use) unless the caller has them."""
    allowed = Label.objects.triage_catalog()
    descriptions = skill_files.in_use().descriptions() if descriptions is None else descriptions
    suggestions = list(issue.suggestions.all())
    return TriageForm(data, issue=issue, suggestions=suggestions, allowed=allowed, descriptions=descriptions)


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


def _waiting(
    live: dict[str, list[str]], *, run: BisectionRun | None = None, decision: TriageDecision | None = None
) -> dict:
    """What the run and decision fragments need to say whether a worker will take them (RUBRIC-free liveness)."""
    return {
        "workers": live,
        "run_workers": live.get(run.queue_name, []) if run else [],
        "decision_workers": live.get("github", []),
        "wait_minutes": settings.QUEUE_WAIT_TIMEOUT_MINUTES,
    }


def _issue_context(issue: Issue, agent_repro: bool = False, **extra) -> dict:
    """Everything the issue page shows; extra overrides (a bound form with errors, a preview plan). agent_repro: the
    bisection form holds the PT2 Repro Agent's script instead of the repro extracted from the text."""
    runs = list(issue.bisection_runs.all())
    live, hosted = WorkerHeartbeat.objects.liveness()
    descriptions = skill_files.in_use().descriptions()
    form = extra.pop("form", None) or _triage_form(issue, descriptions=descriptions)
    checkable = {name for name, _ in form.fields["labels"].choices}
    add = [s for s in issue.suggestions.all() if s.kind == Suggestion.Kind.ADD]
    for s in add:  # one checkbox per label, on its most confident suggestion, with what the label is for
        s.checkbox = s.label in checkable
        s.description = descriptions.get(s.label, "")
        checkable.discard(s.label)
    prev_number, next_number = _neighbours(issue)
    comments = list(issue.comments.all())
    automation = issue.automation(comments)
    agent = automation.latest_agent
    bisect_form = extra.pop("bisect_form", None) or BisectForm.for_repro(
        agent.script if agent_repro and agent and agent.script else _repro_for(issue),
        live=live,
        hosted=hosted,
    )
    context = {
        "issue": issue,
        "comments": comments,
        "automation": automation,
        "add_suggestions": add,
        "avoid_suggestions": [s for s in issue.suggestions.all() if s.kind == Suggestion.Kind.AVOID],
        "form": form,
        "prev_number": prev_number,
        "next_number": next_number,
        "bisect_form": bisect_form,
        "run": runs[0] if runs else None,
        **_waiting(live, run=runs[0] if runs else None),
        "earlier_runs": runs[1:],
        "build_runs": build_checks.side_by_side(runs),
        "decision": issue.decisions.select_related("user").order_by("-created_at").first(),
        "similar": similar.neighbours(issue),
        **_bot_context(issue, extra.pop("bot_form", None), descriptions),
        "agent_script": agent.script if agent else "",
        "agent_needs_cuda": bool(agent and agent.script_needs_cuda),
    }
    return {**context, **extra}


@login_required
@require_GET
def queue(request: HttpRequest) -> HttpResponse:
    """The queue; its table is queue_cache's when nothing the table shows has changed (never an old one)."""
    _require(request, "view_issue")
    form = QueueFilterForm(request.GET)
    table = queue_cache.table(request, lambda **markers: _queue_table(request, form, markers))
    if request.htmx:
        return HttpResponse(table)
    context = {"table": table, "form": form, "lane": form.lane_value(), "lanes": QueueFilterForm.LANES}
    return render(request, "rubric_app/queue.html", context)


def _queue_table(request: HttpRequest, form: QueueFilterForm, markers: dict) -> str:
    """The #queue-table fragment: one page of the lane's rows, the count, the pager, the issue a search names."""
    lane = form.lane_value()
    rows = form.filter(Issue.objects.for_queue(lane)).defer("body").annotate(latest_verdict=_latest_verdict())
    rows = _with_assignee(rows, request.user, mine=lane == "mine")
    page, page_note = _page_or_last(rows, request.GET.get("page"))
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


def _page_or_last(rows, number: str | None):
    """The requested page, or the last one with a note saying so (never a silent page 1)."""
    paginator = Paginator(rows, PAGE_SIZE)
    try:
        return paginator.page(number or 1), ""
    except InvalidPage:
        page = paginator.page(paginator.num_pages)
        return page, f"There is no page {number}: showing page {page.number}, the last."


def _query_without_page(request: HttpRequest) -> str:
    params = request.GET.copy()
    params.pop("page", None)
    return params.urlencode()


@login_required
@require_GET
def issue_detail(request: HttpRequest, number: int) -> HttpResponse:
    """The issue page; ?repro=agent puts the PT2 Repro Agent's script in the bisection form (one click, no JS)."""
    issue = _get_issue_for_user(request, number)
    context = _issue_context(issue, agent_repro=request.GET.get("repro") == "agent")
    return render(request, "rubric_app/issue.html", context)


@login_required
@require_POST
def issue_preview(request: HttpRequest, number: int) -> HttpResponse:
    """Show exactly what Apply will add and remove on GitHub; changes nothing."""
    issue = _get_issue_for_user(request, number)
    form = _triage_form(issue, request.POST)
    if "accept" in request.POST:  # "accept the suggestions" from the queue or the `a` key
        form = _triage_form(issue, _form_data(form))
    context = {"form": form, "plan": form.plan() if form.is_valid() else None, "in_queue": "in_queue" in request.POST}
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
    decision = decisions.request_decision(
        issue=issue,
        user=request.user,
        plan=form.plan(),
        labels_seen=form.cleaned_data["labels_seen"],
        redirect=form.redirect_to(),
    )
    if request.htmx:
        context = {"decision": decision, "issue": issue, **_waiting(WorkerHeartbeat.objects.queues())}
        return render(request, "rubric_app/issue.html#decision", context)
    return redirect(issue)


@login_required
@require_POST
def bot_confirm(request: HttpRequest, number: int) -> HttpResponse:
    """Keep what PyTorch's triage bot labelled: a decision on record, nothing sent to GitHub (`a` in the bot lane)."""
    issue = _get_issue_for_user(request, number, perm="apply_labels")
    decision = decisions.confirm_bot(issue=issue, user=request.user, labels_seen=request.POST.getlist("labels_seen"))
    if request.htmx:
        return render(request, "rubric_app/issue.html#bot-review", {"decision": decision, "issue": issue})
    return redirect(issue)


@login_required
@require_POST
def bot_correct(request: HttpRequest, number: int) -> HttpResponse:
    """The bot got it wrong: the corrected labels plus `bot-mislabeled` in one audited decision, queued."""
    issue = _get_issue_for_user(request, number, perm="apply_labels")
    form = BotCorrectionForm(request.POST, issue=issue, allowed=Label.objects.triage_catalog(), descriptions={})
    if not form.is_valid():
        return render(request, "rubric_app/issue.html", _issue_context(issue, bot_form=form), status=400)
    decision = decisions.correct_bot(issue=issue, user=request.user, **form.cleaned_data)
    if request.htmx:
        context = {"decision": decision, "issue": issue, **_waiting(WorkerHeartbeat.objects.queues())}
        return render(request, "rubric_app/issue.html#decision", context)
    return redirect(issue)


@login_required
@require_GET
def decision_status(request: HttpRequest, pk: int) -> HttpResponse:
    """The decision fragment; polled every second, answered with 286 (stop) once it is finished."""
    _require(request, "view_issue")
    decision = get_object_or_404(TriageDecision.objects.select_related("issue", "user"), pk=pk)
    if not request.htmx:
        return redirect(decision.issue)
    context = {"decision": decision, "issue": decision.issue}
    if decision.status == TriageDecision.Status.PENDING:  # only then: is a github worker there to take it?
        context.update(_waiting(WorkerHeartbeat.objects.queues()))
    return _polled(request, "decision", context, decision.is_finished)


@login_required
@require_POST
def bisect(request: HttpRequest, number: int) -> HttpResponse:
    issue = _get_issue_for_user(request, number, perm="run_bisection")
    live, hosted = WorkerHeartbeat.objects.liveness()
    # Refuses cuda and "both" while no GPU worker is online, and a build no live worker hosts.
    form = BisectForm(request.POST, live=live, hosted=hosted)
    run = None
    if form.is_valid():
        try:
            run = bisect_runs.start_bisection(
                issue=issue,
                user=request.user,
                code=form.cleaned_data["code"],
                device=form.cleaned_data["device"],
                builds=form.cleaned_data["builds"],
            )
        except ValueError as exc:  # the harness's own checks: say why, keep the code in the form
            form.add_error(None, str(exc))
    if run is None:
        if request.htmx:
            # The form targets the run slot; a form with errors must replace the form instead.
            response = render(request, "rubric_app/issue.html#bisect-form", {"issue": issue, "bisect_form": form})
            return reswap(retarget(response, "#bisect-form"), "outerHTML")
        return render(request, "rubric_app/issue.html", _issue_context(issue, bisect_form=form), status=400)
    if request.htmx:
        return render(
            request, "rubric_app/issue.html#bisection-run", {"run": run, "issue": issue, **_waiting(live, run=run)}
        )
    return redirect(f"{issue.get_absolute_url()}#bisection")


@login_required
@require_GET
def bisection_status(request: HttpRequest, pk: int) -> HttpResponse:
    """One run's progress fragment; polled every second, answered with 286 once the run ended."""
    _require(request, "view_issue")
    run = get_object_or_404(
        BisectionRun.objects.select_related("issue", "requested_by").defer("log", "repro_code"), pk=pk
    )
    if not request.htmx:
        return redirect(f"{run.issue.get_absolute_url()}#bisection")
    context = {"run": run, "issue": run.issue, "just_finished": run.is_finished}
    if run.status == BisectionRun.Status.QUEUED:  # only then: is a worker of its queue there to take it?
        context.update(_waiting(WorkerHeartbeat.objects.queues(), run=run))
    response = _polled(request, "bisection-run", context, run.is_finished)
    # The issue page refetches its triage panel: the verdict is in the suggestions now.
    return trigger_client_event(response, "bisection-finished") if run.is_finished else response


@login_required
@require_GET
def bisections(request: HttpRequest) -> HttpResponse:
    _require(request, "view_bisectionrun")
    page = Paginator(
        BisectionRun.objects.recent().defer("log", "repro_code", "results", "sandbox_report"), PAGE_SIZE
    ).get_page(request.GET.get("page"))
    return render(request, _partial(request, "rubric_app/bisections.html", "runs-table"), {"page": page})


@login_required
@require_GET
def audit(request: HttpRequest) -> HttpResponse:
    _require(request, "view_triagedecision")
    page = Paginator(TriageDecision.objects.for_audit(), PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, _partial(request, "rubric_app/audit.html", "audit-table"), {"page": page})


# --- the weekly meeting -------------------------------------------------------------------------

UNSETTLED = {TriageDecision.Status.REFUSED, TriageDecision.Status.FAILED, TriageDecision.Status.CONFLICT}


def _latest_verdict_labels() -> Subquery:
    """The newest finished bisection's labels (label, rule_id, evidence dicts), as a column."""
    return _latest_done_run("verdict_labels", output_field=JSONField())


def _agenda() -> list[tuple[str, list[Issue]]]:
    """The agenda grouped in AGENDA_ORDER: every flagged issue no decision has settled (Issue.objects.for_meeting),
    each with its latest bisection verdict and labels; one query for the issues, whatever their number."""
    qs = Issue.objects.for_meeting().annotate(
        latest_verdict=_latest_verdict(), latest_verdict_labels=_latest_verdict_labels()
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
    _require(request, "view_meeting")
    current = Meeting.objects.filter(ended_at__isnull=True).select_related("chair").first()
    context = {
        "meeting": current,
        "agenda": _agenda(),
        "decisions": MEETING_DECISIONS,
        "recorded": current.decisions.select_related("issue", "user").order_by("created_at") if current else [],
        "last": Meeting.objects.last_held(),
    }
    if not request.htmx:  # the agenda fragment shows neither the queue's health nor the roster
        context.update(health=metrics.queue_health(weeks=4), roster=sharing.roster(), modules=module_label_names())
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
    decision = decisions.request_decision(
        issue=issue,
        user=request.user,
        plan=form.plan(issue),
        labels_seen=form.cleaned_data["labels_seen"],
        meeting_decision=form.cleaned_data["decision"],
        meeting=current,
    )
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
    _require(request, "view_triagedecision")
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="rubric-health.csv"'
    metrics.write_rubric_csv(
        response, TriageDecision.objects.outcomes(), per_outcome=request.GET.get("rows") == "outcomes"
    )
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
    _require(request, "apply_labels")
    issue = get_object_or_404(Issue, number=number)  # the row only: none of what the issue page shows
    username = request.POST.get("to") or request.user.get_username()
    user = sharing.find_triager(username)
    if user is None:
        messages.error(request, f"#{number} not reassigned: {username!r} is not a triager.")
    else:
        sharing.assign(issue=issue, user=user, by=request.user)
    return _back(request)


# --- failures shared by several issues ----------------------------------------------------------


def _group_for_user(request: HttpRequest, key: str, perm: str = "view_issue") -> tuple[list[Issue], list[Issue]]:
    """(the open queue issues sharing the failure signature `key`, with labels and suggestions prefetched;
    the other issues of the mirror sharing it), or 403/404."""
    _require(request, perm)
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
    return render(request, _partial(request, "rubric_app/group.html", "group-outcome"), context)


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
        context = {"key": key, "made": made, "form": form, **_waiting(WorkerHeartbeat.objects.queues())}
        return render(request, "rubric_app/group.html#group-outcome", context)
    queued = sum(1 for _, d in made if d and d.status == TriageDecision.Status.PENDING)
    refused = sum(1 for _, d in made if d and d.status == TriageDecision.Status.REFUSED)
    messages.success(
        request,
        f"{queued} decision{'s' if queued != 1 else ''} queued, {refused} refused: "
        "each issue's row and page show its outcome.",
    )
    return redirect("rubric_app:signature_group", key=key)


@require_GET
@never_cache
def health(request: HttpRequest) -> JsonResponse:
    """The proxy's and the orchestrator's probe: 200 when every part is up, 503 naming what is down. No login:
    it tells nothing but which parts are up (rubric_app/health.py)."""
    up, report = health_check.check()
    return JsonResponse(report, status=200 if up else 503)
