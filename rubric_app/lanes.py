"""The queue page's lanes, one table: what each lane lists. The queue's rows (IssueQuerySet.for_queue), an issue's
own lanes (Issue.queue_lanes), the queue's filter form and the sharing of the untriaged lane all read LANES.

Beside models.py, which imports it: the decisions a lane reads are looked up when a lane filters, not at import.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.apps import apps
from django.db import models
from django.db.models import Exists, OuterRef

from rubric_app.vocabulary import (
    BOT_TRIAGE_BLOCKED,
    BOT_TRIAGED,
    CONFIRM_FIXED_REPLY,
    CPU_INDUCTOR_ONCALL,
    LANE_ALL,
    LANE_BLOCKED,
    LANE_BOT,
    LANE_CPU,
    LANE_FIXED,
    LANE_MINE,
    LANE_PT2,
    LANE_REPRO,
    LANE_REVIEW,
    MAY_BE_FIXED,
    NEEDS_REPRODUCTION,
    PT2_ONCALL,
    TRIAGE_REVIEW,
    TRIAGED,
)


def _decisions() -> models.QuerySet:
    return apps.get_model("rubric_app", "TriageDecision").objects.all()


def _issue_labels() -> models.QuerySet:
    return apps.get_model("rubric_app", "Issue").labels.through.objects.all()


def _covering() -> frozenset:
    return apps.get_model("rubric_app", "TriageDecision").COVERING


@dataclass(frozen=True)
class Lane:
    """A lane of the queue page: the open queue issues that carry every label of `labels` and none of
    `without`. The one definition the queue's rows (IssueQuerySet.for_queue), an issue's own lanes
    (Issue.queue_lanes), the queue's filter form and the sharing of the untriaged lane all read."""

    code: str
    title: str
    labels: tuple[str, ...] = ()
    without: tuple[str, ...] = ()
    # Narrowed further per user in the view (the issues assigned to them), not by labels.
    per_user: bool = False
    # Only the issues no human decision covers yet: none pending, applying or applied (a refused, failed or
    # conflicting one leaves the issue here). The bot's lane: reviewing it is the task.
    undecided: bool = False
    # Only the issues whose runs across torch builds say this (Issue.build_finding): "may_be_fixed".
    finding: str = ""
    # ...and that no decision (pending, applying or applied) has answered with this reply yet: asked, it is done.
    unanswered_by: str = ""

    def filter(self, qs: models.QuerySet) -> models.QuerySet:
        if self.finding:
            qs = qs.filter(build_finding=self.finding)
        for name in self.labels:
            # EXISTS, not a join: a join lets SQLite start from the label's rows, every history issue's among them.
            qs = qs.filter(Exists(_issue_labels().filter(issue=OuterRef("pk"), label__name=name)))
        if self.without:
            qs = qs.exclude(labels__name__in=self.without)
        if self.undecided:
            covering = _decisions().filter(issue=OuterRef("pk"), status__in=_covering())
            qs = qs.exclude(Exists(covering))
        if self.unanswered_by:
            replied = _decisions().filter(issue=OuterRef("pk"), status__in=_covering(), reply=self.unanswered_by)
            qs = qs.exclude(Exists(replied))
        return qs

    def lists(self, names: set[str], finding: str = "") -> bool:
        """Whether an open queue issue carrying `names`, with build finding `finding`, is in this lane (a per-user
        lane never is; the decisions of an undecided or unanswered_by lane are not read here)."""
        return (
            not self.per_user
            and (not self.finding or finding == self.finding)
            and all(n in names for n in self.labels)
            and not any(n in names for n in self.without)
        )


# The queue's lanes, in the order the page lists them: adding a lane is adding a line here.
LANES = (
    Lane(LANE_PT2, PT2_ONCALL, labels=(PT2_ONCALL,), without=(TRIAGED,)),
    Lane(LANE_CPU, CPU_INDUCTOR_ONCALL, labels=(CPU_INDUCTOR_ONCALL,)),
    Lane(LANE_REVIEW, TRIAGE_REVIEW, labels=(TRIAGE_REVIEW,)),
    Lane(LANE_REPRO, NEEDS_REPRODUCTION, labels=(NEEDS_REPRODUCTION,)),
    Lane(LANE_BOT, "bot-triaged, not reviewed", labels=(BOT_TRIAGED,), undecided=True),
    # G13: the bot's run was stopped before it could finish; a human picks it up.
    Lane(LANE_BLOCKED, BOT_TRIAGE_BLOCKED, labels=(BOT_TRIAGE_BLOCKED,), without=(TRIAGED,), undecided=True),
    # Its repro reproduced on an older build (or the reporter's) and passes on a newer one, only on evidence
    # (bisection/evidence.py: same device and hardware, no other repro still failing): ask them to confirm.
    Lane(LANE_FIXED, "may be fixed", finding=MAY_BE_FIXED, unanswered_by=CONFIRM_FIXED_REPLY),
    Lane(LANE_ALL, "all"),
    Lane(LANE_MINE, "mine", per_user=True),
)
LANE_BY_CODE = {lane.code: lane for lane in LANES}
