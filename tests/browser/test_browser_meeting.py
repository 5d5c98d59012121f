"""The weekly meeting in a real browser: the agenda carried across meetings, failed writes marked,
G4's component taken in one click, and each item's bisection verdict. Writes go through the real
worker to the fake GitHub server."""

from __future__ import annotations

import pytest

from rubric_app.models import BisectionRun
from tests.browser.test_browser_triage import _issue_on_both, _wait_for_status

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
    _wait_for_status(page, "failed", "#apply-preview-5201")
    page.click('#agenda-item-5203 button[value="low priority"]')
    _wait_for_status(page, "applied", "#apply-preview-5203")
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
    _wait_for_status(page, "applied", "#apply-preview-5204")
    assert fake_github.labels_of(5204) == ["module: inductor", "oncall: pt2", "triaged"]
    page.click('#agenda-item-5205 button[value="triaged"]')
    _wait_for_status(page, "refused", "#apply-preview-5205")
    assert "G4" in page.inner_text("#apply-preview-5205")
    assert fake_github.labels_of(5205) == ["oncall: pt2", "triage review"]
    page.reload()
    assert "G4" in page.inner_text("#agenda-item-5205 [data-agenda-unsettled]")
