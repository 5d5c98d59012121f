"""The issue page: the checklist and suggestions, preview and apply, the bot review, the bisection panel and
the status fragments they poll."""

from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import reswap, retarget, trigger_client_event

from rubric_app.github import skill_files
from rubric_app.models import BisectionRun, Issue, Label, Suggestion, TriageDecision, WorkerHeartbeat
from rubric_app.rubric.reading.automation import AGENT_LABEL
from rubric_app.rubric.rules.skill_additions import bot_breaches
from rubric_app.runs import bisect_runs, build_checks, repro_sources
from rubric_app.triage import accepting, decisions, evidence, similar
from rubric_app.triage import duplicates as marking
from rubric_app.vocabulary import BOT_TRIAGED, Route, is_bot
from rubric_app.web.decision_forms import BotCorrectionForm, TriageForm
from rubric_app.web.forms import BisectForm
from rubric_app.web.views.access import get_issue_for_user, polled, require, waiting


def _bot_context(issue: Issue, bot_form: BotCorrectionForm | None, descriptions: dict[str, str]) -> dict:
    """The Automation panel's review part, only for issues the triage bot labelled (three queries then, else none),
    with what the bot did that it may not (G13)."""
    if BOT_TRIAGED not in issue.label_names():
        return {"bot_form": None, "bot_review": None, "bot_labelled": (), "bot_breaches": ()}
    reviews = issue.decisions.filter(bot_review__gt="").select_related("user").order_by("-created_at")
    by_bot = [e for e in issue.label_events.order_by("created_at") if is_bot(e.actor, settings.AUTOMATION_ACCOUNTS)]
    labelled = [e for e in by_bot if e.action == "labeled"]
    allowed = Label.objects.triage_catalog()
    return {
        "bot_labelled": labelled,
        "bot_breaches": bot_breaches([e.label for e in labelled], [e.label for e in by_bot if e.action == "unlabeled"]),
        "bot_form": bot_form or BotCorrectionForm(issue=issue, allowed=allowed, descriptions=descriptions),
        "bot_review": reviews.first(),
    }


def _agent_labelled_by(issue: Issue) -> str:
    """Who added the Repro Agent's repro:agent:h100:* label (the label events' actor: a label says nothing of its
    poster), or "" when the events are not synced yet. One query, only for an issue carrying that label."""
    event = issue.label_events.filter(action="labeled", label__startswith=AGENT_LABEL).order_by("-created_at").first()
    return event.actor if event else ""


def _triage_form(
    issue: Issue, data=None, descriptions: dict[str, str] | None = None, in_queue: bool = False
) -> TriageForm:
    """The apply form, with each label's description (the triage skill in use) unless the caller has them; in a
    queue row, its fields' ids are the row's own (a queue page holds several previews)."""
    allowed = Label.objects.triage_catalog()
    descriptions = skill_files.in_use().descriptions() if descriptions is None else descriptions
    suggestions = list(issue.suggestions.all())
    auto_id = f"q{issue.number}-%s" if in_queue else "id_%s"
    return TriageForm(
        data, issue=issue, suggestions=suggestions, allowed=allowed, descriptions=descriptions, auto_id=auto_id
    )


def _repro_for(posted: list[repro_sources.PostedRepro], choice: str = "") -> str:
    """The repro the bisection form holds: one a triager chose among those offered (?repro=comment:<id>), else the
    reporter's or a maintainer's best (never another commenter's on its own), or "" for the triager to paste one."""
    chosen = next((p for p in posted if p.source == choice), None) or repro_sources.default_repro(posted)
    return chosen.repro.code if chosen else ""


def _neighbours(issue: Issue) -> tuple[int | None, int | None]:
    """The queue's previous and next issue numbers (newest activity first), for j/k: past the issues already
    waiting for the meeting or for a decision on its way (Issue.objects.not_waiting)."""
    queue = Issue.objects.in_queue().not_waiting().exclude(pk=issue.pk).values_list("number", flat=True)
    prev = queue.filter(updated_at__gte=issue.updated_at).order_by("updated_at", "number").first()
    nxt = queue.filter(updated_at__lt=issue.updated_at).order_by("-updated_at", "-number").first()
    return prev, nxt


def _issue_context(issue: Issue, agent_repro: bool = False, repro_choice: str = "", **extra) -> dict:
    """Everything the issue page shows; extra overrides (a bound form with errors, a preview plan). agent_repro: the
    bisection form holds the PT2 Repro Agent's script instead of the repro extracted from the text; repro_choice: the
    source ("comment:<github id>") of an offered repro a triager chose instead."""
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
    agent = automation.latest_agent  # the Repro Agent's own account's: a claim is never offered as a script
    posted = repro_sources.posted_repros(issue, comments)
    bisect_form = extra.pop("bisect_form", None) or BisectForm.for_repro(
        agent.script if agent_repro and agent and agent.script else _repro_for(posted, repro_choice),
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
        "run_notes": evidence.run_notes(runs[0] if runs else None, issue, comments),
        **waiting(live, run=runs[0] if runs else None),
        "earlier_runs": runs[1:],
        "build_runs": build_checks.side_by_side(runs),
        "decision": issue.decisions.select_related("user").order_by("-created_at").first(),
        "similar": similar.neighbours(issue),
        "mark_at": marking.mark_threshold(),
        **_bot_context(issue, extra.pop("bot_form", None), descriptions),
        "agent_script": agent.script if agent else "",
        "agent_labelled_by": _agent_labelled_by(issue) if automation.agent_label else "",
        "offered_repros": repro_sources.offered_repros(posted),
        "agent_needs_cuda": bool(agent and agent.script_needs_cuda),
    }
    return {**context, **extra}


@login_required
@require_GET
def issue_detail(request: HttpRequest, number: int) -> HttpResponse:
    """The issue page; ?repro=agent puts the PT2 Repro Agent's script in the bisection form (one click, no JS)."""
    issue = get_issue_for_user(request, number)
    choice = request.GET.get("repro", "")
    context = _issue_context(issue, agent_repro=choice == "agent", repro_choice=choice)
    return render(request, "rubric_app/issue.html", context)


@login_required
@require_POST
def issue_preview(request: HttpRequest, number: int) -> HttpResponse:
    """Show exactly what Apply will add and remove on GitHub; changes nothing."""
    issue = get_issue_for_user(request, number)
    # A queue row's preview is its own form (to untick or add a label before Enter); without JS the Accept of a row
    # lands here, on the issue page, whose triage form is that form.
    in_queue = bool(request.htmx) and "in_queue" in request.POST
    form = _triage_form(issue, request.POST, in_queue=in_queue)
    if "accept" in request.POST:  # "accept the suggestions" from the queue or `a` (`d`: and close it as a duplicate)
        form = _triage_form(issue, _form_data(form, request.POST), in_queue=in_queue)
    valid = form.is_valid()
    context = {"form": form, "plan": form.plan() if valid else None, "in_queue": in_queue}
    context["original_change"] = form.original_change(request.user) if valid else None
    if in_queue and request.htmx.target == f"apply-preview-{number}":  # a row's preview opens: its picker's labels
        context["catalog_oob"] = True
    if request.htmx:
        # htmx swaps only 2xx answers: form errors come back as 200 so the triager sees them.
        return render(request, "rubric_app/issue.html#apply-preview", {"issue": issue, **context})
    return render(request, "rubric_app/issue.html", _issue_context(issue, **context))


def _form_data(form: TriageForm, posted) -> dict:
    """The suggested values as POST-like data, so "accept" goes through the same validation; accept=duplicate (`d` on
    a possible duplicate) takes them with the close as a duplicate of the original posted: they go to the original."""
    data = {**form.suggested, **{box: "on" if form.suggested[box] else "" for box in ("review", "hold")}}
    if posted.get("accept") == Route.DUPLICATE:
        data.update(route=Route.DUPLICATE, duplicate_of=posted.get("duplicate_of", ""))
    return data


@login_required
@require_POST
def issue_apply(request: HttpRequest, number: int) -> HttpResponse:
    """Record the decision (pending) and queue it; the result fragment polls until GitHub answered."""
    issue = get_issue_for_user(request, number, perm="apply_labels")
    in_queue = bool(request.htmx) and "in_queue" in request.POST
    form = _triage_form(issue, request.POST, in_queue=in_queue)
    if not form.is_valid():
        if request.htmx:
            context = {"issue": issue, "form": form, "in_queue": in_queue}
            return render(request, "rubric_app/issue.html#apply-preview", context)
        return render(request, "rubric_app/issue.html", _issue_context(issue, form=form), status=400)
    # Re-plan on the server: the posted form says what the triager chose, never what to send. One decision per issue
    # (a duplicate's original may take the labels chosen here), each validated, queued and audited on its own.
    made = decisions.request_group(
        plans=form.plans(), user=request.user, labels_seen=form.labels_seen_by_issue(), redirect=form.redirect_to()
    )
    return _queued(request, issue, next(decision for other, decision in made if other.pk == issue.pk))


def _queued(request: HttpRequest, issue: Issue, decision: TriageDecision) -> HttpResponse:
    """A decision on its way to GitHub: its fragment (polled, with a word when no github worker is up) for htmx,
    else back to the issue page."""
    if request.htmx:
        context = {"decision": decision, "issue": issue, **waiting(WorkerHeartbeat.objects.queues())}
        return render(request, "rubric_app/issue.html#decision", context)
    return redirect(issue)


@login_required
@require_POST
def bot_confirm(request: HttpRequest, number: int) -> HttpResponse:
    """Keep what PyTorch's triage bot labelled: a decision on record, nothing sent to GitHub (`a` in the bot lane)."""
    issue = get_issue_for_user(request, number, perm="apply_labels")
    decision = decisions.confirm_bot(
        issue=issue,
        user=request.user,
        labels_seen=request.POST.getlist("labels_seen"),
        rubric_refusal=accepting.bot_confirmation_refusal(issue),
    )
    if request.htmx:
        return render(request, "rubric_app/issue.html#bot-review", {"decision": decision, "issue": issue})
    return redirect(issue)


@login_required
@require_POST
def bot_correct(request: HttpRequest, number: int) -> HttpResponse:
    """The bot got it wrong: the corrected labels plus `bot-mislabeled` in one audited decision, queued."""
    issue = get_issue_for_user(request, number, perm="apply_labels")
    form = BotCorrectionForm(request.POST, issue=issue, allowed=Label.objects.triage_catalog(), descriptions={})
    if not form.is_valid():
        return render(request, "rubric_app/issue.html", _issue_context(issue, bot_form=form), status=400)
    decision = decisions.correct_bot(issue=issue, user=request.user, **form.cleaned_data)
    return _queued(request, issue, decision)


@login_required
@require_GET
def decision_status(request: HttpRequest, pk: int) -> HttpResponse:
    """The decision fragment; polled every second, answered with 286 (stop) once it is finished."""
    require(request, "view_issue")
    decision = get_object_or_404(TriageDecision.objects.select_related("issue", "user"), pk=pk)
    if not request.htmx:
        return redirect(decision.issue)
    context = {"decision": decision, "issue": decision.issue, "refresh": _labels_shown_at(request, decision)}
    if decision.status == TriageDecision.Status.PENDING:  # only then: is a github worker there to take it?
        context.update(waiting(WorkerHeartbeat.objects.queues()))
    return polled(request, "decision", context, decision.is_finished)


def _labels_shown_at(request: HttpRequest, decision: TriageDecision) -> str:
    """Where the polling page shows the issue's labels, refreshed in place (out of band) once the decision has
    finished: "header" on its issue page, "row" on the queue, "" elsewhere or while it is still on its way."""
    if not decision.is_finished:
        return ""
    path = (request.htmx.current_url_abs_path or "").split("?")[0]
    if path == decision.issue.get_absolute_url():
        return "header"
    return "row" if path == reverse("rubric_app:queue") else ""


@login_required
@require_POST
def bisect(request: HttpRequest, number: int) -> HttpResponse:
    issue = get_issue_for_user(request, number, perm="run_bisection")
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
            request, "rubric_app/issue.html#bisection-run", {"run": run, "issue": issue, **waiting(live, run=run)}
        )
    return redirect(f"{issue.get_absolute_url()}#bisection-current")  # the run it started, in sight


@login_required
@require_GET
def bisection_status(request: HttpRequest, pk: int) -> HttpResponse:
    """One run's progress fragment; polled every second, answered with 286 once the run ended."""
    require(request, "view_issue")
    run = get_object_or_404(
        BisectionRun.objects.select_related("issue", "requested_by").defer("log", "repro_code"), pk=pk
    )
    if not request.htmx:
        return redirect(f"{run.issue.get_absolute_url()}#bisection")
    context = {"run": run, "issue": run.issue, "just_finished": run.is_finished}
    if run.is_finished:  # where the run and the thread differ (verdicts weighed, issue #36)
        context["run_notes"] = evidence.run_notes(run, run.issue)
    if run.status == BisectionRun.Status.QUEUED:  # only then: is a worker of its queue there to take it?
        context.update(waiting(WorkerHeartbeat.objects.queues(), run=run))
    response = polled(request, "bisection-run", context, run.is_finished)
    # The issue page refetches its triage panel: the verdict is in the suggestions now.
    return trigger_client_event(response, "bisection-finished") if run.is_finished else response
