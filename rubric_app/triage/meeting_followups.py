"""The meeting's follow-ups (issue 53): what a meeting decided `high priority`, or gave an owner, that has gone quiet
on GitHub for STALE_DAYS, or is still open OPEN_DAYS after the decision; Kubernetes re-triages its triaged issues
by priority after 30/90/365 days, and a weekly meeting otherwise forgets what it decided.

Each follow-up is the issue's newest applied meeting decision; the chair re-adds the issue to the agenda (a decision
flagging `triage review`, R11, written to GitHub and audited as any) or dismisses it with a note (FollowUpDismissal,
the audit record). Issues already on the agenda, closed, gone from GitHub or with a decision on its way are left out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery
from django.utils import timezone

from rubric_app.models import AgendaItem, FollowUpDismissal, Issue, Meeting, TriageDecision
from rubric_app.triage.decisions import Plan, request_decision
from rubric_app.vocabulary import HIGH_PRIORITY, TRIAGE_REVIEW

STALE_DAYS = 30
OPEN_DAYS = 90
SHOWN = 50


@dataclass(frozen=True)
class FollowUp:
    decision: TriageDecision
    issue: Issue
    owner: str
    note: str
    why: str

    @property
    def last_activity(self) -> datetime:
        return self.issue.updated_at


def pending(now: datetime | None = None) -> QuerySet[TriageDecision]:
    """The decisions whose issues want following up (see the module), newest decision first, each with the item's
    owner and note: one query."""
    now = now or timezone.now()
    decided = TriageDecision.objects.filter(meeting__isnull=False, status=TriageDecision.Status.APPLIED)
    item = AgendaItem.objects.filter(meeting=OuterRef("meeting"), issue=OuterRef("issue"))
    newer = decided.filter(issue=OuterRef("issue"), created_at__gt=OuterRef("created_at"))
    in_flight = TriageDecision.objects.filter(issue=OuterRef("issue")).in_flight()
    flagged = Issue.labels.through.objects.filter(issue=OuterRef("issue"), label__name=TRIAGE_REVIEW)
    return (
        decided.annotate(
            item_owner=Subquery(item.values("owner__username")[:1]), item_note=Subquery(item.values("note")[:1])
        )
        .filter(
            Q(labels_added__contains=[HIGH_PRIORITY]) | Q(meeting_decision=HIGH_PRIORITY) | Q(item_owner__isnull=False)
        )
        .filter(issue__state=Issue.State.OPEN, issue__gone_at__isnull=True)
        # Quiet: neither GitHub's last activity nor the decision (itself a write there) in the last STALE_DAYS.
        .filter(
            Q(issue__updated_at__lte=now - timedelta(days=STALE_DAYS), created_at__lte=now - timedelta(days=STALE_DAYS))
            | Q(created_at__lte=now - timedelta(days=OPEN_DAYS))
        )
        .exclude(Exists(newer))
        .exclude(Exists(in_flight))
        .exclude(Exists(flagged))
        .exclude(Exists(FollowUpDismissal.objects.filter(decision=OuterRef("pk"))))
        .select_related("issue", "meeting")
        .order_by("-created_at", "-pk")
    )


def follow_ups(now: datetime | None = None) -> list[FollowUp]:
    """The follow-ups the meeting page and the minutes list, newest decision first (at most SHOWN)."""
    now = now or timezone.now()
    return [_follow_up(decision, now) for decision in pending(now)[:SHOWN]]


def _follow_up(decision: TriageDecision, now: datetime) -> FollowUp:
    quiet = (now - max(decision.issue.updated_at, decision.created_at)).days
    reasons = []
    if quiet >= STALE_DAYS:
        reasons.append(f"no activity on GitHub for {quiet} days")
    if now - decision.created_at >= timedelta(days=OPEN_DAYS):
        reasons.append(f"still open {(now - decision.created_at).days} days after the decision")
    note = decision.note or decision.item_note or ""
    return FollowUp(decision, decision.issue, decision.item_owner or "", note, "; ".join(reasons))


def dismiss(decision: TriageDecision, *, by, note: str, meeting: Meeting | None) -> FollowUpDismissal:
    """Set a follow-up aside with why (required): the audit record of who, when and why."""
    if not note.strip():
        raise ValueError("Say why it needs no follow-up: the note is the record.")
    return FollowUpDismissal.objects.create(decision=decision, by=by, note=note.strip(), meeting=meeting)


def readd(decision: TriageDecision, *, by, note: str = "") -> TriageDecision:
    """Put the issue back on the agenda: flag it `triage review` on GitHub (R11), a decision like any, audited."""
    issue = decision.issue
    labels = issue.label_names()
    plan = Plan(add=[TRIAGE_REVIEW]) if TRIAGE_REVIEW not in labels else Plan()
    why = note.strip() or f"follow-up of the meeting's decision of {decision.created_at:%Y-%m-%d}"
    flagged = request_decision(issue=issue, user=by, plan=plan, labels_seen=labels)
    TriageDecision.objects.filter(pk=flagged.pk).update(note=why)
    flagged.note = why
    return flagged
