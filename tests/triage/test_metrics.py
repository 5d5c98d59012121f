"""Queue health (/metrics): weekly flow, age of the untriaged, time to triage, decisions per triager."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from rubric_app.github.applying import apply_decision
from rubric_app.github.sync import sync_queue
from rubric_app.models import Issue, TriageDecision
from rubric_app.triage import metrics
from rubric_app.triage.decisions import Plan, request_decision
from tests.factories import make_issue, make_label, make_suggestion
from tests.helpers import passes_on_sqlite

URL = reverse("rubric_app:metrics")
# A Wednesday noon: the current week started Monday 2026-11-02.
NOW = datetime(2026, 11, 4, 12, 0, tzinfo=UTC)


def _at(days_ago: float) -> datetime:
    return NOW - timedelta(days=days_ago)


def _decide(issue: Issue, user, days_ago: float, status: str = "applied") -> TriageDecision:
    return TriageDecision.objects.create(
        issue=issue, user=user, labels_added=["triaged"], status=status, created_at=_at(days_ago)
    )


@pytest.mark.django_db
def test_it_counts_opened_left_and_open_at_each_weeks_end():
    make_issue(1, created_at=_at(30))  # before the window, still open
    make_issue(2, created_at=_at(30), state="closed", in_queue=False, closed_at=_at(1))  # left this week
    make_issue(3, created_at=_at(8))  # opened last week
    make_issue(4, created_at=_at(1), labels=("oncall: export",), in_queue=False, updated_at=_at(0.5))  # handed off
    make_issue(5, created_at=_at(0.1))

    health = metrics.queue_health(weeks=3, now=NOW)

    assert [w.start.isoformat() for w in health.weeks] == ["2026-10-19", "2026-10-26", "2026-11-02"]
    assert [(w.opened, w.closed, w.open_at_end) for w in health.weeks] == [(0, 0, 2), (1, 0, 3), (2, 2, 3)]
    assert health.open_now == 3


@pytest.mark.django_db
def test_it_buckets_the_untriaged_pt2_issues_by_age():
    make_issue(1, created_at=_at(2))
    make_issue(2, created_at=_at(10))
    make_issue(3, created_at=_at(40))
    make_issue(4, created_at=_at(400))
    make_issue(5, created_at=_at(400), labels=("oncall: pt2", "triaged"))  # triaged: not in the lane
    make_issue(6, created_at=_at(2), state="closed", in_queue=False)  # closed
    make_issue(7, created_at=_at(2), labels=("oncall: cpu inductor",))  # other lane

    health = metrics.queue_health(weeks=2, now=NOW)

    assert health.age_buckets == [("< 1 week", 1), ("1–4 weeks", 1), ("1–3 months", 1), ("> 3 months", 1)]


@pytest.mark.django_db
def test_it_measures_time_to_triage_from_the_first_decision(triager, chair):
    make_issue(1, created_at=_at(3), first_decided_at=_at(3 - 2 / 24))  # 2 h after opening, last week
    make_issue(2, created_at=_at(10), first_decided_at=_at(10 - 4))  # 96 h, last week
    make_issue(3, created_at=_at(2), first_decided_at=_at(2 - 0.5))  # 12 h, this week
    make_issue(4, created_at=_at(200), first_decided_at=_at(100))  # decided before the window
    make_issue(5, created_at=_at(2))  # not decided yet

    health = metrics.queue_health(weeks=2, now=NOW)

    assert sorted(health.triage_hours) == pytest.approx([2.0, 12.0, 96.0])
    assert (health.triage_median_h, health.triage_p90_h) == pytest.approx((12.0, 96.0))
    assert [(w.triaged, w.triage_median_h, w.triage_p90_h) for w in health.weeks] == [
        (2, pytest.approx(49.0), pytest.approx(96.0)),
        (1, pytest.approx(12.0), pytest.approx(12.0)),
    ]


@pytest.mark.django_db
def test_it_puts_a_moment_at_monday_midnight_in_the_week_it_starts():
    monday = datetime(2026, 11, 2, tzinfo=UTC)  # the current week's first instant
    just_before = monday - timedelta(microseconds=1)
    make_issue(1, created_at=monday, first_decided_at=monday)
    make_issue(2, created_at=just_before, first_decided_at=just_before)
    make_issue(
        3, created_at=_at(1), first_decided_at=NOW + timedelta(days=30)
    )  # stamped after the window: its last week
    make_issue(4, created_at=NOW + timedelta(days=30))  # opened after it: not counted

    health = metrics.queue_health(weeks=2, now=NOW)

    assert [(w.opened, w.triaged) for w in health.weeks] == [(1, 1), (2, 2)]
    assert health.open_now == 3 and health.triaged == 3


@pytest.mark.django_db
def test_it_counts_decisions_per_triager_in_the_window(triager, chair):
    issue = make_issue(1, created_at=_at(30))
    for days_ago, user, status in [
        (1, triager, "applied"),
        (2, triager, "refused"),
        (3, chair, "applied"),
        (9, triager, "conflict"),
        (20, chair, "applied"),
    ]:
        _decide(issue, user, days_ago, status)

    health = metrics.queue_health(weeks=2, now=NOW)

    assert health.per_triager == [("tina-triager", 3, 1), ("carl-chair", 1, 1)]


@pytest.fixture
def suggested_on_github(db, fake_github, settings):
    settings.GITHUB_WRITE_INTERVAL = 0.01
    for name in ("module: dynamo", "triaged", "triage review"):
        make_label(name, github=fake_github)
    fake_github.add_issue(1001, labels=["oncall: pt2"])
    issue = make_issue(1001, labels=("oncall: pt2",))
    make_suggestion(issue, "module: dynamo", "R1.2", confidence=0.9)
    make_suggestion(issue, "dynamo", kind="avoid", rule_id="G7")
    return issue


def test_it_stamps_the_first_applied_decision_and_what_it_was_shown(suggested_on_github, triager):
    refused = request_decision(
        issue=suggested_on_github, user=triager, plan=Plan(["not in the catalog"]), labels_seen=["oncall: pt2"]
    )
    first = request_decision(
        issue=suggested_on_github, user=triager, plan=Plan(["module: dynamo"]), labels_seen=["oncall: pt2"]
    )
    assert refused.status == "refused"
    assert first.suggestions_shown == [{"label": "module: dynamo", "rule_id": "R1.2", "preselected": True}]
    assert apply_decision(first.pk).status == "applied"
    suggested_on_github.refresh_from_db()
    assert suggested_on_github.first_decided_at == first.created_at
    second = request_decision(
        issue=suggested_on_github, user=triager, plan=Plan(["triaged"]), labels_seen=["module: dynamo", "oncall: pt2"]
    )
    assert apply_decision(second.pk).status == "applied"
    suggested_on_github.refresh_from_db()
    assert suggested_on_github.first_decided_at == first.created_at  # the first one stays


def test_it_takes_the_nearest_rank_percentile():
    assert metrics.percentile([], 0.9) is None
    assert metrics.percentile([5.0], 0.9) == 5.0
    assert metrics.percentile([float(i) for i in range(1, 11)], 0.9) == 9.0
    assert metrics.percentile([float(i) for i in range(1, 12)], 0.9) == 10.0


@pytest.mark.django_db
def test_it_keeps_closed_at_from_the_sync(fake_github):
    fake_github.add_issue(1, labels=["oncall: pt2"])
    sync_queue(full=True)
    fake_github.update_issue(1, state="closed")
    sync_queue(full=True)
    issue = Issue.objects.get(number=1)
    assert issue.state == "closed" and issue.closed_at == issue.updated_at  # the fake closes at its update time


def test_it_shows_charts_with_their_numbers_beside_them(client, viewer):
    make_issue(1)
    make_issue(2, created_at=datetime(2020, 1, 1, tzinfo=UTC))
    _decide(make_issue(3), viewer, days_ago=-1000)  # in the window whatever today is
    client.force_login(viewer)
    html = client.get(URL).content.decode()
    for slug in ("open", "flow", "age", "triage", "triagers"):
        assert f'data-chart="{slug}"' in html and f'data-table="{slug}"' in html
    assert 'data-figure="untriaged">3<' in html
    assert "vera-viewer" in html


def test_it_makes_the_same_few_queries_whatever_the_data(client, viewer, django_assert_num_queries):
    client.force_login(viewer)
    # session, user, the viewer's permissions (own and groups'), then four: opened and left per
    # week, age buckets, time to triage (ranked by PostgreSQL, fetched on SQLite), decisions per triager.
    with django_assert_num_queries(8):
        assert client.get(URL).status_code == 200
    for n in range(10):
        issue = make_issue(100 + n, created_at=_at(n * 3), first_decided_at=_at(-1000))
        _decide(issue, viewer, days_ago=-1000)
    with django_assert_num_queries(8):
        assert client.get(URL, {"weeks": 30}).status_code == 200


def test_it_says_why_a_bad_window_is_ignored(client, viewer):
    client.force_login(viewer)
    response = client.get(URL, {"weeks": "9999"})
    assert response.status_code == 200
    assert "less than or equal to 52" in response.content.decode()
    assert len(response.context["health"].weeks) == 12


@pytest.mark.parametrize("persona, status", [("viewer", 200), ("triager", 200), ("outsider", 403)])
def test_it_lets_only_the_dashboards_roles_see_metrics(client, request, persona, status):
    client.force_login(request.getfixturevalue(persona))
    assert client.get(URL).status_code == status


def test_it_sends_anonymous_visitors_to_sign_in_and_refuses_post(client, viewer):
    assert client.get(URL).status_code == 302
    client.force_login(viewer)
    assert client.post(URL).status_code == 405


def test_it_passes_these_tests_on_sqlite(tmp_path):
    """The embedded default's paths (the weeks by comparisons, the hours ranked in Python): this file again,
    in a child pytest on a SQLite database."""
    passes_on_sqlite(__file__, tmp_path)


def test_it_counts_a_hand_off_and_a_transfer_applied_from_the_dashboard_as_left_this_week(
    suggested_on_github, fake_github, triager
):
    """Issue 53: both leave the issue's GitHub stamp (updated_at) a month back; counted by it, they were missed."""
    make_label("oncall: export", github=fake_github)
    fake_github.add_issue(1002, labels=["oncall: pt2"])
    month_ago = timezone.now() - timedelta(days=30)
    moved = make_issue(1002, labels=("oncall: pt2",), created_at=month_ago, updated_at=month_ago)
    Issue.objects.filter(pk=suggested_on_github.pk).update(created_at=month_ago, updated_at=month_ago)
    suggested_on_github.refresh_from_db()
    before = metrics.queue_health(weeks=2).weeks[-1].closed

    handed = request_decision(
        issue=suggested_on_github,
        user=triager,
        plan=Plan(add=["oncall: export"], remove=["oncall: pt2"]),
        labels_seen=["oncall: pt2"],
        redirect="oncall: export",
    )
    transfer = request_decision(
        issue=moved, user=triager, plan=Plan(transfer_to="pytorch/vision"), labels_seen=["oncall: pt2"]
    )
    assert apply_decision(handed.pk).status == "applied", handed.result_message
    assert apply_decision(transfer.pk).status == "applied", transfer.result_message

    assert not Issue.objects.filter(number__in=[1001, 1002], in_queue=True).exists()
    assert metrics.queue_health(weeks=2).weeks[-1].closed == before + 2
    sync_queue(full=True)  # the sync sees both gone from the queue (one in another repository): still this week's
    assert metrics.queue_health(weeks=2).weeks[-1].closed == before + 2
