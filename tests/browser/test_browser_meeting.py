"""The weekly meeting in a real browser: the agenda carried across meetings, failed writes marked,
G4's component taken in one click, each item's bisection verdict, and a card that keeps what was typed on it, adds a
label from it and stays decided for its undo window (issue 43). Writes go through the real worker to the fake GitHub
server."""

from __future__ import annotations

import pytest
from django.utils import timezone

from rubric_app.models import AgendaItem, BisectionRun, TriageDecision
from tests.browser.conftest import screenshot
from tests.browser.test_browser_flow import _sized
from tests.browser.test_browser_page import _no_sideways_scroll
from tests.browser.test_browser_triage import _issue_on_both, _wait_for_recorded
from tests.factories import make_label
from tests.helpers import wait_until_finished

pytestmark = [pytest.mark.browser, pytest.mark.worker]

FLAGGED = ("oncall: pt2", "module: inductor", "triage review")


def test_it_carries_undecided_and_failed_items_to_the_next_meeting(
    transactional_db, celery_worker_process, fake_github, chair, make_page
):
    _issue_on_both(
        fake_github, 5201, "Segfault in a generated kernel", labels=FLAGGED, suggest=(("triage review", "R11"),)
    )
    _issue_on_both(fake_github, 5202, "Wrong results on inductor", labels=FLAGGED, suggest=(("triage review", "R11"),))
    _issue_on_both(fake_github, 5203, "Crash in the CPU backend", labels=FLAGGED, suggest=(("triage review", "R11"),))
    fake_github.inject(
        "error",
        method="POST",
        path=r"/issues/5201/labels",
        status=403,
        message="Resource not accessible by integration",
        times=5,
    )
    page = make_page(chair.username)
    page.goto("/meeting")
    page.click("[data-start-meeting]")
    page.click('#agenda-item-5201 button[value="needs reproduction"]')
    page.click('#agenda-item-5203 button[value="low priority"]')
    _wait_for_recorded(page, 5201, "failed")
    _wait_for_recorded(page, 5203, "applied")
    page.click("text=End meeting")  # 5202 was never reached
    page.click("[data-start-meeting]")
    assert sorted(page.eval_on_selector_all(".agenda-item", "items => items.map(i => i.dataset.agendaIssue)")) == [
        "5201",
        "5202",
    ]
    assert "403" in page.inner_text("#agenda-item-5201 [data-agenda-unsettled]")
    assert page.locator("#agenda-item-5202 [data-agenda-unsettled]").count() == 0
    assert fake_github.labels_of(5201) == sorted(FLAGGED)  # nothing was written


def test_it_takes_the_suggested_component_in_one_click(
    transactional_db, celery_worker_process, fake_github, chair, make_page
):
    """G4: a meeting's `triaged` on an issue with no module: label adds the component it shows."""
    issue = _issue_on_both(
        fake_github,
        5204,
        "Illegal memory access with no component yet",
        labels=("oncall: pt2", "triage review"),
        suggest=(("module: inductor", "R2.2"), ("triage review", "R11")),
    )
    BisectionRun.objects.create(
        issue=issue,
        repro_code="x",
        status="done",
        verdict_summary="First failure: inductor (crashed). Component: module: inductor.",
        verdict_labels=[{"label": "module: inductor", "rule_id": "R2.2", "evidence": "inductor: crashed"}],
    )
    _issue_on_both(
        fake_github,
        5205,
        "Crash, nothing suggested",
        labels=("oncall: pt2", "triage review"),
        suggest=(("triage review", "R11"),),
    )
    page = make_page(chair.username)
    page.goto("/meeting")
    page.click("[data-start-meeting]")
    assert "Component: module: inductor." in page.inner_text("#agenda-item-5204 [data-agenda-verdict]")
    assert "module: inductor" in page.inner_text("#agenda-item-5204 [data-agenda-component]")
    page.click('#agenda-item-5204 button[value="triaged"]')
    _wait_for_recorded(page, 5204, "applied")
    assert fake_github.labels_of(5204) == ["module: inductor", "oncall: pt2", "triaged"]
    page.click('#agenda-item-5205 button[value="triaged"]')
    # Refused: still to decide, so the card stays undecided and says why (a module: label can be added on it).
    page.wait_for_selector("#agenda-item-5205:not([data-decided]) [data-decide-error]")
    assert "G4" in page.inner_text("#agenda-item-5205 [data-decide-error]")
    assert fake_github.labels_of(5205) == ["oncall: pt2", "triage review"]
    page.reload()
    assert "G4" in page.inner_text("#agenda-item-5205 [data-agenda-unsettled]")


@pytest.mark.parametrize("width", [1280, 800])
def test_it_keeps_what_was_typed_on_a_card_adds_its_label_and_keeps_the_card_for_the_undo_window(
    transactional_db, celery_worker_process, fake_github, chair, triager, make_page, settings, width
):
    settings.MEETING_UNDO_SECONDS = 4
    flagged = ("oncall: pt2", "module: inductor", "triage review")
    _issue_on_both(
        fake_github, 4321, "Segfault in cudagraph trees", labels=flagged, suggest=(("triage review", "R11"),)
    )
    fake_github.add_label("module: crash")
    make_label("module: crash")
    page = _sized(make_page(chair.username), width)
    page.goto("/meeting")
    page.click("[data-start-meeting]")
    # Typed, never saved: a decision click keeps them.
    page.fill("#item-notes-4321 input[name=owner]", triager.username)
    page.fill("#item-notes-4321 textarea[name=note]", "bisect on an H100")
    page.fill("#add_labels-4321", "module: crash")
    page.press("#add_labels-4321", "Enter")  # picked: a ticked box, the form not sent
    page.wait_for_selector('#agenda-item-4321 [data-picked] input[value="module: crash"]')
    assert not TriageDecision.objects.exists()
    assert _no_sideways_scroll(page)
    screenshot(page, f"meeting-card-{width}")
    page.click('#agenda-item-4321 button[value="low priority"]')
    page.wait_for_selector("#agenda-item-4321[data-decided] [data-undo]")
    assert "tina-triager · bisect on an H100" in page.inner_text("#agenda-item-4321")
    item = AgendaItem.objects.get()
    assert (item.owner, item.note) == (triager, "bisect on an H100")
    # The card stays, with Undo, while the decision is held; then it leaves for "Decided in this meeting".
    page.wait_for_timeout(2000)
    assert page.locator("#agenda-item-4321[data-decided] [data-undo]").count() == 1
    page.wait_for_selector("#agenda-item-4321", state="detached", timeout=10_000)
    assert TriageDecision.objects.get().not_before <= timezone.now()
    # The worker writes it (however slow a shared machine is), and the table, polling, follows within its 2 s.
    decision = wait_until_finished(TriageDecision.objects.get(), timeout=90)
    assert decision.status == "applied", decision.result_message
    page.wait_for_selector('[data-recorded="4321"] [data-decision-status="applied"]', timeout=10_000)
    assert "tina-triager · bisect on an H100" in page.inner_text('[data-recorded="4321"]')
    assert fake_github.labels_of(4321) == [
        "low priority",
        "module: crash",
        "module: inductor",
        "oncall: pt2",
        "triaged",
    ]
