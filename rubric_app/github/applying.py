"""Applying a triager's decision to GitHub: the worker half of a decision (the web half is decisions.py).

apply_decision runs in the single-concurrency `github` Celery queue: it claims a pending decision,
checks that nobody changed the labels since the triager looked, writes one change at a time
(labels, a reply, a close, a transfer), audits each HTTP call as a GitHubWrite and updates the local
mirror. A worker that died mid-way is resumed from what GitHub shows (never repeating a write blindly);
fail_unclaimed ends the decisions that no worker took in time, saying why.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from rubric_app import processes
from rubric_app.github import client as github
from rubric_app.github import credentials, identity
from rubric_app.models import GitHubWrite, Issue, Label, TriageDecision, queue_state
from rubric_app.vocabulary import HIGH_PRIORITY, TRIAGE_REVIEW


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
        401: "GitHub no longer accepts the token (401): sign in to GitHub again.",
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
    if result.status in (401, 403) and "triage" in result.response:  # a triager's own token: what to do
        why = f"{result.response} (403)."
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

    pending -> applying is a fresh start, once its undo window (not_before) is over. An `applying` row is
    resumed when its worker died mid-way: at once when this is the same message that claimed it, delivered
    again (acks_late: its worker was lost), else once its heartbeat is HEARTBEAT_STALE_AFTER old. Each is a
    conditional UPDATE, so exactly one worker resumes it.
    """
    now, worker = timezone.now(), processes.this_process()
    rows = TriageDecision.objects.filter(pk=decision_id)
    # A decision held for its undo window (not_before) is not taken before then: decisions.undo may still take it back.
    due = Q(not_before__isnull=True) | Q(not_before__lte=now)
    if rows.filter(due, status=TriageDecision.Status.PENDING).update(
        status=TriageDecision.Status.APPLYING, heartbeat_at=now, task_id=task_id, worker=worker
    ):
        return True, False
    redelivered = rows.filter(status=TriageDecision.Status.APPLYING, task_id=task_id) if task_id else rows.none()
    resumed = (redelivered | rows.abandoned(now - HEARTBEAT_STALE_AFTER)).update(
        heartbeat_at=now, task_id=task_id, worker=worker
    )
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
    stopped = " (its first worker stopped mid-way: the next sync shows what had landed)" if resumed else ""
    # The triager's role as GitHub says it now (an answer at most identity.WRITE_TRUST old), whoever's token
    # writes: someone removed from the team or the org since they decided gets nothing written (issue 35).
    needs = ("rubric_app.apply_labels",) + (
        ("rubric_app.record_meeting_decision",) if HIGH_PRIORITY in decision.labels_added else ()
    )
    lost = identity.write_refusal(decision.user, needs=needs)
    if lost:
        _audit(decision, github.WriteResult("role_check", str(decision.user or ""), None, False, lost))
        return _finish(decision, TriageDecision.Status.FAILED, f"Not written to GitHub: {lost}{stopped}")
    try:
        # As the triager (their own token) or as the site; never another identity when theirs is refused.
        gh = gh or credentials.write_client_for(decision.user)
        remote = gh.issue(issue.number)
    except github.TokenRefused as exc:
        _audit(decision, github.WriteResult("credentials", str(decision.user or ""), exc.status, False, exc.message))
        return _finish(decision, TriageDecision.Status.FAILED, f"Not written to GitHub: {exc.message}{stopped}.")
    except github.GitHubError as exc:
        _audit(decision, github.WriteResult("read_labels", f"#{issue.number}", exc.status, False, exc.message))
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
    missing = _missing_labels(decision, gh, add)
    if missing:
        partial = f" Its first worker had already written: {', '.join(before)}." if before else ""
        return _finish(decision, TriageDecision.Status.FAILED, f"{missing} Nothing was written.{partial}")
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
    written = ", ".join(done[len(before) :]) or "nothing more"
    if before:
        return _finish(
            decision,
            TriageDecision.Status.APPLIED,
            f"Its first worker stopped mid-way; GitHub already had: {', '.join(before)}. "
            f"Finished on GitHub: {written}.{moved}",
        )
    return _finish(decision, TriageDecision.Status.APPLIED, f"Applied on GitHub: {written}.{moved}")


def _missing_labels(decision: TriageDecision, gh: github.Client, names) -> str:
    """Why not to add `names`, or "": each is asked of GitHub (audited) just before the first write, since GitHub
    creates a label it is asked to add that its catalog lacks, and the dashboard must never invent one (a label
    deleted on GitHub while the decision was held, a catalog event applied out of order). A label GitHub lacks
    leaves the mirror's catalog too; one that cannot be checked is not written either."""
    missing = []
    for name in names:
        _beat(decision)
        try:
            found = gh.label(name)
        except github.GitHubError as exc:
            _audit(decision, github.WriteResult("read_label", name, exc.status, False, exc.message))
            return f"Could not check that {gh.repo} still has the label {name!r} ({exc.message})."
        there = found is not None and found.name.lower() == name.lower()
        said = "in the repository's labels" if there else "not in the repository's labels"
        _audit(decision, github.WriteResult("read_label", name, 200 if there else 404, there, said))
        missing += [] if there else [name]
    if not missing:
        return ""
    Label.objects.filter(name__in=missing).update(in_catalog=False)
    return (
        f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} no longer a label of {gh.repo} on GitHub "
        "(deleted or renamed since the decision was made), and GitHub creates a label it is asked to add: "
        "sync and decide again."
    )


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
            issue.in_queue, issue.left_queue_at = False, timezone.now()  # it lives in another repository now (G2)
            fields += ["in_queue", "left_queue_at"]
        elif decision.close_issue:
            issue.state, issue.in_queue, issue.closed_at = Issue.State.CLOSED, False, timezone.now()
            fields += ["state", "in_queue", "closed_at"]
        elif not after & set(settings.GITHUB_QUEUE_LABELS):
            issue.in_queue, issue.left_queue_at = False, timezone.now()  # handed off (G5): it left our queue
            fields += ["in_queue", "left_queue_at"]
        if fields:
            issue.save(update_fields=fields)
