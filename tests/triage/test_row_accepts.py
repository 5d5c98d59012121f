"""Issue 53's domain parts: G2's transfer read from its evidence sentence (#170116), what a queue row offers in each
lane (accepting.row_accepts), and the meeting's component never a category label (#170092)."""

from __future__ import annotations

import pytest

from rubric_app.models import Issue
from rubric_app.rubric.engine.weighing import r11_question
from rubric_app.rubric.reading.facts import Finding
from rubric_app.triage import accepting
from rubric_app.vocabulary import (
    HIGH_PRIORITY,
    LANE_ALL,
    LANE_BOT,
    LANE_FIXED,
    LANE_REVIEW,
    Kind,
    Route,
    is_component,
)
from rubric_app.web.labels import near_labels, picked_label
from tests.factories import make_issue, make_suggestion
from tests.helpers import demo_synced

pytestmark = pytest.mark.django_db


def test_it_preselects_g2s_transfer_named_in_a_sentence(fake_github, tmp_path):
    demo_synced(fake_github, tmp_path, 170116)
    issue = Issue.objects.get(number=170116)
    assert issue.suggested_route == Route.TRANSFER
    assert accepting.suggested_transfer(issue) == "pytorch/vision"


def test_it_reads_the_repository_a_g2_sentence_names():
    assert accepting.transfer_named("transfer this to the vision repo") == "pytorch/vision"
    assert accepting.transfer_named("the fix belongs in pytorch/audio") == "pytorch/audio"
    assert accepting.transfer_named("torchao") == "pytorch/ao"  # a bare name, as before
    assert accepting.transfer_named("this belongs in the PyTorch forums") == ""  # nothing G2 transfers to


def _row(lane, user, **fields):
    issue = make_issue(fields.pop("number", 4401), **fields)
    issue = Issue.objects.for_queue(lane).with_decision_in_flight().select_related("assignment__user").get(pk=issue.pk)
    return accepting.row_accepts(issue, lane, user, can_apply=user.has_perm("rubric_app.apply_labels"))


def test_it_decides_what_a_queue_row_offers_in_each_lane(triager, viewer):
    issue = make_issue(4402, labels=("oncall: pt2", "bot-triaged"))
    make_suggestion(issue, "module: dynamo")
    for_queue = Issue.objects.for_queue(LANE_ALL).with_decision_in_flight().select_related("assignment__user")
    row = for_queue.get(pk=issue.pk)
    assert accepting.row_accepts(row, LANE_ALL, triager, can_apply=True) == accepting.RowAccepts(
        accept=accepting.ROW_PREVIEW, take=True, duplicate=True, taken_by="", waiting=""
    )
    assert accepting.row_accepts(row, LANE_BOT, triager, can_apply=True).accept == accepting.ROW_BOT
    assert accepting.row_accepts(row, LANE_FIXED, triager, can_apply=True).accept == accepting.ROW_CONFIRM_FIXED
    read_only = accepting.row_accepts(row, LANE_ALL, viewer, can_apply=False)
    assert (read_only.accept, read_only.take, read_only.duplicate) == ("", False, False)
    # Nothing suggested and no route concluded: nothing for `a`; flagged for the meeting: the row waits (R11).
    flagged = _row(LANE_ALL, triager, number=4403, labels=("oncall: pt2", "triage review"))
    assert (flagged.accept, flagged.waiting, flagged.waiting_note) == ("", "meeting", "waiting for the meeting (R11)")
    assert _row(LANE_REVIEW, triager, number=4404, labels=("oncall: pt2", "triage review")).waiting == ""
    # G2 concludes a transfer with no label to add: `a` previews it all the same.
    transfer = _row(
        LANE_ALL,
        triager,
        number=4405,
        suggested_route=Route.TRANSFER,
        checklist=[{"rule_id": "G2", "state": "satisfied", "evidence": "transfer this to the vision repo"}],
    )
    assert transfer.accept == accepting.ROW_PREVIEW


def test_it_keeps_the_suggested_component_beside_a_category_label_at_the_meeting():
    issue = make_issue(4410, labels=("oncall: pt2", "module: crash", "triage review"))
    make_suggestion(issue, "module: inductor", "R2.2")
    make_suggestion(issue, "module: crash", "G11", confidence=0.99)
    assert issue.suggested_component.label == "module: inductor"  # a category is never the component
    assert issue.component_labels == [] and not is_component("module: correctness (silent)")
    plan = accepting.meeting_plan(issue, HIGH_PRIORITY, "module: inductor")
    assert sorted(plan.add) == ["high priority", "module: inductor", "triaged"] and plan.remove == ["triage review"]
    assert "module: crash" not in accepting.meeting_plan(issue, HIGH_PRIORITY, "module: crash").add


def test_it_picks_a_label_by_a_word_inside_its_name_and_offers_did_you_mean():
    catalog = frozenset(
        {"module: correctness (silent)", "module: crash", "module: dynamo", "module: numerical-stability"}
    )
    assert picked_label("correctness", catalog) == "module: correctness (silent)"
    assert picked_label("Crash", catalog) == "module: crash"
    assert picked_label("module", catalog) == ""  # every name holds it: none picked
    assert near_labels("corectness", catalog) == ["module: correctness (silent)"]
    assert near_labels("numerical stabilty", catalog) == ["module: numerical-stability"]
    assert near_labels("helion", catalog) == []  # only catalog labels, none near


def test_it_asks_about_a_slowdown_without_calling_it_a_regression():
    slowdown = Finding("R11", Kind.FLAG, "triage review", 0.6, "2x slower", "body", "a performance regression: x")
    regressed = Finding(
        "R11", Kind.FLAG, "triage review", 0.6, "20% perf regression", "body", "a performance regression"
    )
    assert not r11_question(slowdown).startswith("A performance regression?") and "slowdown" in r11_question(slowdown)
    assert r11_question(regressed).startswith("A performance regression?")
