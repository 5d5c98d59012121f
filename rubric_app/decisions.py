"""A triager's decision: plan it, validate it, queue it, apply it to GitHub, audit it.

plan_changes turns the triage form's choices into a Plan: label additions and removals
(RUBRIC G5, G6, R11), and for the routes that stop labelling a standard reply, a close or a
transfer (G1, G2), or a close as a duplicate of another issue with the standard comment.
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

from rubric_app import github
from rubric_app.models import (
    BOT_MISLABELED,
    BOT_TRIAGED,
    CPU_INDUCTOR_ONCALL,
    FEEDBACK_LABELS,
    HIGH_PRIORITY,
    NEEDS_REPRODUCTION,
    PT2_ONCALL,
    REPRO_AGENT_INCORRECT,
    TRIAGE_REVIEW,
    TRIAGED,
    GitHubWrite,
    Issue,
    Label,
    Suggestion,
    TriageDecision,
    queue_state,
)
from rubric_app.rubric.catalog import TRANSFER_REPOS, is_forbidden, load_replies

MEETING_DECISIONS = ("high priority", "triaged", "needs reproduction", "low priority", "close")
PT2_QUEUES = (PT2_ONCALL, CPU_INDUCTOR_ONCALL)
# The routes that stop labelling (G1, G2, a duplicate): what each one sends instead.
QUESTION, MORE_INFO, TRANSFER, DUPLICATE = "question", "more info", "transfer", "duplicate"
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

    @property
    def comment(self) -> str:
        """The reply's text; the duplicate reply names the original ("Duplicate of #N": GitHub marks it so)."""
        if not self.reply:
            return ""
        text = load_replies()[self.reply]["comment"]
        return text.replace("{original}", f"#{self.duplicate_of}") if self.duplicate_of else text

    @property
    def close(self) -> bool:
        return bool(self.close_reason)

    @property
    def changes_nothing(self) -> bool:
        return not (self.add or self.remove or self.reply or self.close or self.transfer_to)


def plan_duplicate(original: int) -> Plan:
    """Close as a duplicate of #original, with the standard comment (which GitHub reads as the link)."""
    return Plan(reply="duplicate", close_reason="duplicate", duplicate_of=original)


def plan_changes(
    issue: Issue, *, chosen: list[str], route: str, review: bool, transfer_to: str = "", duplicate_of: int | None = None
) -> Plan:
    """Return the Plan for the triager's choices: exactly what GitHub will see.

    route "pt2" keeps `oncall: pt2`; "cpu inductor" moves the issue to `oncall: cpu inductor`
    (PT2's own sub-queue, so its module labels stay); any other `oncall: ...` name is a hand-off
    (G5: that one oncall label, no module labels, no `triaged`); "" keeps the issue's PT2 lane. review
    flags `triage review` (R11) instead of `triaged`; otherwise `triaged` is added unless handed off
    (G6), and a `triage review` the issue carries is removed (the two never go together). Labels
    currently on the issue are only removed by these rules, never because they were not ticked.
    Adding `needs reproduction` posts its standard reply. The routes that stop labelling change no
    label: "question" closes as not planned with the forum reply (G1), "more info" asks for a repro and
    logs (G1, unclear), "transfer" moves the issue to `transfer_to` (G2), "duplicate" closes it as a
    duplicate of #duplicate_of with the standard comment.
    """
    if route == QUESTION:
        return Plan(reply="redirect_to_forum", close_reason="not_planned")
    if route == MORE_INFO:
        return Plan(reply="request_more_info")
    if route == TRANSFER:
        return Plan(transfer_to=transfer_to)
    if route == DUPLICATE:
        return plan_duplicate(duplicate_of)
    current = set(issue.label_names())
    target = set(current) | set(chosen)
    if not route:  # no routing choice: the issue stays in the PT2 lane it is in
        route = CPU_INDUCTOR_ONCALL if CPU_INDUCTOR_ONCALL in current else PT2_ONCALL
    if route in ("pt2", PT2_ONCALL):
        oncall = PT2_ONCALL
    elif route in ("cpu inductor", CPU_INDUCTOR_ONCALL):
        oncall = CPU_INDUCTOR_ONCALL
    else:
        oncall = route if route.startswith("oncall:") else f"oncall: {route}"
    handoff = oncall not in PT2_QUEUES
    target = {name for name in target if not name.startswith("oncall:")} | {oncall}
    if handoff:
        target = {name for name in target if not name.startswith("module:") and name != TRIAGED}
    if review:
        target.add(TRIAGE_REVIEW)
    else:  # unticked on a flagged issue: the flag goes, shown in the preview (never `triaged` beside it, R11)
        target.discard(TRIAGE_REVIEW)
        if not handoff:
            target.add(TRIAGED)
    add, remove = sorted(target - current), sorted(current - target)
    return Plan(add, remove, reply="needs_reproduction" if NEEDS_REPRODUCTION in add else "")


def leaves_triaged_without_component(issue: Issue, add: list[str], remove: list[str]) -> bool:
    """True when the change would make an oncall: pt2 issue `triaged` with no `module:` label (G4).

    Only a change that adds `triaged` or takes a module label away: an issue triaged that way
    before (by hand on GitHub) can still get other changes, its G4 warning stays on its page.
    """
    after = (set(issue.label_names()) | set(add)) - set(remove)
    makes_it = TRIAGED in add or any(name.startswith("module:") for name in remove)
    return (
        makes_it and PT2_ONCALL in after and TRIAGED in after and not any(name.startswith("module:") for name in after)
    )


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
    if plan.reply and plan.reply not in load_replies():
        return f"Unknown standard reply {plan.reply!r}."
    if plan.close_reason and plan.close_reason not in CLOSE_REASONS:
        return f"Unknown close reason {plan.close_reason!r}; expected one of {', '.join(CLOSE_REASONS)}."
    if plan.transfer_to and plan.transfer_to not in TRANSFER_REPOS:
        return (
            f"G2: {plan.transfer_to!r} is not a repository the dashboard transfers to "
            f"({', '.join(TRANSFER_REPOS)}); transfer it on GitHub by hand."
        )
    if plan.reply == "duplicate" or plan.duplicate_of is not None:
        if plan.reply != "duplicate" or plan.close_reason != "duplicate":
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
    if TRIAGE_REVIEW in add and any(n.startswith("oncall:") and n not in PT2_QUEUES for n in add):
        return HANDOFF_REVIEW_MESSAGE
    if not close and leaves_triaged_without_component(issue, add, remove):
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
) -> TriageDecision:
    """Validate and record a decision; returns it, `refused` (with why) or `pending` and enqueued.

    A refused decision is kept for the audit log and nothing is sent to GitHub. catalog and original:
    as for refusal().
    """
    from rubric_app.tasks import apply_decision_task  # tasks imports this module

    plan = replace(plan, add=sorted(set(plan.add)), remove=sorted(set(plan.remove)))
    # What the page offered, for rubric health (/rubric): the stored suggestions are what it showed.
    shown = [
        {"label": s.label, "rule_id": s.rule_id, "preselected": s.preselected}
        for s in issue.suggestions.all()
        if s.kind == Suggestion.Kind.ADD
    ]
    off = github.off_reason()  # no token and no local demo GitHub: nothing may be sent
    why = (
        f"Apply is disabled: {off}"
        if off
        else refusal(
            issue=issue, user=user, plan=plan, meeting_decision=meeting_decision, catalog=catalog, original=original
        )
    )
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
            transfer_to=plan.transfer_to,
            duplicate_of=plan.duplicate_of,
            suggestions_shown=shown,
            bot_review=bot_review,
            status=TriageDecision.Status.REFUSED if why else TriageDecision.Status.PENDING,
            result_message=why,
            finished_at=timezone.now() if why else None,
        )
        if not why:
            apply_decision_task.delay_on_commit(decision.pk)
    return decision


def confirm_bot(*, issue: Issue, user, labels_seen) -> TriageDecision:
    """A triager keeps what PyTorch's triage bot labelled: recorded as an applied decision, nothing sent to GitHub.

    Takes the issue out of the "bot-triaged, not reviewed" lane (IssueQuerySet.bot_unreviewed); refused (and kept
    for the audit log) where a triage decision could not be made, or the issue does not carry `bot-triaged`.
    """
    why = ""
    if user is None or not user.has_perm("rubric_app.apply_labels"):
        why = "You may not review the bot's labels (the triager role is needed)."
    elif not issue.in_queue or issue.state != Issue.State.OPEN:
        why = f"#{issue.number} is no longer in the oncall: pt2 queue (closed or relabelled); sync and look again."
    elif BOT_TRIAGED not in issue.label_names():
        why = f"#{issue.number} does not carry {BOT_TRIAGED}: there is no bot labelling to confirm."
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


def _finish(decision: TriageDecision, status: str, message: str) -> TriageDecision:
    decision.status, decision.result_message, decision.finished_at = status, message, timezone.now()
    decision.save(update_fields=["status", "result_message", "finished_at"])
    return decision


def _audit(decision: TriageDecision, result: github.WriteResult) -> None:
    GitHubWrite.objects.create(
        decision=decision,
        action=result.action,
        target=result.target[:200],
        status_code=result.status,
        ok=result.ok,
        response=result.response,
    )


def _failure_message(result: github.WriteResult, done: list[str]) -> str:
    reasons = {
        403: "GitHub refused: the token may not change this issue (403).",
        404: "GitHub could not find the issue, label or repository (404).",
        410: "The issue is gone from GitHub (410).",
        422: "GitHub rejected the change as invalid (422).",
    }
    if result.status is None:
        why = f"GitHub did not answer ({result.response})."
    elif result.status >= 500:
        why = f"GitHub had a server error ({result.status}); try again later."
    else:
        why = reasons.get(result.status, f"GitHub answered {result.status}.")
    if result.action in ("transfer", "read_repository"):  # GraphQL's refusals say why in words
        why += f" {result.response.rstrip('.')}."
    step = f"{result.action.replace('_', ' ')} {result.target!r}"
    partial = f" Already applied before it: {', '.join(done)}; the next sync will show them." if done else ""
    return f"{step} failed: {why}{partial} Local labels were left as they were."


# Longer than one GitHub call can take (timeouts, retries, a rate-limit wait of up to two minutes):
# an `applying` decision whose heartbeat is older lost its worker, and may be resumed.
HEARTBEAT_STALE_AFTER = timedelta(minutes=5)


def _claim(decision_id: int, task_id: str = "") -> tuple[bool, bool]:
    """Claim the decision for this worker; returns (claimed, resumed).

    pending -> applying is a fresh start. An `applying` row is resumed when its worker died
    mid-way: at once when this is the same message that claimed it, delivered again (acks_late:
    its worker was lost), else once its heartbeat is HEARTBEAT_STALE_AFTER old. Each is a
    conditional UPDATE, so exactly one worker resumes it.
    """
    now = timezone.now()
    rows = TriageDecision.objects.filter(pk=decision_id)
    if rows.filter(status=TriageDecision.Status.PENDING).update(
        status=TriageDecision.Status.APPLYING, heartbeat_at=now, task_id=task_id
    ):
        return True, False
    redelivered = rows.filter(status=TriageDecision.Status.APPLYING, task_id=task_id) if task_id else rows.none()
    resumed = (redelivered | rows.abandoned(now - HEARTBEAT_STALE_AFTER)).update(heartbeat_at=now, task_id=task_id)
    return bool(resumed), bool(resumed)


def _beat(decision: TriageDecision) -> None:
    """Say this worker is still applying (the sweep resumes decisions whose heartbeat stopped)."""
    TriageDecision.objects.filter(pk=decision.pk, status=TriageDecision.Status.APPLYING).update(
        heartbeat_at=timezone.now()
    )


def apply_decision(decision_id: int, *, task_id: str = "", gh: github.Client | None = None) -> TriageDecision:
    """Apply a pending decision to GitHub change by change, after a conflict check; returns it.

    Claims the row (pending -> applying) and returns at once if another run already did.
    Ends `conflict` (nothing written) when GitHub's labels differ from labels_seen,
    `failed` when GitHub refuses a write or cannot be read, `applied` otherwise.
    A decision whose worker died while applying is resumed instead (see _claim, _resume).
    Every GitHub call, the re-reads included, is audited.
    """
    claimed, resumed = _claim(decision_id, task_id)
    decision = TriageDecision.objects.select_related("issue").get(pk=decision_id)
    if not claimed:
        return decision
    issue = decision.issue
    try:
        gh = gh or github.client()
        remote = gh.issue(issue.number)
    except github.GitHubError as exc:
        _audit(decision, github.WriteResult("read_labels", f"#{issue.number}", exc.status, False, exc.message))
        stopped = " (its first worker stopped mid-way: the next sync shows what had landed)" if resumed else ""
        return _finish(
            decision,
            TriageDecision.Status.FAILED,
            f"Could not re-read #{issue.number} from GitHub: {exc.message}{stopped}",
        )
    _audit(decision, github.WriteResult("read_labels", f"#{issue.number}", 200, True, ", ".join(remote.label_names)))
    if resumed:
        return _resume(decision, gh, remote)
    now_labels, seen = set(remote.label_names), set(decision.labels_seen)
    if now_labels != seen or remote.state != "open" and not decision.close_issue:
        diff = [f"+{n}" for n in sorted(now_labels - seen)] + [f"-{n}" for n in sorted(seen - now_labels)]
        state = "" if remote.state == "open" else f" The issue is now {remote.state}."
        return _finish(
            decision,
            TriageDecision.Status.CONFLICT,
            f"Someone changed #{issue.number} on GitHub since you looked ({', '.join(diff) or 'same labels'}).{state} "
            "Nothing was written; review the issue again.",
        )
    if decision.duplicate_of:
        gone = _original_refusal(decision, gh)
        if gone:
            return _finish(decision, TriageDecision.Status.FAILED, gone)
    return _write(
        decision,
        gh,
        remote,
        add=decision.labels_added,
        remove=decision.labels_removed,
        comment=decision.comment,
        close=decision.close_issue,
        transfer=bool(decision.transfer_to),
    )


def _original_refusal(decision: TriageDecision, gh: github.Client) -> str:
    """Read the original of a duplicate from GitHub (audited): why not to close against it ("" when it is
    there, an issue): a comment pointing at a deleted issue or a pull request would mislead."""
    number = decision.duplicate_of
    try:
        original = gh.issue(number)
    except github.GitHubError as exc:
        _audit(decision, github.WriteResult("read_original", f"#{number}", exc.status, False, exc.message))
        return f"Could not read the original #{number} from GitHub ({exc.message}): nothing was written."
    _audit(decision, github.WriteResult("read_original", f"#{number}", 200, True, original.state))
    if original.is_pull_request:
        return f"#{number} is a pull request on GitHub: nothing was written."
    return ""


def _write(
    decision: TriageDecision,
    gh: github.Client,
    remote: github.IssueData,
    *,
    add,
    remove,
    comment: str,
    close: bool,
    transfer: bool,
    before: list[str] = (),
) -> TriageDecision:
    """Write the reply, `add`, `remove`, the close and the transfer, one call at a time, auditing each;
    returns the finished decision.

    remote: the issue as GitHub has it now. before: what an earlier, interrupted attempt had already
    written (named in the outcome). The reply goes first, so a close or transfer never lands without it.
    """
    issue = decision.issue
    labels = set(remote.label_names)
    steps = (
        ([(gh.comment, comment)] if comment else [])
        + [(gh.add_label, n) for n in add]
        + [(gh.remove_label, n) for n in remove]
    )
    if close:
        steps.append((gh.close_issue, decision.close_reason or "completed"))
    done: list[str] = list(before)
    after = (labels | set(add)) - set(remove)
    for write, arg in steps:
        _beat(decision)
        result = write(issue.number, arg)
        _audit(decision, result)
        if not result.ok:
            return _finish(decision, TriageDecision.Status.FAILED, _failure_message(result, done))
        done.append(_step_name(result))
        if result.labels is not None:
            after = set(result.labels)  # GitHub's word, including anyone else's change meanwhile
    moved = ""
    if transfer:
        result = _transfer(decision, gh, remote)
        if not result.ok:
            return _finish(decision, TriageDecision.Status.FAILED, _failure_message(result, done))
        done.append(_step_name(result))
        moved = f" It is {result.response} and has left this queue."
    _update_local(issue, after, decision)
    issue.refresh_suggestions()
    written = ", ".join(done[len(before) :]) or "nothing more"
    if before:
        return _finish(
            decision,
            TriageDecision.Status.APPLIED,
            f"Its first worker stopped mid-way; GitHub already had: {', '.join(before)}. "
            f"Finished on GitHub: {written}.{moved}",
        )
    return _finish(decision, TriageDecision.Status.APPLIED, f"Applied on GitHub: {written}.{moved}")


def _step_name(result: github.WriteResult) -> str:
    """How the outcome names one write: "add label module: dynamo", "comment", "close (not planned)"."""
    if result.action == "comment":
        return "comment (standard reply)"
    if result.action == "close":  # its target is "#N (reason)": the outcome names the reason only
        return f"close {result.target.split(' ', 1)[1]}"
    return f"{result.action.replace('_', ' ')} {result.target}"


def _transfer(decision: TriageDecision, gh: github.Client, remote: github.IssueData) -> github.WriteResult:
    """Move the issue to decision.transfer_to (G2): look the repository up (audited), then transferIssue."""
    _beat(decision)
    try:
        repo_id = gh.repository_id(decision.transfer_to)
    except github.GitHubError as exc:
        result = github.WriteResult("read_repository", decision.transfer_to, exc.status, False, exc.message)
        _audit(decision, result)
        return result
    _audit(decision, github.WriteResult("read_repository", decision.transfer_to, 200, True, "found"))
    _beat(decision)
    result = gh.transfer_issue(remote.node_id, repo_id, number=remote.number, to=decision.transfer_to)
    _audit(decision, result)
    return result


def _resume(decision: TriageDecision, gh: github.Client, remote: github.IssueData) -> TriageDecision:
    """Finish a decision whose worker died mid-way, from what GitHub shows now; returns it finished.

    Nothing is written blindly: a label already added (or already gone) is not written again,
    whether or not the dead worker lived to audit its call, and the reply is looked for among the
    issue's comments (audited) before it is posted. If GitHub shows a change that is not this
    decision's (someone else's, meanwhile), it stops as `conflict`, saying exactly what of this
    decision had landed.
    """
    labels, seen = set(remote.label_names), set(decision.labels_seen)
    added, removed = set(decision.labels_added), set(decision.labels_removed)
    reply = _reply_on_github(decision, gh) if decision.comment else ""
    commented = bool(reply)
    landed = (
        ([reply] if reply else [])
        + [f"add label {n}" for n in sorted(added & labels)]
        + [f"remove label {n}" for n in sorted(removed - labels)]
    )
    if decision.close_issue and remote.state == "closed":
        landed.append("close")
    others = [f"+{n}" for n in sorted(labels - seen - added)] + [f"-{n}" for n in sorted(seen - labels - removed)]
    if remote.state != "open" and not decision.close_issue:
        others.append(f"the issue is now {remote.state}")
    if others:
        return _finish(
            decision,
            TriageDecision.Status.CONFLICT,
            f"Its worker stopped mid-way, and someone else changed #{decision.issue.number} since "
            f"({', '.join(others)}). "
            f"Of this decision GitHub has: {', '.join(landed) or 'nothing'}. Nothing more was written; "
            "review the issue again (the next sync shows GitHub's labels).",
        )
    return _write(
        decision,
        gh,
        remote,
        add=sorted(added - labels),
        remove=sorted(removed & labels),
        comment="" if commented else decision.comment,
        close=decision.close_issue and remote.state != "closed",
        transfer=bool(decision.transfer_to),
        before=landed,
    )


def _reply_on_github(decision: TriageDecision, gh: github.Client) -> str:
    """How the outcome names the decision's reply when it must not be posted again, or "" to post it.

    Posted already (by its dead worker): "comment (standard reply)". When the comments cannot be read
    it is not posted either (a reply missing is better than a reply twice), and the outcome says so.
    """
    try:
        comments = gh.comments(decision.issue.number)
    except github.GitHubError as exc:
        _audit(
            decision, github.WriteResult("read_comments", f"#{decision.issue.number}", exc.status, False, exc.message)
        )
        return "comment (standard reply: not posted again, GitHub's comments could not be read to check)"
    _audit(
        decision,
        github.WriteResult("read_comments", f"#{decision.issue.number}", 200, True, f"{len(comments)} comments"),
    )
    since = decision.created_at - timedelta(minutes=1)  # GitHub's clock, to the second
    posted = any(c.body.strip() == decision.comment.strip() and c.created_at >= since for c in comments)
    return "comment (standard reply)" if posted else ""


def fail_unclaimed(live: dict[str, list[str]], now=None) -> int:
    """End the decisions no `github` worker has taken within QUEUE_WAIT_TIMEOUT_MINUTES; returns how many.

    Nothing was written for them (still pending: no worker claimed them), so failing is safe; a
    worker that takes the message later finds the row no longer pending and does nothing.
    live: WorkerHeartbeat.objects.queues(), to say why.
    """
    now = now or timezone.now()
    minutes = settings.QUEUE_WAIT_TIMEOUT_MINUTES
    state = queue_state(live, "github")
    return TriageDecision.objects.unclaimed(now - timedelta(minutes=minutes)).update(
        status=TriageDecision.Status.FAILED,
        finished_at=now,
        result_message=f"No worker of the github queue took this decision within {minutes:g} min ({state}). "
        "Nothing was written to GitHub; apply it again once the github worker runs.",
    )


def _update_local(issue: Issue, after: set[str], decision: TriageDecision) -> None:
    """Mirror the applied change locally (the next sync confirms it)."""
    labels = [Label.objects.get_or_create(name=name)[0] for name in sorted(after)]
    with transaction.atomic():
        issue.labels.set(labels)
        # Time to triage (metrics.py): only the first applied decision sets it.
        Issue.objects.filter(pk=issue.pk, first_decided_at__isnull=True).update(first_decided_at=decision.created_at)
        fields = []
        if TRIAGE_REVIEW in decision.labels_added and issue.review_flagged_at is None:
            issue.review_flagged_at = timezone.now()
            fields.append("review_flagged_at")
        if decision.transfer_to:
            issue.in_queue = False  # it lives in another repository now (G2)
            fields.append("in_queue")
        elif decision.close_issue:
            issue.state, issue.in_queue, issue.closed_at = Issue.State.CLOSED, False, timezone.now()
            fields += ["state", "in_queue", "closed_at"]
        elif not after & set(settings.GITHUB_QUEUE_LABELS):
            issue.in_queue = False  # handed off (G5): it left our queue
            fields.append("in_queue")
        if fields:
            issue.save(update_fields=fields)
