"""`a` applies exactly what the page shows pre-selected (issue 43), through triage/accepting.py: on the issue page and
from the queue row (the same preview), on a failure-signature group, "Bot was right", the bot correction and the
meeting's buttons; and what a decision records of the pre-selection for rubric health. Real issue texts, the rubric
engine's own suggestions, the apply form's fields as the pages post them.
"""

from __future__ import annotations

import html
import json
import re

import pytest
from django.urls import reverse

from rubric_app.github import skill_files
from rubric_app.models import Issue, Label, TriageDecision
from rubric_app.rubric.offline.evaluation import issue_from_record
from rubric_app.rubric.rules.skill_additions import reproduction_reply
from rubric_app.triage import accepting, metrics, suggestions
from rubric_app.web.decision_forms import GroupDecisionForm
from rubric_app.web.labels import handoff_oncalls
from tests.factories import make_issue
from tests.rubric.test_binding import _demo, _pool

# The shipped catalog as Label rows for every test (tests/conftest.py catalog).
pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("catalog")]
HTMX = {"HTTP_HX_REQUEST": "true"}


def demo_issue(number: int, labels=("oncall: pt2",)) -> Issue:
    """A demo issue as `make run` loads it (its text and comments), with the rubric's suggestions stored."""
    data = _demo()[number]
    issue = make_issue(number, title=data["title"], body=data["body"], labels=labels, author=data.get("author", ""))
    for i, comment in enumerate(data.get("comments", [])):
        issue.comments.create(
            github_id=number * 100 + i,
            author=comment.get("author", ""),
            author_association=comment.get("author_association", "NONE"),
            body=comment["body"],
            created_at=issue.created_at,
            updated_at=issue.created_at,
        )
    suggestions.refresh_issue(issue)
    issue.refresh_from_db()
    return issue


def pool_issue(number: int, labels=("oncall: pt2",)) -> Issue:
    """A real issue of the training pool with the rubric's suggestions stored."""
    text = issue_from_record(_pool()[number], use_labels=False)
    issue = make_issue(number, title=text.title, body=text.body, labels=labels)
    suggestions.refresh_issue(issue)
    issue.refresh_from_db()
    return issue


def preview(client, issue: Issue, data=None, *, queue: bool = False) -> dict:
    """What the preview fragment says (the `a` key's when data is None)."""
    data = data or {"accept": "1", **({"in_queue": "1"} if queue else {})}
    text = html.unescape(
        client.post(reverse("rubric_app:issue_preview", args=[issue.number]), data, **HTMX).content.decode()
    )
    return {
        "add": set(re.findall(r'<li class="add">\+ ([^<]+)</li>', text)),
        "remove": set(re.findall(r'<li class="remove">− ([^<]+)</li>', text)),
        "reply": re.findall(r'data-reply="([^"]+)"', text),
        "decide": re.findall(r"data-decide>Not triaged yet: ([^<]+)</p>", text),
        "route": re.findall(r"data-route-evidence>Route: ([^<]+)</p>", text),
        "errors": re.findall(r"data-form-errors>(.*?)</p>", text, re.S),
    }


def page_form(issue: Issue, **changes) -> dict:
    """The issue page's form as `a` fills it, as the browser would post it, with `changes`."""
    from rubric_app.web.views.issue import _form_data, _triage_form

    data = {k: v for k, v in _form_data(_triage_form(issue), {}).items() if v not in ("", None, [])}
    return {**data, **changes}


def test_it_previews_neither_triaged_nor_the_flag_where_r11_needs_a_human_and_says_what_to_decide(client, triager):
    issue = demo_issue(170086)  # compile time 48s -> 3m10s (2.11 -> 2.12): R11's performance clause, a judgement
    client.force_login(triager)

    for queue in (False, True):
        shown = preview(client, issue, queue=queue)
        assert shown["add"] == {"module: inductor"} and "performance regression" in shown["decide"][0]
    decided = preview(client, issue, {k: v for k, v in page_form(issue).items() if k != "hold"})
    assert decided["add"] == {"module: inductor", "triaged"} and not decided["decide"]  # the triager decided


def test_it_previews_triaged_where_g6_holds(client, triager):
    issue = pool_issue(154652)  # a quadratic compile time in Inductor's fusion: a component, nothing to decide
    client.force_login(triager)

    assert preview(client, issue) == {
        "add": {"module: inductor", "triaged"},
        "remove": set(),
        "reply": [],
        "decide": [],
        "route": [],
        "errors": [],
    }


def test_it_previews_the_skills_reply_as_the_route_where_g9_concludes(client, triager):
    issue = demo_issue(170301)  # the repro loads a fine-tuned checkpoint to download (G9.1), NaN logits (R11)
    client.force_login(triager)

    for queue in (False, True):
        shown = preview(client, issue, queue=queue)
        assert shown["reply"] == [reproduction_reply(skill_files.replies())]  # the skill in use's (the walk: its own)
        assert {"needs reproduction", "triage review"} <= shown["add"] and "triaged" not in shown["add"]
        assert shown["route"][0].startswith("G9.1")


def test_it_waits_for_a_reproduction_the_issue_asks_for_and_takes_the_label_off_once_triaged(client, triager):
    issue = demo_issue(170122, labels=("oncall: pt2", "needs reproduction"))
    client.force_login(triager)

    held = preview(client, issue)
    assert "triaged" not in held["add"] and "self-contained reproduction" in held["decide"][0]
    decided = preview(client, issue, {k: v for k, v in page_form(issue).items() if k != "hold"})
    assert "triaged" in decided["add"] and decided["remove"] == {"needs reproduction"}  # G9: never both


def test_it_previews_the_hand_off_the_rules_conclude_never_a_refusal(client, triager):
    issue = pool_issue(171964)  # torch.export.export on an unflattened module: export-only (R6.3)
    client.force_login(triager)

    for queue in (False, True):
        shown = preview(client, issue, queue=queue)
        assert not shown["errors"] and shown["add"] == {"oncall: export"} and shown["remove"] == {"oncall: pt2"}
        assert shown["route"][0].startswith("R6.3") and "torch.export.export" in shown["route"][0]


def test_it_keeps_the_lane_where_only_the_learned_labeler_routes(client, triager):
    issue = demo_issue(170137)  # a +cpu build: R2.4 asks whether it passes on CUDA first
    client.force_login(triager)

    shown = preview(client, issue)
    assert "oncall: cpu inductor" not in shown["add"] and not shown["route"]


def test_it_holds_the_group_where_one_issue_waits_for_a_human(triager):
    waits, ready = demo_issue(170086), pool_issue(154652)
    members = list(Issue.objects.filter(pk__in=[waits.pk, ready.pk]).prefetch_related("labels", "suggestions"))
    form = GroupDecisionForm(members=members, allowed=Label.objects.triage_catalog())

    assert form.initial["hold"] is True and form.initial["labels"] == ["module: inductor"]
    alone = GroupDecisionForm(members=[m for m in members if m.pk == ready.pk], allowed=Label.objects.triage_catalog())
    assert alone.initial["hold"] is False


def test_it_refuses_bot_was_right_where_the_bot_triaged_what_the_rubric_flags(client, triager):
    flagged = demo_issue(170201, labels=("oncall: pt2", "bot-triaged", "module: inductor", "triaged"))
    fine = pool_issue(154652, labels=("oncall: pt2", "bot-triaged", "module: inductor", "triaged"))
    client.force_login(triager)

    for issue in (flagged, fine):
        seen = {"labels_seen": issue.label_names()}
        client.post(reverse("rubric_app:bot_confirm", args=[issue.number]), seen)
    refused = TriageDecision.objects.get(issue=flagged)
    assert refused.status == "refused" and "R11" in refused.result_message
    assert TriageDecision.objects.get(issue=fine).status == "applied"
    correction = accepting.bot_correction(flagged, Label.objects.triage_catalog())
    assert "triaged" not in correction["keep"] and "triage review" in correction["add"]
    assert "triaged" in accepting.bot_correction(fine, Label.objects.triage_catalog())["keep"]


def test_it_never_triages_from_the_meeting_beside_needs_reproduction():
    waiting = make_issue(1, labels=("oncall: pt2", "triage review", "needs reproduction", "module: inductor"))
    ready = make_issue(2, labels=("oncall: pt2", "triage review", "module: inductor"))

    assert accepting.meeting_plan(waiting, "triaged").add == []
    assert accepting.meeting_plan(waiting, "high priority").add == ["high priority"]
    assert accepting.meeting_plan(ready, "triaged").add == ["triaged"]


def test_it_hands_off_only_to_the_triage_catalog_in_use():
    Label.objects.filter(name="oncall: package/deploy").update(allowed_for_triage=False)  # the skill removed it

    oncalls = handoff_oncalls(Label.objects.triage_catalog())
    assert "oncall: export" in oncalls and "oncall: package/deploy" not in oncalls


def test_it_records_a_label_taken_off_the_preselection_as_the_rules_miss(client, triager):
    issue = demo_issue(170302)  # a cudagraph_trees segfault: inductor, cuda graphs, crash, the flag, pre-selected
    client.force_login(triager)
    fields = page_form(issue, labels=["module: inductor", "module: cuda graphs"])  # module: crash taken off

    client.post(reverse("rubric_app:issue_apply", args=[issue.number]), fields)
    decision = TriageDecision.objects.get(issue=issue)
    shown = {s["label"]: s["preselected"] for s in decision.suggestions_shown}
    assert shown["module: crash"] is True and "module: crash" not in decision.labels_added
    TriageDecision.objects.filter(pk=decision.pk).update(status="applied")  # as the github worker leaves it
    rules, _ = metrics.rubric_health(metrics.decision_outcomes())
    crash = next(r for r in rules if r.rule_id == "G11")
    assert (crash.applied, crash.unticked, crash.skipped, crash.precision) == (0, 1, 0, 0.0)


def test_it_tells_offered_never_ticked_from_unticked():
    issue = make_issue(1)
    shown = [
        {"label": "module: crash", "rule_id": "G11", "preselected": False},  # offered only
        {"label": "module: inductor", "rule_id": "R2.2", "preselected": True},
        {"label": "triaged", "rule_id": "G6", "preselected": True},
    ]
    TriageDecision.objects.create(
        issue=issue,
        labels_seen=["oncall: pt2"],
        labels_added=["module: inductor"],
        suggestions_shown=shown,
        status="applied",
    )

    rules = {r.rule_id: r for r in metrics.rubric_health(metrics.decision_outcomes())[0]}
    assert (rules["G11"].skipped, rules["G11"].unticked, rules["G11"].precision) == (1, 0, None)  # no claim, no miss
    assert (rules["G6"].unticked, rules["G6"].precision) == (1, 0.0)  # held by the triager: G6's miss
    assert json.loads(json.dumps(rules["R2.2"].precision)) == 1.0
