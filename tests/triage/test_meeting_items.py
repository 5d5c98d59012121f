"""The meeting (issue 36): a decided card keeps its issue, a one-click decision is held for an undo window before any
worker writes it, and each agenda item records an owner and a note that the minutes carry."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from html import unescape

import pytest
from django.urls import reverse
from django.utils import timezone

from rubric_app.github.applying import apply_decision
from rubric_app.models import AgendaItem, GitHubWrite, Meeting, TriageDecision
from tests.factories import make_issue, make_label, make_suggestion, make_user

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}
Status = TriageDecision.Status
FLAGGED = ("oncall: pt2", "module: inductor", "triage review")


@pytest.fixture
def running_meeting(fake_github, settings, chair):
    """A meeting in progress, and two flagged issues on the fake GitHub and in the mirror; decisions held 30 s."""
    settings.GITHUB_WRITE_INTERVAL = 0.01
    settings.MEETING_UNDO_SECONDS = 30
    for name in (*FLAGGED, "triaged", "needs reproduction", "low priority", "high priority"):
        make_label(name, github=fake_github)
    for number, title in ((1, "Segfault in a generated kernel"), (2, "Wrong results | on inductor")):
        fake_github.add_issue(number, title=title, labels=list(FLAGGED))
        make_suggestion(make_issue(number, title=title, labels=FLAGGED), "triage review", "R11", reason="crash")
    return Meeting.objects.create(chair=chair)


def _decide(client, number: int, decision: str, headers=None):
    return client.post(
        reverse("rubric_app:meeting_decide", args=[number]),
        {"decision": decision, "labels_seen": json.dumps(sorted(FLAGGED))},
        headers=headers or {},
    )


def _undo(client, decision: TriageDecision, headers=None):
    return client.post(reverse("rubric_app:decision_undo", args=[decision.pk]), headers=headers or {})


def test_it_keeps_the_issue_on_a_decided_card_and_holds_the_decision(client, chair, running_meeting):
    client.force_login(chair)
    html = _decide(client, 1, "low priority", headers=HTMX).content.decode()

    assert 'id="agenda-item-1"' in html and "data-decided" in html
    assert "#1</a> Segfault in a generated kernel" in html  # the card still says which issue it decided
    decision = TriageDecision.objects.get()
    assert decision.status == Status.PENDING and decision.is_held()
    assert timedelta(seconds=25) < decision.not_before - timezone.now() <= timedelta(seconds=30)
    assert "data-undo" in html and "data-held-until" in html
    # The worker does not take it inside its window: nothing is written.
    assert apply_decision(decision.pk).status == Status.PENDING and not GitHubWrite.objects.exists()


def test_it_undoes_a_held_decision_and_writes_nothing(client, chair, running_meeting, fake_github):
    client.force_login(chair)
    _decide(client, 1, "low priority", headers=HTMX)
    decision = TriageDecision.objects.get()

    html = _undo(client, decision, headers=HTMX).content.decode()

    decision.refresh_from_db()
    assert decision.status == Status.UNDONE and decision.is_finished
    assert "Undone by carl-chair before it was written" in decision.result_message
    assert 'data-decision-status="undone"' in html and "data-undo>" not in html and "every 1s" not in html
    # The worker, when the countdown delivers the task, finds nothing to write.
    TriageDecision.objects.filter(pk=decision.pk).update(not_before=timezone.now() - timedelta(seconds=1))
    assert apply_decision(decision.pk).status == Status.UNDONE
    assert fake_github.labels_of(1) == sorted(FLAGGED) and not fake_github.requests_to(r"/issues/1/", method="POST")
    # Back on the agenda (an undone decision settles nothing), and on the audit log as undone.
    page = client.get(reverse("rubric_app:meeting")).content.decode()
    assert 'id="agenda-item-1"' in page
    assert "undone" in client.get(reverse("rubric_app:audit")).content.decode()


def test_it_undoes_without_js_and_says_so(client, chair, running_meeting):
    client.force_login(chair)
    _decide(client, 2, "triaged")
    page = client.get(reverse("rubric_app:meeting")).content.decode()
    recorded = page[page.index('id="recorded"') :]
    assert "#2</a> Wrong results | on inductor" in recorded and "data-undo" in recorded  # Undo in the plain page too

    response = _undo(client, TriageDecision.objects.get())

    assert response.status_code == 302 and response.url == reverse("rubric_app:meeting")
    assert "#2: undone, nothing was sent to GitHub." in client.get(response.url).content.decode()


def test_it_writes_the_decision_once_its_window_is_over_and_then_refuses_to_undo(
    client, chair, running_meeting, fake_github
):
    client.force_login(chair)
    _decide(client, 1, "low priority")
    decision = TriageDecision.objects.get()
    TriageDecision.objects.filter(pk=decision.pk).update(not_before=timezone.now() - timedelta(seconds=1))

    assert apply_decision(decision.pk).status == Status.APPLIED
    assert "low priority" in fake_github.labels_of(1)
    html = _undo(client, decision, headers=HTMX).content.decode()
    assert "Too late to undo" in html
    decision.refresh_from_db()
    assert decision.status == Status.APPLIED


def test_it_lets_only_who_decided_or_the_chair_undo(client, chair, triager, viewer, running_meeting):
    client.force_login(triager)
    _decide(client, 1, "low priority")
    mine = TriageDecision.objects.get()
    other = make_user("tom-triager", "triager")
    client.force_login(other)
    assert "Only who made the decision" in _undo(client, mine, headers=HTMX).content.decode()
    client.force_login(viewer)
    assert _undo(client, mine).status_code == 403
    assert client.get(reverse("rubric_app:decision_undo", args=[mine.pk])).status_code == 405
    mine.refresh_from_db()
    assert mine.status == Status.PENDING
    client.force_login(chair)
    _undo(client, mine)
    mine.refresh_from_db()
    assert mine.status == Status.UNDONE


def test_it_records_an_owner_and_a_note_for_the_minutes(client, chair, triager, running_meeting):
    client.force_login(chair)
    url = reverse("rubric_app:meeting_item", args=[1])
    html = client.post(url, {"owner": "@tina-triager", "note": "bisect on H100 | report back"}, headers=HTMX)
    assert "data-item-saved" in html.content.decode() and "<html" not in html.content.decode()
    client.post(reverse("rubric_app:meeting_item", args=[2]), {"owner": "", "note": "needs the reporter's logs"})
    item = AgendaItem.objects.get(issue__number=1)
    assert (item.meeting, item.owner, item.updated_by) == (running_meeting, triager, chair)

    page = client.get(reverse("rubric_app:meeting")).content.decode()
    assert 'value="tina-triager"' in page and "bisect on H100 | report back</textarea>" in page
    _decide(client, 1, "low priority")
    client.post(reverse("rubric_app:meeting_end"))

    text = client.get(reverse("rubric_app:meeting_minutes", args=[running_meeting.pk])).content.decode()
    row = "| #1 | `Segfault in a generated kernel` | low priority | `carl-chair` | `tina-triager` | bisect on H100"
    assert row + " \\| report back | pending |" in text
    assert "Discussed, not decided" in text
    assert "| #2 | `Wrong results \\| on inductor` |  | needs the reporter's logs |" in text


def test_it_refuses_an_unknown_owner_or_no_meeting_and_keeps_nothing(client, chair, running_meeting):
    client.force_login(chair)
    url = reverse("rubric_app:meeting_item", args=[1])
    html = client.post(url, {"owner": "nobody-here", "note": "x"}, headers=HTMX).content.decode()
    assert "No dashboard user is named &#x27;nobody-here&#x27;" in html
    assert 'value="nobody-here"' in html  # what was typed stays in the field
    running_meeting.ended_at = timezone.now()
    running_meeting.save()
    response = client.post(url, {"owner": "carl-chair", "note": "x"})
    assert response.status_code == 302
    assert "No meeting is in progress" in client.get(reverse("rubric_app:meeting")).content.decode()
    assert not AgendaItem.objects.exists()
    client.logout()
    assert client.post(url, {"note": "x"}).status_code == 302  # to the sign-in page


def test_it_reads_the_owners_and_notes_with_the_agenda_in_the_same_queries(
    client, chair, running_meeting, django_assert_num_queries
):
    client.force_login(chair)
    for number in range(10, 30):
        issue = make_issue(number, title=f"another crash {number}", labels=FLAGGED)
        AgendaItem.objects.create(meeting=running_meeting, issue=issue, owner=chair, note=f"note {number}")
    # session, user, permissions (2), current meeting, agenda (owner and note as two columns of it), labels,
    # suggestions, decisions held for their undo window, last held meeting: test_views_meeting's ten, none added by
    # the items
    with django_assert_num_queries(10):
        html = client.get(reverse("rubric_app:meeting"), headers=HTMX).content.decode()
    assert "note 29</textarea>" in html and html.count('value="carl-chair"') == 20


def _decide_with(client, number: int, decision: str, **fields):
    data = {"decision": decision, "labels_seen": json.dumps(sorted(FLAGGED)), **fields}
    return client.post(reverse("rubric_app:meeting_decide", args=[number]), data, headers=HTMX).content.decode()


def test_it_keeps_an_owner_and_a_note_typed_but_not_saved_when_a_decision_is_clicked(
    client, chair, triager, running_meeting, django_assert_num_queries
):
    client.force_login(chair)
    # session, user, permissions (2), the issue (labels, comments, suggestions, runs), the meeting, the catalog, the
    # owner; whether it is on the agenda; the item read, then written (update_or_create: read, savepoints, insert); the
    # decision (who may write, the catalog, the insert); the item for the card
    with django_assert_num_queries(27):
        html = _decide_with(client, 1, "low priority", owner="tina-triager", note="bisect it on an H100")
    item = AgendaItem.objects.get(issue__number=1)
    assert (item.owner, item.note, item.updated_by) == (triager, "bisect it on an H100", chair)
    assert "data-decided" in html and "tina-triager · bisect it on an H100" in html
    # Nothing typed on an item without one: nothing recorded.
    _decide_with(client, 2, "needs reproduction", owner="", note="")
    assert not AgendaItem.objects.filter(issue__number=2).exists()


def test_it_adds_a_catalog_label_picked_on_a_card_with_the_decision(client, chair, running_meeting):
    for name in ("module: crash", "module: cuda graphs"):
        make_label(name)
    client.force_login(chair)
    page = client.get(reverse("rubric_app:meeting")).content.decode()
    assert 'id="add_labels-1"' in page and 'list="label-catalog"' in page
    catalog = page[page.index('<datalist id="label-catalog"') :]
    assert 'value="module: crash"' in catalog and 'value="high priority"' not in catalog  # outcomes are buttons

    _decide_with(client, 1, "low priority", add_labels=["crash", "module: cuda graphs"])

    decision = TriageDecision.objects.get()
    assert decision.labels_added == ["low priority", "module: crash", "module: cuda graphs", "triaged"]
    assert decision.labels_removed == ["triage review"]


def test_it_refuses_a_label_outside_the_catalog_on_a_card_and_keeps_what_was_typed(client, chair, running_meeting):
    client.force_login(chair)
    html = _decide_with(client, 1, "low priority", add_labels="module: nonsense", owner="carl-chair", note="keep me")
    assert 'id="agenda-item-1"' in html and "data-decided" not in html
    assert "Not in the triage label catalog (G7): module: nonsense" in html
    assert 'value="carl-chair"' in html and "keep me</textarea>" in html and 'value="module: nonsense" checked' in html
    html = _decide_with(client, 1, "low priority", add_labels="high priority")  # R11: the chair's button, not a label
    assert "`high priority` is a decision of the meeting: click its button." in html
    html = _decide_with(client, 1, "low priority", owner="nobody-here")
    assert "No dashboard user is named" in html
    assert not TriageDecision.objects.exists() and not AgendaItem.objects.exists()
    # Without JS: the whole page, the card with its error, nothing lost.
    data = {"decision": "triaged", "labels_seen": json.dumps(sorted(FLAGGED)), "add_labels": "nope", "note": "n"}
    response = client.post(reverse("rubric_app:meeting_decide", args=[1]), data)
    page = response.content.decode()
    assert response.status_code == 400 and "<html" in page and "Not in the triage label catalog (G7): nope" in page


def test_it_keeps_a_decided_card_until_its_undo_window_closes_then_it_leaves(
    client, chair, running_meeting, django_assert_num_queries
):
    client.force_login(chair)
    html = _decide_with(client, 1, "low priority")
    decision = TriageDecision.objects.get()
    card = reverse("rubric_app:meeting_card", args=[decision.pk])
    assert f'hx-get="{card}" hx-trigger="load delay:' in html  # asks again when the window closes
    # Asked early (a clock ahead of the server's): still the decided card, with Undo.
    html = client.get(card, headers=HTMX).content.decode()
    assert "data-decided" in html and "data-undo" in html
    # The window closed: the card leaves, and "Decided in this meeting" shows the decision on its way.
    TriageDecision.objects.update(not_before=timezone.now() - timedelta(seconds=1))
    # session, user, permissions (2), the decision, the agenda item (none: left), the meeting's decisions
    with django_assert_num_queries(7):
        html = client.get(card, headers=HTMX).content.decode()
    assert 'id="agenda-item-1"' not in html
    assert '<section id="recorded-decisions" hx-swap-oob="true"' in html and 'data-recorded="1"' in html
    assert 'hx-get="/meeting/recorded" hx-trigger="every 2s"' in html  # the outcome follows until GitHub answered
    assert client.get(card).status_code == 302  # without JS: the page


def test_it_brings_an_undone_card_back_undecided_when_its_window_closes(client, chair, running_meeting):
    client.force_login(chair)
    _decide_with(client, 2, "triaged")
    decision = TriageDecision.objects.get()
    _undo(client, decision, headers=HTMX)
    TriageDecision.objects.update(not_before=timezone.now() - timedelta(seconds=1))
    html = client.get(reverse("rubric_app:meeting_card", args=[decision.pk]), headers=HTMX).content.decode()
    assert 'id="agenda-item-2"' in html and "data-decided" not in html and 'value="triaged"' in html


def test_it_polls_the_decided_table_until_github_answered_every_decision(
    client, chair, running_meeting, django_assert_num_queries
):
    client.force_login(chair)
    _decide_with(client, 1, "low priority")
    url = reverse("rubric_app:meeting_recorded")
    # session, user, permissions (2), the meeting, its decisions (with their issues, owners and notes)
    with django_assert_num_queries(6):
        response = client.get(url, headers=HTMX)
    assert response.status_code == 200 and 'data-decision-status="pending"' in response.content.decode()
    TriageDecision.objects.update(status=Status.APPLIED)
    response = client.get(url, headers=HTMX)
    assert response.status_code == 286 and 'data-decision-status="applied"' in response.content.decode()
    assert "hx-trigger" not in response.content.decode()


HOSTILE_TITLES = {
    3: "cc @pytorch/pt2-team and @ezyang: ![pixel](https://evil.example/track.png?who=minutes) fix #1234 now",
    4: 'Crash <img src=x onerror="alert(1)"> <script>alert(2)</script> <b>bold html</b> &#64;pytorch/admins',
    5: "[docs](javascript:alert(document.cookie)) <https://evil.example/> **loud** _quiet_ ~~gone~~ `code` | cell",
    6: "``two backticks`` then ` and a trailing `",
}


def test_it_quotes_hostile_titles_inert_in_the_minutes_and_keeps_the_chairs_markdown(client, chair, running_meeting):
    """The escape: an outsider's issue title reached the meeting's Markdown minutes live: a team @mention (which
    pings the team when the minutes are posted), a remote image, raw HTML, a `javascript:` link."""
    from markdown_it import MarkdownIt

    for number, title in HOSTILE_TITLES.items():
        make_suggestion(make_issue(number, title=title, labels=FLAGGED), "triage review", "R11", reason="crash")
    client.force_login(chair)
    for number in HOSTILE_TITLES:
        _decide(client, number, "low priority")
    client.post(reverse("rubric_app:meeting_item", args=[1]), {"owner": "", "note": "**bisect** it first"})

    text = client.get(reverse("rubric_app:meeting_minutes", args=[running_meeting.pk])).content.decode()
    # As GitHub renders Markdown (CommonMark tables, raw HTML allowed): every title is one code span, nothing else.
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(text)
    titles = dict(re.findall(r"<tr>\n<td>#(\d+)</td>\n<td>(.*?)</td>\n", html))
    for number, title in HOSTILE_TITLES.items():
        cell = titles[str(number)]
        assert re.fullmatch("<code>[^<]*</code>", cell), cell
        assert unescape(cell.removeprefix("<code>").removesuffix("</code>")).strip() == " ".join(title.split())
    outside_code = re.sub("<code>[^<]*</code>", "", html)
    for live in ("<img", "<script", "<a ", "<em>", "<del>", "<b>", "@pytorch", "@ezyang", "javascript:", "#1234"):
        assert live not in outside_code, live
    assert "<strong>bisect</strong> it" in html  # the chair's note keeps its Markdown
