"""Rubric health (/rubric): each rule's suggestions shown, applied, unticked, from applied decisions."""

from __future__ import annotations

import csv
import io

import pytest
from django.urls import reverse

from rubric_app.models import TriageDecision
from rubric_app.triage import metrics
from rubric_app.triage.metrics import Outcome
from tests.factories import make_issue, make_user

URL = reverse("rubric_app:rubric_health")
CSV_URL = reverse("rubric_app:rubric_health_csv")
MEETING_URL = reverse("rubric_app:meeting")
SHOWN = [
    {"label": "module: dynamo", "rule_id": "R1.2"},
    {"label": "triaged", "rule_id": "G6"},
    {"label": "module: compile ux", "rule_id": "G4"},
    {"label": "oncall: pt2", "rule_id": "G0"},
]


def _decision(number: int, user, *, added, shown=SHOWN, status="applied", **fields) -> TriageDecision:
    issue = make_issue(number)
    return TriageDecision.objects.create(
        issue=issue,
        user=user,
        labels_seen=["oncall: pt2"],
        labels_added=added,
        suggestions_shown=shown,
        status=status,
        **fields,
    )


@pytest.fixture
def decided(triager):
    """#1: R1.2 applied, G6 and G4 unticked, G0 already there, inductor and triage review added by hand.
    #2: R1.2 and G6 applied. The others do not count: refused, a meeting's, and one from before shown was kept."""
    _decision(1, triager, added=["module: dynamo", "module: inductor", "triage review"])
    _decision(2, triager, added=["module: dynamo", "triaged"])
    _decision(3, triager, added=["module: inductor"], status="refused")
    _decision(4, triager, added=["high priority"], meeting_decision="high priority")
    _decision(5, triager, added=["module: inductor"], shown=None)


def test_it_tells_each_suggestion_outcome_of_a_decision(decided):
    first = sorted(
        (o.label, o.rule_id, o.shown, o.applied, o.unticked, o.added)
        for o in metrics.decision_outcomes()
        if o.issue_number == 1
    )
    assert first == [
        ("module: compile ux", "G4", True, False, True, False),
        ("module: dynamo", "R1.2", True, True, False, False),
        ("module: inductor", "", False, True, False, True),
        ("oncall: pt2", "G0", True, False, False, False),  # already on the issue: neither applied nor unticked
        ("triage review", "", False, True, False, True),
        ("triaged", "G6", True, False, True, False),
    ]
    assert {o.issue_number for o in metrics.decision_outcomes()} == {1, 2}
    assert all(isinstance(o, Outcome) for o in metrics.decision_outcomes())


def test_it_computes_precision_per_rule_and_the_labels_no_rule_suggested(decided):
    rules, added = metrics.rubric_health(metrics.decision_outcomes())
    table = {r.rule_id: (r.shown, r.applied, r.unticked, r.precision) for r in rules}
    assert table == {"R1.2": (2, 2, 0, 1.0), "G6": (2, 1, 1, 0.5), "G4": (2, 0, 2, 0.0), "G0": (2, 0, 0, None)}
    assert {r.rule_id: (r.applied_issues, r.unticked_issues) for r in rules}["G6"] == ([2], [1])
    assert [(a.label, a.count, a.issues) for a in added] == [("module: inductor", 1, [1]), ("triage review", 1, [1])]


def test_it_tells_how_often_triagers_kept_what_a_would_apply(client, viewer, triager):
    # The live check of the pre-selection: of the labels ticked for `a` (and not on the issue already), how many
    # the triager kept. A possible (unticked) label left alone, and decisions from before the ticks were kept,
    # do not count.
    ticked = [
        {"label": "module: dynamo", "rule_id": "R1.2", "preselected": True},
        {"label": "triaged", "rule_id": "G6", "preselected": True},
        {"label": "module: compile ux", "rule_id": "G4", "preselected": False},
        {"label": "oncall: pt2", "rule_id": "G0", "preselected": True},
    ]  # already on the issue: no verdict
    _decision(1, triager, added=["module: dynamo", "triaged"], shown=ticked)
    _decision(2, triager, added=["triaged"], shown=ticked)  # unticked Dynamo: `a` would have been wrong once
    _decision(3, triager, added=["module: dynamo"])  # recorded before the ticks were kept
    rules, _added = metrics.rubric_health(metrics.decision_outcomes())
    table = {r.rule_id: (r.ticked, r.ticked_kept, r.kept) for r in rules}
    assert table == {"R1.2": (2, 1, 0.5), "G6": (2, 2, 1.0), "G4": (0, 0, None), "G0": (0, 0, None)}
    assert (metrics.preselection(rules).ticked, metrics.preselection(rules).ticked_kept) == (4, 3)
    client.force_login(viewer)
    html = client.get(URL).content.decode()
    assert "triagers kept 3 of 4 (0.75)" in html and '<td data-col="kept">1 of 2</td>' in html
    rows = list(csv.DictReader(io.StringIO(client.get(CSV_URL).content.decode())))
    assert {r["rule_id"]: (r["preselected"], r["preselected_kept"]) for r in rows if r["rule_id"]}["R1.2"] == ("2", "1")


def test_it_shows_the_table_with_links_in_constant_queries(client, viewer, decided, django_assert_num_queries):
    client.force_login(viewer)
    # session, user, the viewer's permissions (own and groups'), the outcomes, the bot's reviews, the skill's files.
    with django_assert_num_queries(7):
        html = client.get(URL).content.decode()
    assert '<tr data-rule="G6">' in html and 'data-col="precision">0.50<' in html
    assert f'href="{reverse("rubric_app:issue", args=[1])}"' in html
    _decision(6, viewer, added=["module: dynamo"])
    with django_assert_num_queries(7):
        assert client.get(URL).status_code == 200


def test_it_exports_the_table_and_every_outcome_as_csv(client, viewer, decided):
    client.force_login(viewer)
    response = client.get(CSV_URL)
    assert response["Content-Type"].startswith("text/csv") and "attachment" in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {r["rule_id"]: r["precision"] for r in rows if r["rule_id"]} == {
        "R1.2": "1.000",
        "G6": "0.500",
        "G4": "0.000",
        "G0": "",
    }
    assert {r["label"]: r["added"] for r in rows if r["label"]} == {"module: inductor": "1", "triage review": "1"}
    detail = list(csv.DictReader(io.StringIO(client.get(CSV_URL, {"rows": "outcomes"}).content.decode())))
    assert len(detail) == 6 + 4 and set(detail[0]) == set(Outcome._fields)


@pytest.mark.parametrize("url", [URL, CSV_URL])
def test_it_lets_only_the_dashboards_roles_see_rubric_health(client, outsider, viewer, url):
    assert client.get(url).status_code == 302
    client.force_login(outsider)
    assert client.get(url).status_code == 403
    client.force_login(viewer)
    assert client.get(url).status_code == 200
    assert client.post(url).status_code == 405


def test_it_renders_hostile_names_inert_in_charts_tables_and_csv(client, viewer):
    mallory = make_user('<svg onload=alert(1)>"mallory', "triager")
    shown = [{"label": "<img src=x onerror=alert(2)>", "rule_id": "<script>R</script>"}]
    _decision(1, mallory, added=["<script>alert(3)</script>"], shown=shown)
    client.force_login(viewer)
    for url in (URL, reverse("rubric_app:metrics"), MEETING_URL):
        _assert_inert(client.get(url).content.decode())
    assert "&lt;svg onload=alert(1)&gt;&quot;mallory" in client.get(reverse("rubric_app:metrics")).content.decode()
    assert "&lt;script&gt;R&lt;/script&gt;" in client.get(URL).content.decode()


def _assert_inert(html: str) -> None:
    """Parsed as a browser would: no handler attribute, no image, no script but ours, no svg but our charts.

    (Escaped names inside attribute values, e.g. a chart bar's data-category, are text.)
    """
    from html.parser import HTMLParser

    found = []

    class Tags(HTMLParser):
        def handle_starttag(self, tag, attrs):
            attrs = dict(attrs)
            if any(name.startswith("on") for name in attrs) or tag in ("img", "iframe"):
                found.append((tag, attrs))
            if tag == "script" and "/static/" not in (attrs.get("src") or ""):
                found.append((tag, attrs))
            if tag == "svg" and attrs.get("class") != "chart":
                found.append((tag, attrs))

    Tags().feed(html)
    assert not found


def test_it_counts_only_what_a_decision_said_about_labels(triager):
    # Issue #36: a duplicate-close, a usage question, a transfer or a reply alone says nothing about the labels, and
    # a hand-off (G5) only about the route: none of their module labels was "unticked".
    shown = [*SHOWN, {"label": "oncall: export", "rule_id": "G5", "preselected": True}]
    _decision(1, triager, added=[], shown=shown, close_reason="duplicate", reply="duplicate", duplicate_of=9)
    _decision(2, triager, added=[], shown=shown, close_reason="not_planned", reply="redirect_to_forum")
    _decision(3, triager, added=[], shown=shown, transfer_to="pytorch/vision")
    _decision(4, triager, added=[], shown=shown, reply="request_more_info")
    _decision(5, triager, added=["oncall: export"], shown=shown, redirect="oncall: export")
    _decision(
        6, triager, added=["oncall: cpu inductor", "module: dynamo"], shown=SHOWN, redirect="oncall: cpu inductor"
    )
    outcomes = list(metrics.decision_outcomes())
    assert {o.issue_number for o in outcomes} == {5, 6}
    handed_off = [(o.label, o.applied, o.unticked) for o in outcomes if o.issue_number == 5]
    assert handed_off == [("oncall: pt2", False, False), ("oncall: export", True, False)]
    # The CPU lane is PT2's own: its labels were decided like any other.
    assert {o.label for o in outcomes if o.issue_number == 6 and o.unticked} == {"triaged", "module: compile ux"}
    rules, added = metrics.rubric_health(outcomes)
    assert {r.rule_id: (r.applied, r.unticked) for r in rules}["G4"] == (0, 1)


def test_it_counts_triaged_that_a_applied_as_g6s_not_as_a_label_no_rule_suggested(triager):
    # The engine suggests no `triaged` beside a flag; where the triager left the flag off, the plan adds `triaged`
    # itself (G6), and a `bot-mislabeled` says what they thought of the bot, not of the rubric.
    flagged = [{"label": "module: inductor", "rule_id": "R2.2", "preselected": True}]
    _decision(1, triager, added=["module: inductor", "triaged"], shown=flagged)
    review = [*flagged, {"label": "triage review", "rule_id": "R11", "preselected": True}]
    _decision(2, triager, added=["module: inductor", "triaged", "bot-mislabeled"], shown=review)
    rules, added = metrics.rubric_health(metrics.decision_outcomes())
    assert added == []
    g6 = {r.rule_id: r for r in rules}["G6"]
    assert (g6.shown, g6.applied, g6.ticked, g6.ticked_kept) == (2, 2, 1, 1)  # #2: the triager unticked the flag
    assert {r.rule_id: (r.applied, r.unticked) for r in rules}["R11"] == (0, 1)
