"""The meeting's follow-ups in Chromium at 1280x800 (issue 53): a month-old `high priority` decision with an owner,
quiet since, listed beside the agenda; the chair dismisses it with a note and the list answers in place."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from rubric_app.models import AgendaItem, FollowUpDismissal, Meeting, TriageDecision
from tests.browser.conftest import screenshot
from tests.factories import make_issue

pytestmark = [pytest.mark.browser]


def test_it_lists_a_month_old_high_priority_decision_and_lets_the_chair_dismiss_it(
    transactional_db, make_page, chair, triager
):
    month_ago = timezone.now() - timedelta(days=33)
    held = Meeting.objects.create(started_at=month_ago, ended_at=month_ago, chair=chair)
    issue = make_issue(5501, title="cudagraphs slow down a training step", labels=("oncall: pt2", "high priority"))
    issue.updated_at = month_ago
    issue.save(update_fields=["updated_at"])
    AgendaItem.objects.create(meeting=held, issue=issue, owner=triager, note="Tina profiles it")
    TriageDecision.objects.create(
        issue=issue,
        user=chair,
        meeting=held,
        meeting_decision="high priority",
        labels_added=["high priority"],
        status="applied",
        created_at=month_ago,
    )
    page = make_page(chair.username)
    page.set_viewport_size({"width": 1280, "height": 800})

    page.goto("/meeting")

    card = page.locator("#followup-5501")
    text = card.inner_text()
    assert "owner tina-triager" in text and "Tina profiles it" in text and "no activity on GitHub for 33 days" in text
    assert page.evaluate("document.documentElement.scrollWidth") <= 1280
    screenshot(page, "meeting-followups-1280")
    card.locator("input[name=note]").fill("the fix landed in the nightly; the reporter confirms")
    card.locator("button", has_text="Dismiss").click()
    page.locator("#followups [role=status]").wait_for()
    assert page.locator("#followup-5501").count() == 0
    assert "#5501: dismissed." in page.locator("#followups").inner_text()
    assert FollowUpDismissal.objects.get().note == "the fix landed in the nightly; the reporter confirms"
