"""The engine behind suggestions.refresh: rows the UI reads, recomputed with bisection verdicts."""

from __future__ import annotations

import json

from django.db import connection
from django.test.utils import CaptureQueriesContext

from rubric_app.models import BisectionRun, Comment, Issue, Suggestion
from rubric_app.triage import suggestions
from tests.factories import make_issue

TRACE = "```\ntorch._dynamo.exc.Unsupported: call_function BuiltinVariable(zip) [ListVariable()] {}\n```"


def test_it_stores_suggestions_with_rule_and_verbatim_evidence(catalog):
    issue = make_issue(number=4242, title="Graph break on zip in a compiled loop", body=TRACE, labels=("oncall: pt2",))
    Comment.objects.create(issue=issue, github_id=77, author="rev", body="Same with backend='eager' fails too.")
    suggestions.refresh_issue(issue)
    rows = {(s.kind, s.label): s for s in Suggestion.objects.filter(issue=issue)}
    dynamo = rows[("add", "module: dynamo")]
    assert dynamo.rule_id in ("R1.2", "R2.3") and dynamo.source == "rule"
    sources = {"title": issue.title, "body": issue.body, "comment:0": "Same with backend='eager' fails too."}
    assert dynamo.evidence in sources[dynamo.evidence_source]
    assert ("add", "triaged") in rows and ("add", "high priority") not in rows
    issue.refresh_from_db()
    assert issue.suggested_route == "pt2"
    assert {item["rule_id"] for item in issue.checklist} >= {"G3", "G4", "G6", "R6.1"}
    json.dumps(issue.checklist)  # stored as JSON


def test_it_shows_what_the_synced_catalog_lacks(db):
    # Only oncall: pt2 is synced: the rest is shown as "not in the catalog" (R7.4), never suggested.
    issue = make_issue(number=4245, title="Graph break on zip", body=TRACE, labels=("oncall: pt2",))
    suggestions.refresh_issue(issue)
    assert not Suggestion.objects.filter(issue=issue, kind="add", label="module: dynamo").exists()
    avoided = Suggestion.objects.get(issue=issue, kind="avoid", label="module: dynamo")
    assert avoided.rule_id == "R7.4" and "not in the catalog" in avoided.reason
    issue.refresh_from_db()
    g4 = next(item for item in issue.checklist if item["rule_id"] == "G4")
    assert g4["state"] == "needs_human"  # G4 cannot be met from this catalog: a human must pick


def test_it_recomputes_with_a_finished_bisection(catalog):
    issue = make_issue(number=4243, title="[dynamo] compiled function gives a different value", body="No error.")
    suggestions.refresh_issue(issue)
    assert Suggestion.objects.filter(issue=issue, label="module: dynamo", kind="add").exists()
    run = BisectionRun.objects.create(
        issue=issue,
        repro_code="print(1)",
        status=BisectionRun.Status.DONE,
        verdict_labels=[
            {"label": "module: inductor", "rule_id": "R2.2", "evidence": "aot_eager passes, inductor differs"}
        ],
    )
    suggestions.refresh_issue(issue)
    inductor = Suggestion.objects.get(issue=issue, label="module: inductor", kind="add")
    assert (inductor.source, inductor.evidence_source, inductor.rule_id) == ("bisection", f"bisection:{run.pk}", "R2.2")
    assert not Suggestion.objects.filter(issue=issue, label="module: dynamo", kind="add").exists()


def test_it_skips_an_issue_another_oncall_owns(catalog):
    issue = make_issue(number=4244, title="Graph break on zip", body=TRACE, labels=("oncall: distributed",))
    suggestions.refresh_issue(issue)
    issue.refresh_from_db()
    assert issue.suggested_route == "skip"
    assert not Suggestion.objects.filter(issue=issue, kind="add").exists()


def test_it_refreshes_many_issues_in_a_constant_number_of_queries(catalog):
    # The sync refreshes every changed issue at once: thousands after a cold start.
    def queries_for(numbers) -> int:
        for n in numbers:
            issue = make_issue(number=n, title="Graph break on zip", body=TRACE)
            Comment.objects.create(issue=issue, github_id=n, body="fails with backend='eager' too")
        with CaptureQueriesContext(connection) as captured:
            refreshed = suggestions.refresh(Issue.objects.filter(number__in=numbers))
        assert refreshed == len(numbers)
        return len(captured)

    # The issues share one failure: the group's other open issues are refreshed too, in one batch more (issue #36).
    queries_for(range(4990, 4991))
    assert queries_for(range(5000, 5003)) == queries_for(range(6000, 6030))
    assert Suggestion.objects.filter(issue__number=6029, kind="add", label="module: dynamo").count() == 1


def test_it_uses_each_issues_own_finished_bisection_when_refreshing_many(catalog):
    bisected, other = (
        make_issue(number=4250, title="Wrong values", body="No error."),
        make_issue(number=4251, title="Wrong values", body="No error."),
    )
    BisectionRun.objects.create(
        issue=bisected,
        repro_code="print(1)",
        status=BisectionRun.Status.DONE,
        verdict_labels=[{"label": "module: inductor", "rule_id": "R2.2", "evidence": "aot_eager passes"}],
    )
    BisectionRun.objects.create(
        issue=other,
        repro_code="print(1)",
        status=BisectionRun.Status.FAILED,
        verdict_labels=[{"label": "module: dynamo", "rule_id": "R2.3", "evidence": "eager backend fails"}],
    )
    suggestions.refresh(Issue.objects.filter(pk__in=[bisected.pk, other.pk]))
    assert Suggestion.objects.get(issue=bisected, label="module: inductor", kind="add").source == "bisection"
    assert not Suggestion.objects.filter(issue=other, source="bisection").exists()  # only finished runs count
