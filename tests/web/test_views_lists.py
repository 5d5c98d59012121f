"""The bisection runs list and the audit log: permissions, content, htmx partials, constant queries."""

from __future__ import annotations

import pytest
from django.urls import reverse

from rubric_app.models import BisectionRun, GitHubWrite, TriageDecision
from tests.factories import make_issue


@pytest.mark.parametrize("name", ["bisections", "audit", "meeting"])
def test_it_forbids_outsiders(client, outsider, name):
    client.force_login(outsider)
    assert client.get(reverse(f"rubric_app:{name}")).status_code == 403


def test_it_lists_recent_runs_with_status_and_verdict(client, viewer, django_assert_num_queries):
    issue = make_issue(1, title="wrong numbers on inductor")
    BisectionRun.objects.create(
        issue=issue,
        repro_code="x",
        status="done",
        verdict_summary="inductor only (R2.2)",
        verdict_labels=[{"label": "module: inductor", "rule_id": "R2.2", "evidence": ""}],
    )
    BisectionRun.objects.create(issue=issue, repro_code="x", status="running", current_mode="aot_eager")
    client.force_login(viewer)
    # session, user, permissions (2), count, runs with issue and requester
    with django_assert_num_queries(6):
        html = client.get(reverse("rubric_app:bisections")).content.decode()
    assert "inductor only (R2.2)" in html and "<code>aot_eager</code>" in html and "wrong numbers on inductor" in html
    for n in range(2, 30):
        BisectionRun.objects.create(issue=make_issue(n), repro_code="x")
    with django_assert_num_queries(6):
        html = client.get(reverse("rubric_app:bisections"), headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in html and html.lstrip().startswith('<div id="runs-table">')


def test_it_shows_who_changed_what_and_githubs_answer(client, viewer, triager, django_assert_num_queries):
    issue = make_issue(1)
    decision = TriageDecision.objects.create(
        issue=issue,
        user=triager,
        labels_added=["module: dynamo", "triaged"],
        status="failed",
        result_message="add label 'triaged' failed: 403",
    )
    GitHubWrite.objects.create(decision=decision, action="add_label", target="module: dynamo", status_code=200, ok=True)
    GitHubWrite.objects.create(
        decision=decision, action="add_label", target="triaged", status_code=403, response="Forbidden"
    )
    client.force_login(viewer)
    # session, user, permissions (2), count, decisions with issue and user, writes
    with django_assert_num_queries(7):
        html = client.get(reverse("rubric_app:audit")).content.decode()
    assert (
        "tina-triager" in html
        and "+module: dynamo" in html
        and "add_label triaged: 403" in html
        and "Forbidden" in html
    )
    for n in range(2, 30):
        TriageDecision.objects.create(issue=make_issue(n), user=triager, status="applied")
    with django_assert_num_queries(7):
        client.get(reverse("rubric_app:audit"), headers={"HX-Request": "true"})
