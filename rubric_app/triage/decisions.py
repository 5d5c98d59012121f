"""A triager's decision: plan it, validate it, queue it, apply it to GitHub, audit it.

plan_changes turns the triage form's choices into a Plan: label additions and removals
(RUBRIC G5, G6, R11), and for the routes that stop labelling a standard reply, a close or a
transfer (G1, G2), or a close as a duplicate of another issue with the standard comment (and the labels chosen
for it on the original, when that is open in the queue: plan_for_original).
request_decision validates (G4, G7, R11, the queue, the duplicate's original) and records a
TriageDecision, refused or pending; request_group does so for each issue of a group; a pending one
is applied by apply_decision in the single-concurrency `github` Celery queue, one change at a time,
after checking that nobody changed the labels since the triager looked. Each HTTP call is recorded
as a GitHubWrite.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rubric_app import dispatch
from rubric_app.github import connect, credentials, identity, skill_files
from rubric_app.models import Issue, Label, Suggestion, TriageDecision
from rubric_app.rubric.reading.catalog import TRANSFER_REPOS, is_forbidden
from rubric_app.rubric.reading.flow import change_breaks_g4
from rubric_app.rubric.rules.skill_additions import reproduction_reply
from rubric_app.vocabulary import AGENT_INCORRECT as REPRO_AGENT_INCORRECT
from rubric_app.vocabulary import (
    BOT_MISLABELED,
    BOT_TRIAGED,
    CONFIRM_FIXED_REPLY,
    CPU_INDUCTOR_ONCALL,
    DUPLICATE_OF_FIXED_REPLY,
    EDGE_CASES,
    FEEDBACK_LABELS,
    HIGH_PRIORITY,
    LOW_PRIORITY,
    MAY_BE_FIXED,
    NEEDS_REPRODUCTION,
    PT2_ONCALL,
    TRIAGE_REVIEW,
    TRIAGED,
    Route,
    is_module,
    is_oncall,
)

MEETING_DECISIONS = (HIGH_PRIORITY, TRIAGED, NEEDS_REPRODUCTION, LOW_PRIORITY, "close")
PT2_QUEUES = (PT2_ONCALL, CPU_INDUCTOR_ONCALL)
NUMERICAL_ACCURACY_REPLY = "numerical_accuracy"
CLOSE_REASONS = ("completed", "not_planned", "duplicate")


@dataclass(frozen=True)
class Plan:
    """Exactly what GitHub will see, in the order it is written: the reply, the labels, the close, the transfer."""

    add: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)
    reply: str = ""  # a standard reply's name (rubric_app/data/pytorch_triage_templates.json), posted first
    close_reason: str = ""  # "" (stays open), or GitHub's state_reason: completed, not_planned, duplicate
    transfer_to: str = ""  # G2: the repository the issue moves to, last
    duplicate_of: int | None = None  # the original's number, named by the "duplicate" reply
    fixed_on: str = ""  # the torch version the "confirm_fixed" reply asks the reporter to try
    fixed_summary: str = ""  # what the runs showed, quoted in that reply

    @property
    def comment(self) -> str:
        """The reply's text; the duplicate reply names the original ("Duplicate of #N": GitHub marks it so)."""
        if not self.reply:
            return ""
        text = skill_files.replies().get(self.reply, {}).get("comment", "")
        if self.fixed_on:
            text = text.replace("{version}", self.fixed_on).replace("{summary}", self.fixed_summary)
        return text.replace("{original}", f"#{self.duplicate_of}") if self.duplicate_of else text

    @property
    def close(self) -> bool:
        return bool(self.close_reason)

    @property
    def changes_nothing(self) -> bool:
        return not (self.add or self.remove or self.reply or self.close or self.transfer_to)


# What plan_duplicate reads of the original.
FIX_FIELDS = ("number", "state", "state_reason", "closed_at", "named_fix", "fixed_in")
DUPLICATE_REPLIES = ("duplicate", DUPLICATE_OF_FIXED_REPLY)


def plan_duplicate(original: int) -> Plan:
    """Close as a duplicate of #original, with the standard comment (which GitHub reads as the link). When the
    original was closed as fixed (Issue.fixed: its thread names the fix or the build with it), the reply asks the
    reporter to try the build with the fix, not to follow a closed issue for updates (one query)."""
    row = Issue.objects.filter(number=original).only(*FIX_FIELDS).first() if original else None
    if row is not None and row.fixed:
        build = row.fixed_in if row.fixed_in and "nightly" in row.fixed_in else ""
        version = build or (f"torch {row.fixed_in} or newer" if row.fixed_in else "the latest nightly")
        summary = " ".join(x for x in (f"by {row.named_fix}" if row.named_fix else "", row.closed_how) if x)
        return Plan(
            reply=DUPLICATE_OF_FIXED_REPLY,
            close_reason="duplicate",
            duplicate_of=original,
            fixed_on=version,
            fixed_summary=summary,
        )
    return Plan(reply="duplicate", close_reason="duplicate", duplicate_of=original)


def plan_for_original(original: Issue | None, *, chosen: list[str], review: bool, hold: bool = False) -> Plan | None:
    """What closing reports as its duplicates gives their original, on the group route and the issue page alike: the
    labels chosen for them (and the review flag) on it, in its own lane, when it is an open queue issue (the one left
    open is the one that needs them) and that changes something; None: it is left unchanged (no decision made).
    hold: `triaged` waits for a human on the original (G6, plan_changes)."""
    if original is None or not original.in_queue or original.state != Issue.State.OPEN or not (chosen or review):
        return None
    plan = plan_changes(original, chosen=chosen, route="", review=review, hold=hold)
    return None if plan.changes_nothing else plan


def plan_confirm_fixed(issue: Issue) -> Plan:
    """Ask the reporter to confirm on the newer build where the repro now passes (no label, no close): the issue's
    "may be fixed" finding names the build. ValueError when it has none."""
    comparison = issue.build_comparison if issue.build_finding == MAY_BE_FIXED else {}
    if not comparison.get("newer_version"):
        raise ValueError("no run shows that this issue may be fixed on a newer torch build")
    return Plan(reply=CONFIRM_FIXED_REPLY, fixed_on=comparison["newer_version"], fixed_summary=comparison["summary"])


def plan_changes(
    issue: Issue,
    *,
    chosen: list[str],
    route: str,
    review: bool,
    transfer_to: str = "",
    duplicate_of: int | None = None,
    hold: bool = False,
) -> Plan:
    """Return the Plan for the triager's choices: exactly what GitHub will see.

    route "pt2" keeps `oncall: pt2`; "cpu inductor" moves the issue to `oncall: cpu inductor`
    (PT2's own sub-queue, so its module labels stay); any other `oncall: ...` name is a hand-off
    (G5: that one oncall label, no module labels, no `triaged`); "" keeps the issue's PT2 lane. review
    flags `triage review` (R11) instead of `triaged`; otherwise `triaged` is added unless handed off or held
    (`hold`: a rule still needs a human, G6), and a `triage review` the issue carries is removed (the two never go
    together); `triaged` never goes beside `needs reproduction` (G9): marking an issue that carries it triaged
    removes it (the reproduction has arrived), shown in the preview like the flag. Labels
    currently on the issue are only removed by these rules, never because they were not ticked.
    Adding `needs reproduction` posts its standard reply. The routes that stop labelling change no
    label: "question" closes as not planned with the forum reply (G1), "more info" asks for a repro and
    logs (G1, unclear), "transfer" moves the issue to `transfer_to` (G2), "duplicate" closes it as a
    duplicate of #duplicate_of with the standard comment, "confirm fixed" asks the reporter to confirm on the
    newer build where the repro passes (plan_confirm_fixed), "expected numerics" closes it as expected floating-point
    behaviour with the numerical-accuracy reply and `module: edge cases` (G10). "reproduction" labels as the issue's
    lane does, adds `needs reproduction` and asks for a self-contained reproduction (G9): never `triaged`, and so does
    ticking `needs reproduction` on any route. Adding `module: edge cases` posts the numerical-accuracy reply (G10).
    """
    if route == Route.QUESTION:
        return Plan(reply="redirect_to_forum", close_reason="not_planned")
    if route == Route.MORE_INFO:
        return Plan(reply="request_more_info")
    if route == Route.TRANSFER:
        return Plan(transfer_to=transfer_to)
    if route == Route.DUPLICATE:
        return plan_duplicate(duplicate_of)
    if route == Route.CONFIRM_FIXED:
        return plan_confirm_fixed(issue)
    current = set(issue.label_names())
    if route == Route.EXPECTED_NUMERICS:
        add = [] if EDGE_CASES in current else [EDGE_CASES]
        return Plan(add=add, reply=NUMERICAL_ACCURACY_REPLY, close_reason="not_planned")
    if route == Route.REPRODUCTION:
        chosen, route = [*chosen, NEEDS_REPRODUCTION], ""
    target = set(current) | set(chosen)
    if not route:  # no routing choice: the issue stays in the PT2 lane it is in
        route = CPU_INDUCTOR_ONCALL if CPU_INDUCTOR_ONCALL in current else PT2_ONCALL
    if route in (Route.PT2, PT2_ONCALL):
        oncall = PT2_ONCALL
    elif route in (Route.CPU, CPU_INDUCTOR_ONCALL):
        oncall = CPU_INDUCTOR_ONCALL
    else:
        oncall = route if is_oncall(route) else f"oncall: {route}"
    handoff = oncall not in PT2_QUEUES
    target = {name for name in target if not is_oncall(name)} | {oncall}
    if handoff:
        target = {name for name in target if not is_module(name) and name != TRIAGED}
    asks_repro = NEEDS_REPRODUCTION in chosen  # G9: not triaged until a reproduction arrives
    if review:
        target.add(TRIAGE_REVIEW)
    else:  # unticked on a flagged issue: the flag goes, shown in the preview (never `triaged` beside it, R11)
        target.discard(TRIAGE_REVIEW)
        if not handoff and not asks_repro and not hold:
            target.add(TRIAGED)
            target.discard(NEEDS_REPRODUCTION)  # G9: triaged once a reproduction has arrived
    add, remove = sorted(target - current), sorted(current - target)
    return Plan(add, remove, reply=_reply_for(add))


def _reply_for(add: list[str]) -> str:
    """The standard reply that goes with the labels added: G9's request for a self-contained reproduction with
    `needs reproduction`, G10's numerical-accuracy reply with `module: edge cases`."""
    if NEEDS_REPRODUCTION in add:
        return reproduction_reply(skill_files.replies())
    if EDGE_CASES in add and NUMERICAL_ACCURACY_REPLY in skill_files.replies():
        return NUMERICAL_ACCURACY_REPLY
    return ""


def duplicate_refusal(issue: Issue, number: int | None, original: Issue | None) -> str:
    """Why #issue may not be closed as a duplicate of #number (original: its row in the mirror, or None);
    "" when it may."""
    if not number:
        return "Name the issue this one duplicates (its number)."
    if number == issue.number:
        return f"#{number} cannot be a duplicate of itself."
    if original is None:
        return (
            f"#{number} is not in the mirror: only an issue the dashboard has synced can be the original "
            "(check the number, or sync)."
        )
    if original.is_pull_request:
        return f"#{number} is a pull request: an issue duplicates an issue."
    if original.repo != issue.repo:
        return f"#{number} belongs to {original.repo}, not to {issue.repo}."
    looped = TriageDecision.objects.filter(
        issue=original, duplicate_of=issue.number, status=TriageDecision.Status.APPLIED
    )
    if original.state == Issue.State.CLOSED and looped.exists():
        return f"#{number} was closed as a duplicate of #{issue.number}: closing this one would leave neither open."
    return ""


def refusal(
    *,
    issue: Issue,
    user,
    plan: Plan,
    meeting_decision: str = "",
    catalog: frozenset[str] | None = None,
    original: Issue | None = None,
) -> str:
    """Why this decision may not go to GitHub, in plain words; "" when it may.

    catalog (Label.objects.triage_catalog()) and original (the row of plan.duplicate_of) are looked up
    when not given: a caller deciding many issues at once passes them.
    """
    add, remove, close = plan.add, plan.remove, plan.close
    if issue.is_pull_request:
        return f"#{issue.number} is a pull request; the dashboard only changes issues."
    if issue.repo != settings.GITHUB_REPO:
        return f"#{issue.number} belongs to {issue.repo}, not to the configured repo {settings.GITHUB_REPO}."
    if not issue.in_queue or issue.state != Issue.State.OPEN:
        return f"#{issue.number} is no longer in the oncall: pt2 queue (closed or relabelled); sync and look again."
    if user is None or not user.has_perm("rubric_app.apply_labels"):
        return "You may not change labels on GitHub (the triager role is needed)."
    if meeting_decision and meeting_decision not in MEETING_DECISIONS:
        return f"Unknown meeting decision {meeting_decision!r}; expected one of {', '.join(MEETING_DECISIONS)}."
    if set(add) & set(remove):
        return f"Asked to add and remove the same label: {', '.join(sorted(set(add) & set(remove)))}."
    if plan.changes_nothing:
        return "Nothing to change: the issue already has these labels."
    if plan.reply and plan.reply not in skill_files.replies():
        return f"Unknown standard reply {plan.reply!r}."
    if plan.close_reason and plan.close_reason not in CLOSE_REASONS:
        return f"Unknown close reason {plan.close_reason!r}; expected one of {', '.join(CLOSE_REASONS)}."
    if plan.transfer_to and plan.transfer_to not in TRANSFER_REPOS:
        return (
            f"G2: {plan.transfer_to!r} is not a repository the dashboard transfers to "
            f"({', '.join(TRANSFER_REPOS)}); transfer it on GitHub by hand."
        )
    if plan.reply in DUPLICATE_REPLIES or plan.duplicate_of is not None:
        if plan.reply not in DUPLICATE_REPLIES or plan.close_reason != "duplicate":
            return "A duplicate is closed as a duplicate, with the duplicate reply naming the original."
        if original is None or original.number != plan.duplicate_of:
            original = Issue.objects.filter(number=plan.duplicate_of).first() if plan.duplicate_of else None
        why = duplicate_refusal(issue, plan.duplicate_of, original)
        if why:
            return why
    forbidden = sorted(name for name in set(add) | set(remove) if is_forbidden(name))
    if forbidden:
        return f"RUBRIC G7 forbids changing {', '.join(forbidden)} from the dashboard."
    catalog = Label.objects.triage_catalog() if catalog is None else catalog
    unknown = sorted(name for name in add if name not in catalog and name not in FEEDBACK_LABELS)
    feedback = sorted(set(add) & FEEDBACK_LABELS)
    if feedback:  # human feedback on PyTorch's automation: allowed, where the repository has the label
        missing = sorted(set(feedback) - Label.objects.feedback_catalog())
        if missing:
            return (
                f"The repository's synced label list lacks {', '.join(missing)}: sync the labels, or add it on GitHub."
            )
    if unknown:
        return f"Not in the triage label catalog (G7): {', '.join(unknown)}."
    if TRIAGE_REVIEW in add and any(is_oncall(n) and n not in PT2_QUEUES for n in add):
        return HANDOFF_REVIEW_MESSAGE
    if not close and change_breaks_g4(issue.label_names(), add, remove):
        if meeting_decision:
            return (
                f"G4: {meeting_decision!r} would leave #{issue.number} triaged in oncall: pt2 without a module: label, "
                "and no suggested component was taken. Add one on the issue page, then decide again."
            )
        return G4_MESSAGE
    wants_high = HIGH_PRIORITY in add or meeting_decision == HIGH_PRIORITY
    if wants_high and not user.has_perm("rubric_app.record_meeting_decision"):
        return "`high priority` is decided by the triage meeting (R11): flag `triage review` instead."
    return ""


# for_meeting lists the PT2 queue only: a flag on an issue handed off would go to GitHub, and the meeting never see it.
HANDOFF_REVIEW_MESSAGE = (
    "A hand-off leaves the PT2 queue, so the meeting would never see a triage review flag "
    "(R11, G5): keep it in oncall: pt2 flagged, or hand it off unflagged."
)
G4_MESSAGE = (
    "G4: this would mark the issue triaged with no module: label. Tick a module label (the possible ones "
    "are listed with their evidence), flag triage review for the meeting (R11), or pick a route that stops "
    "labelling (a usage question, ask for more info, transfer)."
)


def request_decision(
    *,
    issue: Issue,
    user,
    plan: Plan,
    labels_seen,
    redirect: str = "",
    meeting_decision: str = "",
    meeting=None,
    catalog: frozenset[str] | None = None,
    original: Issue | None = None,
    bot_review: str = "",
    hold_s: float = 0,
) -> TriageDecision:
    """Validate and record a decision; returns it, `refused` (with why) or `pending` and enqueued.

    A refused decision is kept for the audit log and nothing is sent to GitHub. catalog and original:
    as for refusal(). hold_s: seconds it is held before any worker may write it (not_before), during which
    undo() takes it back; the task is sent with that countdown.
    """
    plan = replace(plan, add=sorted(set(plan.add)), remove=sorted(set(plan.remove)))
    # What the page offered, for rubric health (/rubric): the stored suggestions are what it showed.
    shown = [
        {"label": s.label, "rule_id": s.rule_id, "preselected": s.preselected}
        for s in issue.suggestions.all()
        if s.kind == Suggestion.Kind.ADD
    ]
    off = connect.off_reason()  # no token and no local demo GitHub: nothing may be sent
    unsigned = credentials.why_not_as(user)  # written as the triager, who has no usable GitHub token
    # A GitHub user's role as GitHub says it now (at most identity.WRITE_TRUST old), or why it cannot be told.
    lost = "" if off or unsigned else identity.write_refusal(user)
    why = (
        f"Apply is disabled: {off}"
        if off
        else f"Not sent to GitHub: {unsigned}."
        if unsigned
        else f"Not sent to GitHub: {lost}"
        if lost
        else refusal(
            issue=issue, user=user, plan=plan, meeting_decision=meeting_decision, catalog=catalog, original=original
        )
    )
    now = timezone.now()
    held = hold_s > 0 and not why
    with transaction.atomic():
        decision = TriageDecision.objects.create(
            issue=issue,
            user=user,
            labels_seen=sorted(labels_seen),
            labels_added=plan.add,
            labels_removed=plan.remove,
            redirect=redirect,
            meeting_decision=meeting_decision,
            meeting=meeting,
            close_issue=plan.close,
            close_reason=plan.close_reason,
            comment=plan.comment,
            reply=plan.reply,
            transfer_to=plan.transfer_to,
            duplicate_of=plan.duplicate_of,
            suggestions_shown=shown,
            bot_review=bot_review,
            status=TriageDecision.Status.REFUSED if why else TriageDecision.Status.PENDING,
            result_message=why,
            created_at=now,
            not_before=now + timedelta(seconds=hold_s) if held else None,
            finished_at=now if why else None,
        )
        if held:
            dispatch.start_decision(decision.pk, countdown=hold_s)
        elif not why:
            dispatch.start_decision(decision.pk)
    return decision


def undo(*, decision: TriageDecision, user, now=None) -> str:
    """Take back a decision still held for its undo window (TriageDecision.is_held): it ends `undone`, kept in the
    audit log with who took it back, and nothing is sent to GitHub. Returns "" when undone, else why not.

    A conditional UPDATE on the held row: a worker that claimed it first wins, and the undo says it came too late.
    Who decided it may undo it, and the meeting's chair.
    """
    if user is None or (user.pk != decision.user_id and not user.has_perm("rubric_app.record_meeting_decision")):
        return "Only who made the decision, or the meeting's chair, may undo it."
    now = now or timezone.now()
    taken_back = TriageDecision.objects.filter(
        pk=decision.pk, status=TriageDecision.Status.PENDING, not_before__gt=now
    ).update(
        status=TriageDecision.Status.UNDONE,
        result_message=f"Undone by {user.get_username()} before it was written: nothing was sent to GitHub.",
        finished_at=now,
    )
    decision.refresh_from_db()
    if taken_back:
        return ""
    if decision.status == TriageDecision.Status.UNDONE:
        return ""  # a second click on Undo: already done
    return "Too late to undo: it is no longer held (see its outcome); a new decision can change it back."


def confirm_bot(*, issue: Issue, user, labels_seen, rubric_refusal: str = "") -> TriageDecision:
    """A triager keeps what PyTorch's triage bot labelled: recorded as an applied decision, nothing sent to GitHub.

    Takes the issue out of the "bot-triaged, not reviewed" lane (IssueQuerySet.bot_unreviewed); refused (and kept
    for the audit log) where a triage decision could not be made, the issue does not carry `bot-triaged`, or the
    rubric says the bot's labels are not what it would apply (rubric_refusal: accepting.bot_confirmation_refusal).
    """
    why = identity.write_refusal(user)  # a GitHub user's role as GitHub says it now
    if why:
        why = f"Not recorded: {why}"
    elif user is None or not user.has_perm("rubric_app.apply_labels"):
        why = "You may not review the bot's labels (the triager role is needed)."
    elif not issue.in_queue or issue.state != Issue.State.OPEN:
        why = f"#{issue.number} is no longer in the oncall: pt2 queue (closed or relabelled); sync and look again."
    elif BOT_TRIAGED not in issue.label_names():
        why = f"#{issue.number} does not carry {BOT_TRIAGED}: there is no bot labelling to confirm."
    elif rubric_refusal:
        why = rubric_refusal
    return TriageDecision.objects.create(
        issue=issue,
        user=user,
        labels_seen=sorted(labels_seen),
        bot_review="confirmed",
        status=TriageDecision.Status.REFUSED if why else TriageDecision.Status.APPLIED,
        result_message=why or "Kept the bot's labels; nothing was sent to GitHub.",
        finished_at=timezone.now(),
    )


def correct_bot(
    *, issue: Issue, user, add, remove, labels_seen, repro_incorrect: bool = False, redirect: str = ""
) -> TriageDecision:
    """The bot got it wrong: fix the labels and add `bot-mislabeled` (and `repro:agent:h100:incorrect` for a
    wrong Repro Agent verdict) in one decision, validated, audited and applied like any other (request_decision).
    """
    feedback = [BOT_MISLABELED] + ([REPRO_AGENT_INCORRECT] if repro_incorrect else [])
    plan = Plan(add=[*add, *feedback], remove=list(remove))
    return request_decision(
        issue=issue, user=user, plan=plan, labels_seen=labels_seen, redirect=redirect, bot_review="mislabeled"
    )


def request_group(
    *,
    plans: list[tuple[Issue, Plan | None]],
    user,
    labels_seen: dict[int, list[str]],
    redirect: str = "",
    catalog: frozenset[str] | None = None,
) -> list[tuple[Issue, TriageDecision | None]]:
    """One decision for several issues (a signature group): a TriageDecision per issue, each validated,
    audited and queued on its own (request_decision), with the labels its page showed; None for an
    issue the decision leaves alone (the original of duplicates). Returns them in the plans' order."""
    catalog = Label.objects.triage_catalog() if catalog is None else catalog
    known = _originals(plans)
    return [
        (
            issue,
            request_decision(
                issue=issue,
                user=user,
                plan=plan,
                labels_seen=labels_seen[issue.number],
                redirect=redirect,
                catalog=catalog,
                original=known.get(plan.duplicate_of),
            )
            if plan
            else None,
        )
        for issue, plan in plans
    ]


def group_refusals(*, plans: list[tuple[Issue, Plan | None]], user, catalog: frozenset[str]) -> list[str]:
    """Why each plan of a group decision would be refused ("" when it would go, and for no plan): the preview's."""
    known = _originals(plans)
    return [
        refusal(issue=issue, user=user, plan=plan, catalog=catalog, original=known.get(plan.duplicate_of))
        if plan
        else ""
        for issue, plan in plans
    ]


def _originals(plans: list[tuple[Issue, Plan | None]]) -> dict[int, Issue]:
    """The mirror's rows of the originals the plans name as duplicated, by number: one query."""
    numbers = {plan.duplicate_of for _, plan in plans if plan and plan.duplicate_of}
    return {issue.number: issue for issue in Issue.objects.filter(number__in=numbers)} if numbers else {}
