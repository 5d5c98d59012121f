"""The meeting's follow-ups (issue 53): what a meeting decided `high priority` or gave an owner, quiet on GitHub for
30 days or open 90 days after the decision, beside the agenda and in the minutes; the chair re-adds one to the
agenda (R11's `triage review`, written to GitHub) or dismisses it with a note (audited)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from rubric_app.github.applying import apply_decision
from rubric_app.models import AgendaItem, FollowUpDismissal, Meeting, TriageDecision
from rubric_app.triage import meeting_followups
from tests.factories import make_issue, make_label

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}


def _ago(days: float):
    return timezone.now() - timedelta(days=days)


def _decided(meeting, issue, chair, days: float, decision: str = "high priority", **fields) -> TriageDecision:
    added = ["high priority", "triaged"] if decision == "high priority" else ["triaged"]
    return TriageDecision.objects.create(
        issue=issue,
        user=chair,
        meeting=meeting,
        meeting_decision=decision,
        labels_added=added,
        status="applied",
        created_at=_ago(days),
        **fields,
    )


@pytest.fixture
def month_old(chair, triager):
    """A meeting 35 days ago that decided #5301 `high priority` with an owner and a note (quiet since), #5302
    `triaged` with an owner 100 days ago (active, still open), #5303 `high priority` last week, #5304 `triaged`
    with no owner a month ago (none of them follow-ups but the first two)."""
    old = Meeting.objects.create(started_at=_ago(100), ended_at=_ago(100), chair=chair)
    held = Meeting.objects.create(started_at=_ago(35), ended_at=_ago(35), chair=chair)
    quiet = make_issue(5301, title="inductor miscompiles a matmul", labels=("oncall: pt2", "high priority", "triaged"))
    quiet.updated_at = _ago(34)
    quiet.save(update_fields=["updated_at"])
    AgendaItem.objects.create(meeting=held, issue=quiet, owner=triager, note="Tina bisects it on the nightly")
    _decided(held, quiet, chair, 35)
    active = make_issue(5302, title="dynamo graph break in a loop", labels=("oncall: pt2", "triaged"))
    AgendaItem.objects.create(meeting=old, issue=active, owner=chair)
    _decided(old, active, chair, 100, "triaged", note="the chair follows it")
    recent = make_issue(5303, labels=("oncall: pt2", "high priority"), updated_at=_ago(40))
    _decided(Meeting.objects.create(started_at=_ago(6), ended_at=_ago(6), chair=chair), recent, chair, 6)
    _decided(held, make_issue(5304, updated_at=_ago(40)), chair, 35, "triaged")
    return held


def test_it_lists_the_month_old_high_priority_decision_beside_the_agenda_newest_first(
    client, viewer, month_old, django_assert_max_num_queries
):
    client.force_login(viewer)
    html = client.get(reverse("rubric_app:meeting")).content.decode()

    section = html.split('id="followups"')[1].split("</section>")[0]
    assert section.index("#5301") < section.index("#5302")  # decided 35 days ago, then 100 days ago
    assert "#5303" not in section and "#5304" not in section
    first = section.split('id="followup-5301"')[1].split("</article>")[0]
    assert "owner tina-triager" in first
    assert "Tina bisects it on the nightly" in first and "no activity on GitHub for 34 days" in first
    second = section.split('id="followup-5302"')[1].split("</article>")[0]
    assert "still open 100 days after the decision" in second and "the chair follows it" in second
    assert "Dismiss" not in section  # a viewer reads them; only the chair acts


def test_it_lets_the_chair_dismiss_one_with_a_note_audited_and_lists_them_in_the_minutes(client, chair, month_old):
    client.force_login(chair)
    [quiet, active] = meeting_followups.pending()
    url = reverse("rubric_app:followup_dismiss", args=[active.pk])
    refused = client.post(url, {"note": "  "}, headers=HTMX)
    assert refused.status_code == 400 and "Say why" in refused.content.decode()

    answer = client.post(url, {"note": "fixed by the upstream PR, waiting for the release"}, headers=HTMX)

    assert answer.status_code == 200 and 'id="followup-5302"' not in answer.content.decode()
    assert "#5302: dismissed." in answer.content.decode()
    dismissal = FollowUpDismissal.objects.get()
    assert (dismissal.decision, dismissal.by, dismissal.note) == (
        active,
        chair,
        "fixed by the upstream PR, waiting for the release",
    )
    minutes = client.get(reverse("rubric_app:meeting_minutes", args=[month_old.pk])).content.decode()
    follow = minutes.split("Follow-ups (decided")[1]
    assert "| #5301 |" in follow and "Tina bisects it on the nightly" in follow and "| #5302 |" not in follow


@pytest.mark.parametrize("persona", ["viewer", "triager"])
def test_it_lets_no_one_but_the_chair_act_on_a_follow_up(client, request, persona, month_old):
    client.force_login(request.getfixturevalue(persona))
    [quiet, _] = meeting_followups.pending()
    assert client.post(reverse("rubric_app:followup_dismiss", args=[quiet.pk]), {"note": "x"}).status_code == 403
    assert client.post(reverse("rubric_app:followup_readd", args=[quiet.pk])).status_code == 403
    assert not FollowUpDismissal.objects.exists()


def test_it_puts_a_follow_up_back_on_the_agenda_by_flagging_it_on_github(client, chair, month_old, fake_github):
    for name in ("oncall: pt2", "high priority", "triaged", "triage review"):
        make_label(name, github=fake_github)
    fake_github.add_issue(5301, labels=["oncall: pt2", "high priority", "triaged"])
    client.force_login(chair)
    [quiet, _] = meeting_followups.pending()

    client.post(reverse("rubric_app:followup_readd", args=[quiet.pk]))

    flagged = TriageDecision.objects.exclude(meeting__isnull=False).get(issue=quiet.issue)
    assert flagged.labels_added == ["triage review"] and "follow-up of the meeting's decision" in flagged.note
    assert [d.issue.number for d in meeting_followups.pending()] == [5302]  # on its way: not a follow-up now
    assert apply_decision(flagged.pk).status == "applied"
    assert "triage review" in fake_github.labels_of(5301)
    html = client.get(reverse("rubric_app:meeting")).content.decode()
    assert 'id="agenda-item-5301"' in html or "#5301" in html.split('id="agenda"')[1].split('id="followups"')[0]
