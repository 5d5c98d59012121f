"""The queue page (/): lanes, filters, htmx partial, rubric warnings, and a constant query count."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from rubric_app.models import BisectionRun, Comment, Issue, Label, Suggestion
from rubric_app.triage import suggestions
from tests.factories import make_issue, make_label, make_suggestion

URL = reverse("rubric_app:queue")


def _suggest(issue: Issue, label: str, rule_id: str = "R1.2", confidence: float = 0.9) -> Suggestion:
    return make_suggestion(issue, label, rule_id, confidence=confidence, evidence="graph break", evidence_source="body")


def _bulk_issues(count: int, start: int = 50_000) -> None:
    """count queue issues, each with two labels and two suggestions, made in a handful of queries."""
    pt2, module = make_label("oncall: pt2"), make_label("module: dynamo")
    now = timezone.now()
    issues = Issue.objects.bulk_create(
        Issue(number=start + i, title=f"bulk issue {i}", updated_at=now - timedelta(minutes=i), author="bulk")
        for i in range(count)
    )
    through = Issue.labels.through
    through.objects.bulk_create(
        [through(issue=i, label=pt2) for i in issues] + [through(issue=i, label=module) for i in issues[::2]]
    )
    Suggestion.objects.bulk_create(
        [Suggestion(issue=i, label="module: inductor", rule_id="R2.2", confidence=0.8) for i in issues]
        + [Suggestion(issue=i, label="triage review", rule_id="R11", confidence=0.7) for i in issues]
    )


def test_it_sends_anonymous_users_to_login(client, db):
    response = client.get(URL)
    assert response.status_code == 302
    assert reverse("login") in response["Location"]


def test_it_forbids_users_without_the_view_permission(client, outsider):
    client.force_login(outsider)
    assert client.get(URL).status_code == 403


def test_it_lists_untriaged_pt2_issues_newest_activity_first(client, viewer):
    now = timezone.now()
    make_issue(1, title="older graph break", updated_at=now - timedelta(days=2))
    make_issue(2, title="newer segfault", updated_at=now)
    make_issue(3, title="already triaged", labels=("oncall: pt2", "triaged", "module: dynamo"))
    make_issue(4, title="cpu lane issue", labels=("oncall: cpu inductor",))
    client.force_login(viewer)
    html = client.get(URL).content.decode()
    assert html.index("newer segfault") < html.index("older graph break")
    assert "already triaged" not in html and "cpu lane issue" not in html


@pytest.mark.parametrize(
    ("lane", "shown", "hidden"),
    [
        ("cpu", "cpu lane issue", "plain pt2 issue"),
        ("review", "flagged for review", "plain pt2 issue"),
        ("repro", "needs a repro", "plain pt2 issue"),
    ],
)
def test_it_switches_lanes(client, viewer, lane, shown, hidden):
    make_issue(1, title="plain pt2 issue")
    make_issue(2, title="cpu lane issue", labels=("oncall: cpu inductor",))
    make_issue(3, title="flagged for review", labels=("oncall: pt2", "triage review"))
    make_issue(4, title="needs a repro", labels=("oncall: pt2", "needs reproduction"))
    client.force_login(viewer)
    html = client.get(URL, {"lane": lane}).content.decode()
    assert shown in html and hidden not in html


def test_it_filters_by_suggested_or_applied_module_label(client, viewer):
    applied = make_issue(1, title="has dynamo applied", labels=("oncall: pt2", "module: dynamo"))
    suggested = make_issue(2, title="dynamo only suggested")
    _suggest(suggested, "module: dynamo")
    _suggest(applied, "module: dynamo")  # both ways at once must still list it once
    make_issue(3, title="an inductor issue", labels=("oncall: pt2", "module: inductor"))
    client.force_login(viewer)
    html = client.get(URL, {"module": "module: dynamo"}).content.decode()
    assert html.count("has dynamo applied") == 1 and "dynamo only suggested" in html
    assert "an inductor issue" not in html


def test_it_filters_by_author_and_text(client, viewer):
    make_issue(1, title="recompiles every step", author="alice", body="guard failure on size")
    make_issue(2, title="NaN with inductor", author="bob")
    client.force_login(viewer)
    assert "NaN with inductor" not in client.get(URL, {"author": "@alice"}).content.decode()
    html = client.get(URL, {"q": "guard failure"}).content.decode()
    assert "recompiles every step" in html and "NaN with inductor" not in html
    assert "NaN with inductor" in client.get(URL, {"q": "#2"}).content.decode()


def test_it_returns_only_the_table_to_htmx(client, viewer):
    make_issue(1, title="a swapped row")
    client.force_login(viewer)
    response = client.get(URL, {"lane": "pt2", "q": "swapped"}, headers={"HX-Request": "true"})
    html = response.content.decode()
    assert "a swapped row" in html
    assert "<html" not in html and html.lstrip().startswith('<div id="queue-table" data-lane="pt2"')
    assert 'data-q="swapped"' in html  # what the table shows, for Back (keys.js keeps the filters as it says)


def test_it_answers_a_history_restore_with_the_whole_page(client, viewer):
    """htmx asks for the page again when Back goes past its own snapshots: lanes, filters and table, not the table
    alone (which would replace the whole page)."""
    make_issue(1, title="a restored row")
    client.force_login(viewer)
    headers = {"HX-Request": "true", "HX-History-Restore-Request": "true"}
    html = client.get(URL, {"lane": "all"}, headers=headers).content.decode()
    assert "<html" in html and 'id="queue-filters"' in html and "a restored row" in html
    assert 'value="all" checked' in html


def test_it_warns_about_a_triaged_pt2_issue_without_a_module_label(client, viewer):
    make_issue(1, title="triaged without a module", labels=("oncall: pt2", "triaged"))
    make_issue(2, title="triaged with a module", labels=("oncall: pt2", "module: inductor", "triaged"))
    make_issue(3, title="not triaged yet")
    client.force_login(viewer)
    html = client.get(URL, {"lane": "all"}).content.decode()
    assert html.count("⚠ G4") == 1


def test_it_shows_labels_in_their_colours_suggestions_and_the_latest_verdict(client, viewer):
    issue = make_issue(1, labels=("oncall: pt2",))
    Label.objects.filter(name="oncall: pt2").update(color="e99695")
    _suggest(issue, "module: inductor", rule_id="R2.2")
    BisectionRun.objects.create(
        issue=issue,
        repro_code="x",
        status="done",
        verdict_summary="old verdict",
        created_at=timezone.now() - timedelta(hours=1),
    )
    BisectionRun.objects.create(issue=issue, repro_code="x", status="done", verdict_summary="fails only on inductor")
    client.force_login(viewer)
    html = client.get(URL).content.decode()
    assert "background:#e99695" in html
    assert 'title="R2.2 · 90% · pre-selected">module: inductor' in html
    assert "fails only on inductor" in html and "old verdict" not in html


def test_it_tells_pre_selected_suggestions_from_possible_ones(client, viewer):
    # What Accept (`a`) applies is what the issue page ticks: the queue shows the same difference.
    issue = make_issue(1)
    _suggest(issue, "module: inductor", rule_id="R2.2", confidence=0.93)
    make_suggestion(issue, "module: dynamic shapes", "R3.1", confidence=0.41, preselected=False)
    client.force_login(viewer)
    html = client.get(URL).content.decode()
    assert '<span class="chip suggested" title="R2.2 · 93% · pre-selected">module: inductor</span>' in html
    assert (
        '<span class="chip suggested possible" title="R3.1 · 41% · possible: not pre-selected">'
        "module: dynamic shapes</span>" in html
    )


def test_it_says_why_an_issue_to_transfer_has_no_label_to_accept_g2(client, viewer):
    # The engine's own reading (G2), not a stored stand-in: a maintainer places the fix in another repository.
    issue = make_issue(
        1,
        title="torchvision.ops.roi_align under torch.compile: fake impl returns the wrong shape",
        body="The output shape differs from eager when compiled.",
    )
    Comment.objects.create(
        issue=issue,
        github_id=1,
        author="maintainer",
        body="The fake kernel is torchvision's own; the fix belongs in pytorch/vision, not in PT2.",
    )
    make_issue(
        2, title="Dynamo graph break on a generator expression", body="torch._dynamo explain shows a graph break"
    )
    for name in ("module: dynamo", "module: compile ux", "triaged"):
        make_label(name)
    suggestions.refresh(Issue.objects.all())
    client.force_login(viewer)

    html = client.get(URL).content.decode()

    transfer_row = html.split('data-issue-row="1"')[1].split("</tr>")[0]
    assert 'data-route="transfer"><span class="rule">G2</span> Transfer to pytorch/vision, then stop' in transfer_row
    assert "data-accept" not in transfer_row  # nothing to accept from the queue: the issue page transfers it
    other_row = html.split('data-issue-row="2"')[1].split("</tr>")[0]
    assert "data-route" not in other_row and "module: dynamo" in other_row


def test_it_paginates_and_keeps_the_filters_in_the_links(client, viewer):
    _bulk_issues(60)
    client.force_login(viewer)
    html = client.get(URL, {"author": "bulk"}).content.decode()
    assert "60 issues" in html and "page 1 of 2" in html
    assert "author=bulk&amp;page=2" in html
    assert "bulk issue 55" in client.get(URL, {"author": "bulk", "page": 2}).content.decode()


@pytest.mark.parametrize("htmx", [False, True])
def test_it_makes_the_same_number_of_queries_for_10_and_5000_issues(client, viewer, django_assert_num_queries, htmx):
    headers = {"HX-Request": "true"} if htmx else {}
    client.force_login(viewer)
    _bulk_issues(10)
    # session, user, the user's permissions (2), count, page of issues (latest bisection
    # verdict as a subquery), labels prefetch, suggestions prefetch, failures shared (none here). Inside the
    # test's transaction the table is always rendered: tests/web/test_queue_cache.py counts the cached and uncached
    # paths.
    with django_assert_num_queries(9):
        assert client.get(URL, headers=headers).status_code == 200
    _bulk_issues(4990, start=60_000)
    with django_assert_num_queries(9):
        response = client.get(URL, headers=headers)
    assert "5000 issues" in response.content.decode()


def test_it_says_when_the_page_asked_for_does_not_exist_and_shows_the_last(client, viewer):
    _bulk_issues(60)
    client.force_login(viewer)
    html = client.get(URL, {"author": "bulk", "page": 999}).content.decode()
    assert "There is no page 999: showing page 2, the last." in html
    assert "page 2 of 2" in html and "bulk issue 55" in html
    assert "There is no page abc" in client.get(URL, {"page": "abc"}).content.decode()
    assert "There is no page" not in client.get(URL, {"author": "bulk", "page": 2}).content.decode()


def test_it_names_an_unknown_module_filter_and_lists_the_valid_ones(client, viewer):
    make_issue(1, title="a dynamo issue", labels=("oncall: pt2", "module: dynamo"))
    client.force_login(viewer)
    html = client.get(URL, {"module": "module: dynamoo"}, headers={"HX-Request": "true"}).content.decode()
    assert "unknown module: module: dynamoo" in html
    assert "Valid modules" in html and "module: inductor" in html and "module: dynamo" in html
    # A bare component name is the module label of that name, not an error.
    html = client.get(URL, {"module": "dynamo"}).content.decode()
    assert "unknown module" not in html and "a dynamo issue" in html


def test_it_accepts_a_module_label_applied_on_github_outside_the_catalog(client, viewer):
    make_issue(1, title="a custom module issue", labels=("oncall: pt2", "module: something new"))
    client.force_login(viewer)
    html = client.get(URL, {"module": "module: something new"}).content.decode()
    assert "unknown module" not in html and "a custom module issue" in html


@pytest.mark.parametrize("debug", [True, False])
def test_it_shows_its_own_404_page_for_a_missing_issue(client, viewer, settings, debug):
    settings.DEBUG = debug
    client.force_login(viewer)
    response = client.get(reverse("rubric_app:issue", args=[999999]))
    html = response.content.decode()
    assert response.status_code == 404
    assert "Issue #999999 is not in this dashboard" in html
    assert "q=%23999999" in html and "Back to the queue" in html
    assert "URLconf" not in html  # not Django's technical page
