"""The triage flow in Chromium at 1280x800 and 800 px wide (issue 36): what `a` and Enter show appears in the window,
the labels refresh in place once GitHub has them (the issue's header, the queue's row), `j` passes over the issues
waiting for the meeting or for a decision, the label picker adds a label the engine did not suggest, the keys work
after a lane click and the URL follows it, and no page scrolls sideways. The meeting's decided card, its undo window
and an item's owner and note, too.

Applies go through the real worker to the fake GitHub server (tests/browser/test_browser_triage.py).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from rubric_app.demo.loading import load_catalog_labels, load_demo_issues
from rubric_app.models import AgendaItem, BisectionRun, Issue, Meeting, TriageDecision
from tests.browser.test_browser_triage import _issue_on_both, _wait_for_recorded, _wait_for_status
from tests.factories import make_issue, make_suggestion

pytestmark = [pytest.mark.browser]

# A body long enough that the triage panel's preview would start below an 800 px window.
LONG_BODY = "Compiling this model hits a graph break on every step.\n\n" + "\n\n".join(
    f"Step {n}: the traceback repeats, graph break in `forward` at line {n}." for n in range(40)
)
SUGGEST = (("module: dynamo", "R1.2"), ("module: dynamic shapes", "R1.1"))


def _sized(page, width: int, height: int = 800):
    page.set_viewport_size({"width": width, "height": height})
    return page


def _in_window(page, selector: str) -> bool:
    """Whether the element is wholly inside the window (what the triager sees without scrolling) within a second of
    appearing: keys.js scrolls once htmx has settled the swap (20 ms after it)."""
    try:
        page.wait_for_function(
            """s => { const r = document.querySelector(s).getBoundingClientRect();
                      return 0 <= r.top && r.bottom <= window.innerHeight; }""",
            arg=selector,
            timeout=1000,
        )
    except PlaywrightTimeout:
        return False
    return True


def _not_reloaded(page) -> None:
    """Mark the document: a reload or a navigation would lose the mark (_still_the_same_document)."""
    page.evaluate("window.__sameDocument = true")


def _still_the_same_document(page) -> bool:
    return page.evaluate("window.__sameDocument === true")


def _chips(page, selector: str) -> list[str]:
    return page.eval_on_selector_all(f"{selector} .chip", "chips => chips.map(c => c.textContent)")


@pytest.mark.worker
@pytest.mark.parametrize("width", [1280, 800])
def test_it_shows_the_preview_and_the_result_in_the_window_and_refreshes_the_header(
    transactional_db, celery_worker_process, fake_github, triager, make_page, width
):
    _issue_on_both(fake_github, 5301, "Graph break in a long model", body=LONG_BODY, suggest=SUGGEST)
    page = _sized(make_page(triager.username), width)
    page.goto("/issues/5301")
    _not_reloaded(page)
    page.keyboard.press("a")
    page.wait_for_selector("#apply-preview-5301 [data-apply]")
    assert _in_window(page, "#apply-preview-5301 [data-apply]"), "the preview of `a` is below the fold"
    assert page.evaluate("window.scrollX") == 0

    page.keyboard.press("Enter")
    page.wait_for_selector("#apply-preview-5301 [data-decision-status]")
    assert _in_window(page, "#apply-preview-5301 [data-decision-status]"), "the result of Enter is below the fold"
    _wait_for_status(page, "applied", "#apply-preview-5301")
    assert _in_window(page, "#apply-preview-5301 [data-decision-status]")
    # The header's labels are GitHub's now, refreshed in place (no reload).
    page.wait_for_function("document.querySelector('#issue-labels-5301').textContent.includes('triaged')")
    assert _chips(page, "#issue-labels-5301") == ["module: dynamic shapes", "module: dynamo", "oncall: pt2", "triaged"]
    assert _still_the_same_document(page)
    assert fake_github.labels_of(5301) == ["module: dynamic shapes", "module: dynamo", "oncall: pt2", "triaged"]


@pytest.mark.worker
@pytest.mark.parametrize("width", [1280, 800])
def test_it_keeps_the_queue_rows_preview_in_the_window_and_refreshes_its_labels(
    transactional_db, celery_worker_process, fake_github, triager, make_page, width
):
    now = timezone.now()
    for n in range(5310, 5324):  # newest first: #5323 is the first row, #5310 the last
        issue = _issue_on_both(fake_github, n, f"Graph break number {n} in a model", suggest=SUGGEST)
        Issue.objects.filter(pk=issue.pk).update(updated_at=now - timedelta(minutes=5400 - n))
    page = _sized(make_page(triager.username), width)
    page.goto("/")
    _not_reloaded(page)
    for _ in range(12):
        page.keyboard.press("j")
    assert page.get_attribute("tr.selected", "data-issue-row") == "5312"
    assert _in_window(page, "tr.selected") and page.evaluate("window.scrollX") == 0  # j never scrolls sideways

    page.keyboard.press("a")
    page.wait_for_selector("#apply-preview-5312 [data-apply]")
    assert _in_window(page, "#apply-preview-5312 [data-apply]")
    page.keyboard.press("Enter")
    _wait_for_status(page, "applied", "#apply-preview-5312")
    assert _in_window(page, "#apply-preview-5312 [data-decision-status]")
    page.wait_for_function("document.querySelector('#row-labels-5312').textContent.includes('triaged')")
    assert _chips(page, "#row-labels-5312") == ["module: dynamic shapes", "module: dynamo", "oncall: pt2", "triaged"]
    assert _still_the_same_document(page)
    # Decided here: j passes over it too, from the row before it.
    page.keyboard.press("k")
    page.keyboard.press("j")
    assert page.get_attribute("tr.selected", "data-issue-row") == "5311"


def test_it_passes_over_the_issues_waiting_for_the_meeting_or_a_decision(transactional_db, triager, make_page):
    now = timezone.now()
    make_issue(5331, title="Flagged for the meeting", labels=("oncall: pt2", "triage review"), updated_at=now)
    pending = make_issue(5332, title="Decided a moment ago", updated_at=now - timedelta(minutes=1))
    make_issue(5333, title="Nobody has looked", updated_at=now - timedelta(minutes=2))
    make_issue(5334, title="Nobody has looked either", updated_at=now - timedelta(minutes=3))
    TriageDecision.objects.create(issue=pending, user=triager, labels_added=["module: dynamo"])  # on its way
    page = _sized(make_page(triager.username), 1280)
    page.goto("/?lane=all")
    page.keyboard.press("j")
    assert page.get_attribute("tr.selected", "data-issue-row") == "5333"  # `j a` now previews an issue to decide
    page.keyboard.press("j")
    page.keyboard.press("k")
    page.keyboard.press("k")  # nothing to decide above: it stays
    assert page.get_attribute("tr.selected", "data-issue-row") == "5333"
    page.goto("/?lane=review")  # the lane of the flagged ones: there they are what j walks through
    page.keyboard.press("j")
    assert page.get_attribute("tr.selected", "data-issue-row") == "5331"


@pytest.mark.worker
def test_it_picks_a_label_the_engine_did_not_suggest_and_applies_it(
    transactional_db, celery_worker_process, fake_github, triager, make_page
):
    load_catalog_labels()  # the whole catalog, with its descriptions
    _issue_on_both(fake_github, 5341, "Graph break, and inductor too", suggest=(("module: dynamo", "R1.2"),))
    fake_github.add_label("module: inductor")
    page = _sized(make_page(triager.username), 1280)
    page.goto("/issues/5341")
    described = page.get_attribute('#label-catalog option[value="module: inductor"]', "label")
    assert described and described != "module: inductor"  # the type-ahead shows what the label means
    picker = "#triage-form [data-label-picker] input[list]"
    page.fill(picker, "module: inductor")
    page.press(picker, "Tab")  # committed (a pick from the list commits the same way)
    # The pick becomes a ticked box, the field empties for the next one, and the preview follows.
    assert page.is_checked('#triage-form [data-picked] input[value="module: inductor"]')
    assert page.input_value(picker) == ""
    page.wait_for_selector("#apply-preview-5341 .plan >> text=+ module: inductor")
    page.click("body")  # the keys are the page's again
    page.keyboard.press("Enter")
    _wait_for_status(page, "applied", "#apply-preview-5341")
    assert fake_github.labels_of(5341) == ["module: dynamo", "module: inductor", "oncall: pt2", "triaged"]
    page.wait_for_function("document.querySelector('#issue-labels-5341').textContent.includes('module: inductor')")


def test_it_keeps_the_keys_after_a_lane_click_and_the_url_follows(transactional_db, triager, make_page):
    make_issue(5351, title="In the CPU lane", labels=("oncall: cpu inductor",))
    make_issue(5352, title="In the PT2 lane")
    make_suggestion(Issue.objects.get(number=5351), "module: inductor", "R2.2", confidence=0.9)
    page = _sized(make_page(triager.username), 1280)
    page.goto("/")
    _not_reloaded(page)
    page.click("label.lane:has(input[value=cpu])")  # an htmx swap of the table; the radio keeps the focus
    page.wait_for_url("**/?lane=cpu*")
    page.wait_for_selector('[data-issue-row="5351"]')
    page.keyboard.press("j")
    assert page.get_attribute("tr.selected", "data-issue-row") == "5351"
    page.keyboard.press("a")
    page.wait_for_selector("#apply-preview-5351 [data-apply]")
    page.click("label.lane:has(input[value=all])")
    page.wait_for_url("**/?lane=all*")
    assert _still_the_same_document(page)
    page.go_back()
    page.wait_for_url("**/?lane=cpu*")


def _every_page(issues: list[Issue], meeting: Meeting) -> list[str]:
    lanes = ["pt2", "cpu", "review", "repro", "bot", "fixed", "all", "mine"]
    groups = sorted({i.signature for i in issues if i.signature})
    return (
        [f"/?lane={lane}" for lane in lanes]
        + [i.get_absolute_url() for i in issues]
        + [f"/signatures/{key}" for key in groups]
        + ["/meeting", "/bisections", "/audit", "/metrics", "/rubric", "/issues/99", "/nowhere"]
    )


def test_it_scrolls_no_page_sideways_at_1280_and_reads_the_issue_and_queue_at_800(transactional_db, chair, make_page):
    """Every page of the demo's data: scrollWidth <= clientWidth (the issue reported /?lane=all at 1,564 px)."""
    load_catalog_labels()
    load_demo_issues()
    issues = list(Issue.objects.order_by("number"))
    meeting = Meeting.objects.create(chair=chair)
    first = issues[0]
    AgendaItem.objects.create(meeting=meeting, issue=first, owner=chair, note="a long note " * 30)
    TriageDecision.objects.create(
        issue=first, user=chair, meeting=meeting, meeting_decision="triaged", status="failed", result_message="x" * 400
    )
    BisectionRun.objects.create(issue=first, repro_code="import torch", status="done", verdict_summary="v " * 200)
    page = make_page(chair.username)
    wide = []
    for width, paths in (
        (1280, _every_page(issues, meeting)),
        (800, ["/?lane=all", "/?lane=pt2", "/?lane=review"] + [i.get_absolute_url() for i in issues]),
    ):
        _sized(page, width)
        for path in paths:
            page.goto(path)
            scroll, client = page.evaluate(
                "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
            )
            if scroll > client:
                wide.append((width, path, scroll))
    assert len(_every_page(issues, meeting)) > 60
    assert wide == []


@pytest.mark.worker
def test_it_keeps_a_decided_card_undoes_within_the_window_and_records_the_minutes(
    transactional_db, celery_worker_process, fake_github, chair, triager, make_page, settings
):
    settings.MEETING_UNDO_SECONDS = 4
    flagged = ("oncall: pt2", "module: inductor", "triage review")
    for n, title in ((5361, "Segfault in a generated kernel"), (5362, "Wrong results on inductor")):
        _issue_on_both(fake_github, n, title, labels=flagged, suggest=(("triage review", "R11"),))
    page = _sized(make_page(chair.username), 1280)
    page.goto("/meeting")
    page.click("[data-start-meeting]")
    page.fill("#item-notes-5361 input[name=owner]", triager.username)
    page.fill("#item-notes-5361 textarea[name=note]", "bisect on an H100 and report back")
    page.click("#item-notes-5361 [data-save-item]")
    page.wait_for_selector("#item-notes-5361 [data-item-saved]")

    page.click('#agenda-item-5361 button[value="low priority"]')
    page.wait_for_selector("#agenda-item-5361[data-decided] [data-undo]")
    card = page.inner_text("#agenda-item-5361")
    assert "#5361 Segfault in a generated kernel" in card and "bisect on an H100" in card
    page.click("#agenda-item-5361 [data-undo]")
    _wait_for_status(page, "undone", "#agenda-item-5361")
    assert "#5361 Segfault in a generated kernel" in page.inner_text("#agenda-item-5361")

    page.click('#agenda-item-5362 button[value="needs reproduction"]')
    assert "#5362 Wrong results on inductor" in page.inner_text("#agenda-item-5362")
    _wait_for_recorded(page, 5362, "applied")  # not undone: written once its window is over, and the card left
    assert page.locator("#agenda-item-5362").count() == 0
    assert fake_github.labels_of(5362) == ["module: inductor", "needs reproduction", "oncall: pt2"]
    assert fake_github.labels_of(5361) == sorted(flagged)  # undone: nothing was written, the countdown passed
    assert TriageDecision.objects.get(issue__number=5361).status == "undone"

    page.reload()
    assert page.locator("#agenda-item-5361:not([data-decided])").count() == 1  # undone: back on the agenda
    minutes = page.request.get(page.get_attribute("a[download]", "href")).text()
    row = (
        "| #5361 | `Segfault in a generated kernel` | low priority | `carl-chair` | `tina-triager` | bisect on an H100"
    )
    assert row + " and report back | undone" in minutes
