from datetime import timedelta

import pytest
from django.utils import timezone

from rubric_app.models import BisectionRun, Issue, Label, Suggestion, TriageDecision
from rubric_app.triage import suggestions
from rubric_app.web.templatetags.triage import readable_text_color
from tests.factories import make_issue, make_label

pytestmark = pytest.mark.django_db


def test_it_lists_the_pt2_lane_newest_first_without_triaged_or_closed():
    now = timezone.now()
    old = make_issue(1, updated_at=now - timedelta(days=2))
    new = make_issue(2, updated_at=now)
    make_issue(3, labels=("oncall: pt2", "triaged"))
    make_issue(4, state=Issue.State.CLOSED)
    make_issue(5, in_queue=False)
    make_issue(6, labels=("oncall: cpu inductor",))

    assert list(Issue.objects.for_queue("pt2")) == [new, old]
    assert [i.number for i in Issue.objects.for_queue("cpu")] == [6]
    assert {i.number for i in Issue.objects.for_queue("all")} == {1, 2, 3, 6}


def test_it_prefetches_what_a_queue_row_shows(django_assert_num_queries):
    for number in range(10):
        make_issue(100 + number)
    # 1 issues, 2 labels (prefetch), 3 add-suggestions (prefetch)
    with django_assert_num_queries(3):
        rows = list(Issue.objects.for_queue("pt2"))
        for row in rows:
            row.label_names()
            list(row.add_suggestions)


def test_it_stores_suggestions_with_rule_ids():
    issue = make_issue(body="a bug")
    assessment = suggestions.refresh_issue(issue)

    assert assessment.labels() == [s.label for s in issue.suggestions.filter(kind=Suggestion.Kind.ADD)]
    assert all(s.rule_id for s in issue.suggestions.all())
    assert issue.suggestions_updated_at is not None


def test_it_picks_readable_chip_text():
    assert readable_text_color("ffffff") == "000000"
    assert readable_text_color("000000") == "ffffff"
    assert readable_text_color("zzzzzz") == "000000"


def test_it_knows_when_runs_and_decisions_are_finished(issue):
    run = BisectionRun.objects.create(issue=issue, repro_code="print(1)")
    decision = TriageDecision.objects.create(issue=issue, labels_added=["module: dynamo"])
    assert not run.is_finished and not decision.is_finished
    run.status = BisectionRun.Status.FAILED
    decision.status = TriageDecision.Status.CONFLICT
    assert run.is_finished and decision.is_finished


def test_it_keeps_labels_outside_the_triage_catalog_out_of_it():
    make_label("module: dynamo")
    make_label("ciflow/trunk", allowed=False)
    assert Label.objects.triage_catalog() == frozenset({"module: dynamo"})
