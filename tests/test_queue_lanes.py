"""The queue's lanes are one table (models.LANES): the queryset of each lane and an issue's own lanes agree."""

from itertools import combinations

import pytest

from rubric_app.lanes import LANES
from rubric_app.models import Issue, TriageDecision
from rubric_app.web.forms import QueueFilterForm
from tests.factories import make_issue

LABELS = ("oncall: pt2", "oncall: cpu inductor", "triaged", "triage review", "needs reproduction", "bot-triaged")


@pytest.mark.django_db
def test_it_lists_in_each_lane_exactly_the_issues_whose_own_lanes_name_it(triager):
    combos = [c for n in range(0, 4) for c in combinations(LABELS, n)]
    for number, labels in enumerate(combos, start=1):
        make_issue(number, labels=labels)
    make_issue(900, labels=("oncall: pt2",), state=Issue.State.CLOSED)
    make_issue(901, labels=("oncall: pt2",), in_queue=False)
    decided = make_issue(902, labels=("bot-triaged",))
    TriageDecision.objects.create(issue=decided, user=triager, status=TriageDecision.Status.APPLIED)
    make_issue(903, labels=("oncall: pt2", "triaged"), build_finding="may_be_fixed")
    asked = make_issue(904, labels=("oncall: pt2", "triaged"), build_finding="may_be_fixed")
    TriageDecision.objects.create(
        issue=asked, user=triager, status=TriageDecision.Status.APPLIED, reply="confirm_fixed"
    )
    issues = list(Issue.objects.prefetch_related("labels"))
    for lane in LANES:
        if lane.per_user:
            continue  # "mine": narrowed per user in the view, by assignment
        listed = set(Issue.objects.for_queue(lane.code).values_list("number", flat=True))
        own = {i.number for i in issues if lane.code in i.queue_lanes()}
        if lane.undecided:
            own.discard(902)  # a decision covers it: the lane's one rule that labels cannot show
        if lane.unanswered_by:
            own.discard(904)  # the reporter was asked already
        assert listed == own, lane.code
    assert 900 not in listed and 901 not in listed
    assert set(Issue.objects.for_queue("fixed").values_list("number", flat=True)) == {903}


def test_it_offers_every_lane_in_the_filter_form():
    assert [code for code, _ in QueueFilterForm.LANES] == [lane.code for lane in LANES]
