"""Sharing the queue: the week's roster, shared-out assignments, the "mine" lane, one-click reassign."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse
from django.utils import timezone

from rubric_app.models import Assignment, Duty, week_start
from rubric_app.triage import sharing
from tests.factories import make_issue, make_suggestion, make_user

MEETING = reverse("rubric_app:meeting")


@pytest.fixture
def bob(db):
    return make_user("bob-triager", "triager")


def _untriaged(number: int, days_old: int, module: str = ""):
    issue = make_issue(number, created_at=timezone.now() - timedelta(days=days_old))
    if module:
        make_suggestion(issue, module, "R1.2", confidence=0.9)
    return issue


def test_it_shares_out_by_preferred_modules_then_in_turn(triager, bob, chair):
    Duty.objects.create(user=triager, week=week_start(timezone.now()), modules=["module: inductor"])
    Duty.objects.create(user=bob, week=week_start(timezone.now()), modules=[])
    _untriaged(1, 9, "module: inductor")
    _untriaged(2, 8)
    _untriaged(3, 7, "module: inductor")
    _untriaged(4, 6)
    _untriaged(5, 5)
    make_issue(6, labels=("oncall: pt2", "triaged"))  # triaged: not shared
    taken = _untriaged(7, 4)
    Assignment.objects.create(issue=taken, user=chair)  # already taken: stays

    assert sharing.share_out(by=chair) == 5

    held = dict(Assignment.objects.values_list("issue__number", "user__username"))
    # 1 and 3 to the inductor fan; 2, 4 and 5 in turn to the least loaded (a tie goes to the first on the roster).
    assert held == {
        1: "tina-triager",
        3: "tina-triager",
        2: "bob-triager",
        4: "bob-triager",
        5: "tina-triager",
        7: "carl-chair",
    }
    assert sharing.share_out(by=chair) == 0  # nothing left unassigned


def test_it_shares_nothing_without_a_roster(triager):
    _untriaged(1, 3)
    assert sharing.share_out(by=triager) == 0 and not Assignment.objects.exists()


def test_it_keeps_the_roster_to_triagers(client, chair, triager, viewer):
    client.force_login(chair)
    client.post(
        reverse("rubric_app:roster_add"), {"username": triager.username, "modules": "module: dynamo, module: inductor"}
    )
    assert list(Duty.objects.values_list("user__username", "modules")) == [
        (triager.username, ["module: dynamo", "module: inductor"])
    ]
    response = client.post(reverse("rubric_app:roster_add"), {"username": viewer.username}, follow=True)
    assert "is not a triager" in response.content.decode()
    response = client.post(
        reverse("rubric_app:roster_add"), {"username": triager.username, "modules": "module: made up"}, follow=True
    )
    assert "Not module labels of the catalog: module: made up" in response.content.decode()
    assert Duty.objects.count() == 1 and Duty.objects.get().modules == ["module: dynamo", "module: inductor"]


@pytest.mark.parametrize("name", ["roster_add", "share_out"])
def test_it_lets_only_the_chair_change_the_roster(client, triager, name):
    client.force_login(triager)
    assert client.post(reverse(f"rubric_app:{name}"), {"username": triager.username}).status_code == 403
    assert client.get(reverse(f"rubric_app:{name}")).status_code == 405
    assert not Duty.objects.exists()


def test_it_takes_and_reassigns_in_one_click(client, triager, bob, viewer):
    issue = _untriaged(1, 2)
    url = reverse("rubric_app:issue_assign", args=[1])
    client.force_login(triager)
    assert client.post(url, {"next": "/?lane=mine"})["Location"] == "/?lane=mine"
    assert Assignment.objects.get(issue=issue).user == triager
    client.post(url, {"to": bob.username, "next": "https://evil.example/"})
    assignment = Assignment.objects.get(issue=issue)
    assert (assignment.user, assignment.assigned_by) == (bob, triager)
    response = client.post(url, {"to": viewer.username})
    assert "not a triager" in [str(m) for m in get_messages(response.wsgi_request)][0]
    assert Assignment.objects.get(issue=issue).user == bob
    client.force_login(viewer)
    assert client.post(url).status_code == 403


def test_it_shows_the_mine_lane_in_constant_queries(client, triager, bob, django_assert_num_queries):
    for number in range(1, 6):
        issue = _untriaged(number, number)
        Assignment.objects.create(issue=issue, user=triager if number % 2 else bob)
    client.force_login(triager)
    html = client.get("/", {"lane": "mine"}).content.decode()
    assert [n for n in range(1, 6) if f'data-issue-row="{n}"' in html] == [1, 3, 5]
    assert "taken by tina-triager" in html and "data-take" not in html.split('data-issue-row="1"')[1].split("</tr>")[0]
    with django_assert_num_queries(len_queries := _count(client)):
        client.get("/")
    _untriaged(9, 1)
    Assignment.objects.create(issue=_untriaged(10, 1), user=bob)
    with django_assert_num_queries(len_queries):
        client.get("/")


def _count(client) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        client.get("/")
    return len(ctx.captured_queries)


def test_it_shows_the_roster_on_the_meeting_page(client, chair, triager, bob):
    Duty.objects.create(user=triager, week=week_start(timezone.now()), modules=["module: dynamo"])
    Duty.objects.create(user=bob, week=week_start(timezone.now()))
    Duty.objects.create(user=chair, week=week_start(timezone.now()) - timedelta(days=7))  # last week's
    Assignment.objects.create(issue=_untriaged(1, 2), user=triager)
    _untriaged(2, 2)
    client.force_login(chair)
    html = client.get(MEETING).content.decode()
    assert (
        'data-duty="tina-triager"' in html
        and 'data-duty="bob-triager"' in html
        and 'data-duty="carl-chair"' not in html
    )
    assert "(1 untriaged issue unassigned)" in html
    assert 'name="to" value="bob-triager"' in html and 'name="to" value="tina-triager"' not in html
    client.post(reverse("rubric_app:share_out"))
    assert dict(Assignment.objects.values_list("issue__number", "user__username")) == {
        1: "tina-triager",
        2: "bob-triager",
    }


def test_it_keeps_the_meeting_pages_queries_constant_with_roster_and_summary(
    client, chair, triager, bob, django_assert_num_queries
):
    Duty.objects.create(user=triager, week=week_start(timezone.now()))
    Assignment.objects.create(issue=_untriaged(1, 2), user=triager)
    client.force_login(chair)
    expected = _count_page(client, MEETING)
    Duty.objects.create(user=bob, week=week_start(timezone.now()))
    for number in range(2, 8):
        Assignment.objects.create(issue=_untriaged(number, number), user=bob)
    with django_assert_num_queries(expected):
        client.get(MEETING)


def _count_page(client, url: str) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as ctx:
        client.get(url)
    return len(ctx.captured_queries)
