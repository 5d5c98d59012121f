"""Issue #36 on the pages, with the demo's real issue texts: `a` flags the meeting where R11 binds and never marks such
an issue `triaged`; the issues sharing a failure get their components from the same evidence and the group page
shows where they disagree; the bisection panel says what the reporter says and what the run saw."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.urls import reverse

from rubric_app.models import Comment, Issue, Suggestion
from rubric_app.triage import suggestions
from tests.factories import PASSED, make_finished_run, make_issue

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}
DEMO = {
    item["number"]: item
    for item in json.loads(
        (Path(__file__).resolve().parents[2] / "rubric_app" / "demo" / "demo_issues.json").read_text()
    )["issues"]
}


def demo_issue(number: int, refresh: bool = True) -> Issue:
    """The demo's issue #number in the mirror (its text, author, labels and comments), suggestions refreshed."""
    item = DEMO[number]
    issue = make_issue(number, title=item["title"], body=item["body"], labels=item["labels"], author=item["author"])
    for c in item.get("comments", []):
        Comment.objects.create(issue=issue, github_id=c["id"], author=c["author"], body=c["body"])
    if refresh:
        suggestions.refresh_issue(issue)
    return Issue.objects.get(pk=issue.pk)


def preselected(issue: Issue) -> set[str]:
    return set(Suggestion.objects.filter(issue=issue, kind="add", preselected=True).values_list("label", flat=True))


@pytest.mark.parametrize("number", [170068, 170059, 170137])
def test_it_applies_triage_review_and_never_triaged_with_a_where_r11_binds(client, triager, catalog, number):
    # #170068 and #170059: silently wrong results; #170137: a segmentation fault (R11).
    demo_issue(number)
    client.force_login(triager)
    url = reverse("rubric_app:issue_preview", args=[number])
    html = client.post(url, {"accept": "1", "in_queue": "1"}, headers=HTMX).content.decode()
    assert "+ triage review" in html and "+ triaged" not in html
    page = client.get(reverse("rubric_app:issue", args=[number])).content.decode()
    assert re.search(r'<input type="checkbox" name="review"[^>]*checked', page)


def test_it_gives_issues_sharing_a_failure_the_same_evidence_and_shows_where_they_disagree(
    client, viewer, catalog, django_assert_num_queries
):
    # #170140 alone reads as Inductor; #170014 shares its failure and its thread says dynamic=False passes (R1.1).
    alone = demo_issue(170140)
    assert "module: inductor" in preselected(alone)
    sibling = demo_issue(170014)  # refreshing it refreshes the group's other open issue too
    assert sibling.signature and sibling.signature == Issue.objects.get(number=170140).signature
    shared = Suggestion.objects.get(issue__number=170140, kind="add", label="module: dynamic shapes")
    assert shared.preselected and shared.evidence_source == "issue:170014" and "dynamic=False" in shared.evidence
    assert "module: inductor" not in preselected(alone)

    client.force_login(viewer)
    url = reverse("rubric_app:signature_group", args=[sibling.signature])
    html = client.get(url).content.decode()
    assert "data-disagree" not in html  # the same evidence, the same component
    assert re.search(r'name="labels" value="module: dynamic shapes"\s+checked', html)  # for all of them

    # Now #170140's own thread settles Inductor: each keeps its own, and the group page shows the two side by side.
    Comment.objects.create(
        issue=alone,
        github_id=77,
        author="tmiller-inductor",
        body="eager and `aot_eager` both run fine; inductor fails.",
    )
    suggestions.refresh_issue(Issue.objects.get(pk=alone.pk))
    # session, user, permissions (2), members, their labels, suggestions, decisions, others (none), catalog, the
    # triage skill's files (the labels' descriptions): no query of its own for the disagreement (the prefetched
    # suggestions)
    with django_assert_num_queries(11):
        html = client.get(url).content.decode()
    assert "data-disagree" in html and "Where they disagree" in html
    table = html[html.index("data-disagree") : html.index("</section>")]
    assert 'data-member-component="170014"' in table and 'data-member-component="170140"' in table
    assert "module: dynamic shapes" in table and "module: inductor" in table
    checklist = Issue.objects.get(number=170140).checklist
    assert any(item["text"].startswith("#170014 has the same failure signature") for item in checklist)


def test_it_flags_the_group_for_the_meeting_where_r11_binds_on_one(client, triager, catalog):
    # The same lowering failure reported twice; one report says the compiled output is silently wrong.
    first = demo_issue(170014, refresh=False)
    second = demo_issue(170140, refresh=False)
    second.title = "torch.compile silently returns wrong values, then fails on the second batch in Inductor lowering"
    second.save(update_fields=["title"])
    suggestions.refresh(Issue.objects.filter(pk__in=[first.pk, second.pk]))
    assert "triage review" in preselected(second)
    client.force_login(triager)
    html = client.get(reverse("rubric_app:signature_group", args=[Issue.objects.get(pk=first.pk).signature]))
    assert re.search(r'<input type="checkbox" name="review"[^>]*checked', html.content.decode())


def test_it_says_on_the_bisection_panel_what_the_reporter_says_and_what_the_run_saw(client, viewer, catalog):
    issue = make_issue(
        4801,
        title="[aot_eager] retain_grad is ignored under torch.compile",
        body="The gradient is missing with `backend='aot_eager'`: fails on aot_eager, passes in eager.",
        author="reporter",
    )
    run = make_finished_run(issue, results=PASSED)
    client.force_login(viewer)
    html = client.get(reverse("rubric_app:issue", args=[4801])).content.decode()
    panel = html[html.index('id="bisection-current"') :]
    assert "data-run-vs-thread" in panel
    assert "The reporter says aot_eager fails" in panel and "this run saw aot_eager pass" in panel
    polled = client.get(reverse("rubric_app:bisection", args=[run.pk]), headers=HTMX).content.decode()
    assert "this run saw aot_eager pass" in polled
