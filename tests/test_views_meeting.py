"""The meeting page: the agenda since the last meeting, grouped; decisions; minutes export."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from rubric_app.models import Meeting, Suggestion, TriageDecision
from tests.conftest import make_issue, make_label

URL = reverse("rubric_app:meeting")
HTMX = {"HX-Request": "true"}


def _flagged(number: int, title: str, why: str = "", **fields):
    issue = make_issue(number, title=title, labels=("oncall: pt2", "triage review", "module: inductor"), **fields)
    if why:
        Suggestion.objects.create(issue=issue, label="triage review", rule_id="R11", reason=why, confidence=0.9)
    return issue


@pytest.fixture
def agenda(db):
    for name in ("triaged", "high priority", "needs reproduction", "low priority"):
        make_label(name)
    return [
        _flagged(1, "Segfault in inductor kernel", why="crash (SIGSEGV)"),
        _flagged(2, "Results differ from eager", why="silently wrong results"),
        _flagged(3, "Slower than 2.4 by 30%", why="a regression from an earlier version"),
        _flagged(4, "Compile takes forever", why="performance"),
        _flagged(5, "Something odd"),
    ]


def _decide(client, number: int, decision: str, headers=None):
    issue_labels = ["module: inductor", "oncall: pt2", "triage review"]
    return client.post(reverse("rubric_app:meeting_decide", args=[number]),
                       {"decision": decision, "labels_seen": json.dumps(issue_labels)}, headers=headers or {})


def test_it_groups_the_agenda_by_why_it_needs_the_meeting(client, viewer, agenda):
    make_issue(9, title="not flagged")
    client.force_login(viewer)
    html = client.get(URL).content.decode()
    order = [html.index(f"<h2>{group} ") for group in ("crash", "silent correctness", "regression", "performance", "other")]
    assert order == sorted(order)
    assert "not flagged" not in html
    assert "decision-btn" not in html  # viewers see the agenda but cannot decide


def test_it_only_lists_what_was_flagged_since_the_last_meeting(client, viewer, agenda):
    Meeting.objects.create(started_at=timezone.now() - timedelta(days=7), ended_at=timezone.now() - timedelta(days=7))
    agenda[0].review_flagged_at = timezone.now() - timedelta(days=8)
    agenda[0].save(update_fields=["review_flagged_at"])
    client.force_login(viewer)
    html = client.get(URL).content.decode()
    assert "Segfault in inductor kernel" not in html and "Results differ from eager" in html


def test_it_offers_high_priority_only_to_the_chair(client, triager, chair, agenda):
    client.force_login(triager)
    assert 'value="high priority"' not in client.get(URL).content.decode()
    client.force_login(chair)
    assert 'value="high priority"' in client.get(URL).content.decode()


def test_it_records_a_decision_in_the_meeting_and_takes_the_issue_off_the_agenda(client, chair, agenda):
    client.force_login(chair)
    assert client.post(reverse("rubric_app:meeting_start")).status_code == 302
    meeting = Meeting.objects.get(ended_at__isnull=True)
    html = _decide(client, 1, "high priority", headers=HTMX).content.decode()
    decision = TriageDecision.objects.get()
    assert decision.meeting == meeting and decision.meeting_decision == "high priority" and decision.status == "pending"
    assert decision.labels_added == ["high priority", "triaged"] and decision.labels_removed == ["triage review"]
    assert 'hx-trigger="every 1s"' in html
    page = client.get(URL).content.decode()
    assert 'id="agenda-item-1"' not in page and 'id="agenda-item-2"' in page
    assert "Decided in this meeting" in page


def test_it_refuses_high_priority_from_a_triager(client, triager, agenda):
    client.force_login(triager)
    _decide(client, 1, "high priority")
    decision = TriageDecision.objects.get()
    assert decision.status == "refused" and "R11" in decision.result_message


def test_it_closes_through_the_same_path(client, chair, agenda):
    client.force_login(chair)
    assert _decide(client, 5, "close").status_code == 302
    decision = TriageDecision.objects.get()
    assert decision.close_issue and decision.labels_removed == ["triage review"] and decision.labels_added == []


def test_it_rejects_an_unknown_decision(client, chair, agenda):
    client.force_login(chair)
    assert _decide(client, 5, "delete the repo").status_code == 400
    assert not TriageDecision.objects.exists()


def test_it_lets_only_the_chair_start_and_end_meetings(client, triager, chair):
    client.force_login(triager)
    assert client.post(reverse("rubric_app:meeting_start")).status_code == 403
    client.force_login(chair)
    client.post(reverse("rubric_app:meeting_start"))
    client.post(reverse("rubric_app:meeting_start"))  # a second start does not open a second meeting
    assert Meeting.objects.count() == 1
    client.post(reverse("rubric_app:meeting_end"))
    assert Meeting.objects.get().ended_at is not None
    assert client.get(reverse("rubric_app:meeting_start")).status_code == 405


def test_it_exports_the_minutes_as_markdown(client, chair, agenda):
    client.force_login(chair)
    client.post(reverse("rubric_app:meeting_start"))
    _decide(client, 2, "triaged")
    _decide(client, 3, "needs reproduction")
    meeting = Meeting.objects.get()
    TriageDecision.objects.filter(issue__number=2).update(status="applied")
    response = client.get(reverse("rubric_app:meeting_minutes", args=[meeting.pk]))
    assert response["Content-Type"].startswith("text/markdown")
    assert "attachment" in response["Content-Disposition"]
    text = response.content.decode()
    assert "| #2 | Results differ from eager | triaged | carl-chair | applied |" in text
    assert "| #3 | Slower than 2.4 by 30% | needs reproduction | carl-chair | pending |" in text


def test_it_makes_the_same_number_of_queries_for_a_short_and_a_long_agenda(client, chair, agenda, django_assert_num_queries):
    client.force_login(chair)
    client.post(reverse("rubric_app:meeting_start"))
    # session, user, permissions (2), current meeting, last held meeting, agenda (with verdicts),
    # labels, suggestions, decisions recorded in this meeting
    with django_assert_num_queries(10):
        client.get(URL, headers=HTMX)
    for n in range(10, 40):
        _flagged(n, f"another crash {n}", why="crash")
    with django_assert_num_queries(10):
        html = client.get(URL, headers=HTMX).content.decode()
    assert "<html" not in html and "another crash 39" in html
