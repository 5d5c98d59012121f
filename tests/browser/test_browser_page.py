"""The page does what the keys say (issue 43), in Chromium at 1280x800 and at 800 px wide: a queue row's preview is a
form to untick or add a label from the keyboard before Enter applies exactly what is ticked; `b` shows the run it
started; the issue page's triage form is above the fold; a refusal wraps in the queue and never covers the route radios
it asks for on the issue page; the lane URL follows every swap and Back restores the lane; the Age column keeps its
words whole (the meeting's cards: test_browser_meeting.py).

Applies go through the real worker to the fake GitHub server (tests/browser/test_browser_triage.py).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from rubric_app.models import BisectionRun, TriageDecision
from tests.browser.conftest import screenshot
from tests.browser.test_browser_flow import LONG_BODY, _in_window, _not_reloaded, _sized, _still_the_same_document
from tests.browser.test_browser_triage import _issue_on_both, _wait_for_status
from tests.factories import make_issue, make_label, make_suggestion

pytestmark = [pytest.mark.browser]

WIDTHS = [1280, 800]
SUGGEST = (("module: dynamo", "R1.2"), ("module: dynamic shapes", "R1.1"))


def _no_sideways_scroll(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")


def _rect(page, selector: str) -> dict:
    return page.evaluate(
        "s => { const r = document.querySelector(s).getBoundingClientRect();"
        " return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; }",
        selector,
    )


def _plan(page, number: int) -> list[str]:
    return page.inner_text(f"#queue-plan-{number} .plan").split("\n")


@pytest.mark.worker
@pytest.mark.parametrize("width", WIDTHS)
def test_it_edits_a_queue_rows_preview_from_the_keyboard_and_applies_exactly_what_is_ticked(
    transactional_db, celery_worker_process, fake_github, triager, make_page, width
):
    _issue_on_both(fake_github, 4301, "Graph break, then a segfault in the compiled graph", suggest=SUGGEST)
    for name in ("module: crash", "module: inductor"):
        fake_github.add_label(name)
        make_label(name)
    page = _sized(make_page(triager.username), width)
    page.goto("/")
    _not_reloaded(page)
    page.keyboard.press("j")
    page.keyboard.press("a")
    page.wait_for_selector("#apply-preview-4301 [data-queue-edit] [data-apply]")
    assert _plan(page, 4301) == ["+ module: dynamic shapes", "+ module: dynamo", "+ triaged"]
    # The keys reach the preview's boxes: the first has the focus, Space unticks it and the plan follows.
    first = "#apply-preview-4301 [data-queue-labels] input[type=checkbox]"
    assert page.evaluate(f"document.activeElement === document.querySelector('{first}')")
    unticked = page.get_attribute(first, "value")
    page.keyboard.press(" ")
    page.wait_for_function(f"!document.querySelector('#queue-plan-4301').innerText.includes('{unticked}')")
    # `l` reaches the label picker: "crash" and Enter picks `module: crash` (a ticked box), the plan follows.
    page.keyboard.press("l")
    page.keyboard.type("crash")
    page.keyboard.press("Enter")
    picked = '#apply-preview-4301 [data-picked] input[value="module: crash"]'
    page.wait_for_selector(picked)
    assert page.is_checked(picked) and page.input_value("#q4301-add_labels") == ""
    page.wait_for_function("document.querySelector('#queue-plan-4301').innerText.includes('+ module: crash')")
    kept = "module: dynamo" if unticked == "module: dynamic shapes" else "module: dynamic shapes"
    assert _plan(page, 4301) == ["+ module: crash", f"+ {kept}", "+ triaged"]
    assert _in_window(page, "#apply-preview-4301 [data-apply]") and _no_sideways_scroll(page)
    screenshot(page, f"queue-edit-preview-{width}")
    # Enter on the emptied picker applies: exactly what is ticked, nothing else.
    page.keyboard.press("Enter")
    _wait_for_status(page, "applied", "#apply-preview-4301")
    assert fake_github.labels_of(4301) == sorted(["module: crash", kept, "oncall: pt2", "triaged"])
    decision = TriageDecision.objects.get()
    assert decision.labels_added == sorted(["module: crash", kept, "triaged"])
    assert _still_the_same_document(page)


@pytest.mark.parametrize("width", WIDTHS)
def test_it_wraps_a_refusal_in_the_queue_and_lets_the_triager_tick_past_it(transactional_db, triager, make_page, width):
    """G4's refusal (nothing pre-selected: `triaged` alone) wraps inside the table; ticking the possible label in the
    same preview turns it into a plan (the issue measured the queue 1,600 px wide at 1280 and at 800)."""
    issue = make_issue(4302, title="A crash nobody has a component for yet", suggested_route="pt2")
    make_label("module: inductor")
    make_suggestion(issue, "module: inductor", "R2.2", confidence=0.4, preselected=False, evidence="kernel")
    page = _sized(make_page(triager.username), width)
    page.goto("/")
    page.keyboard.press("j")
    page.keyboard.press("a")
    page.wait_for_selector("#apply-preview-4302 [data-form-errors]")
    assert "G4" in page.inner_text("#apply-preview-4302 [data-form-errors]")
    assert _no_sideways_scroll(page), page.evaluate("document.documentElement.scrollWidth")
    assert _rect(page, "#apply-preview-4302 [data-form-errors]")["right"] <= width
    screenshot(page, f"queue-refusal-{width}")
    page.keyboard.press(" ")  # the possible label, ticked from the keyboard
    page.wait_for_selector("#apply-preview-4302 [data-apply]")
    assert _plan(page, 4302) == ["+ module: inductor", "+ triaged"]


@pytest.mark.parametrize("width", WIDTHS)
def test_it_never_covers_the_route_radios_with_the_refusal_that_asks_for_them(
    transactional_db, triager, make_page, width
):
    """G5: the rubric suggests a hand-off that is only possible; `a` is refused and says to pick that route. The
    refusal sits under the form (not stuck over it), in the window with the radios."""
    make_label("oncall: export")
    issue = make_issue(4303, title="torch.export drops a buffer", body=LONG_BODY, suggested_route="handoff")
    make_suggestion(issue, "oncall: export", "G5", confidence=0.6, preselected=False, evidence="torch.export")
    page = _sized(make_page(triager.username), width)
    page.goto("/issues/4303")
    page.keyboard.press("a")
    page.wait_for_selector("#apply-preview-4303 [data-form-errors]")
    assert "G5" in page.inner_text("#apply-preview-4303 [data-form-errors]")
    assert _in_window(page, "#apply-preview-4303 [data-form-errors]")
    refusal, radios = _rect(page, "#apply-preview-4303"), _rect(page, "#triage-form fieldset.route")
    assert radios["bottom"] <= refusal["top"] and radios["top"] >= 0  # both seen, one above the other
    assert page.evaluate("getComputedStyle(document.querySelector('#apply-preview-4303')).position") == "static"
    screenshot(page, f"issue-refusal-{width}")
    page.check('#triage-form input[name=route][value="handoff"]')  # what it asks for, in sight
    page.select_option("#triage-form select[name=handoff_to]", "oncall: export")
    page.wait_for_selector("#apply-preview-4303 [data-apply]")


def test_it_shows_the_triage_form_above_the_fold_at_1280x800(transactional_db, triager, make_page):
    issue = make_issue(4304, title="Graph break in a long model", body=LONG_BODY, suggested_route="pt2")
    for label, rule in SUGGEST:
        make_label(label)
        make_suggestion(issue, label, rule, confidence=0.9, evidence="graph break", evidence_source="body")
    page = _sized(make_page(triager.username), 1280)
    page.goto("/issues/4304")
    form, first = _rect(page, "#triage-form"), _rect(page, "#triage-form tr.suggestion")
    assert form["top"] < 400 and first["bottom"] < 800  # the form and its first suggestion, without scrolling
    assert form["right"] - form["left"] > 550  # a column as wide as the text's, not a narrow one
    screenshot(page, "issue-above-the-fold-1280")


@pytest.mark.parametrize("width", WIDTHS)
def test_it_shows_the_run_that_b_started_where_the_eye_is(transactional_db, triager, make_page, width):
    repro = "```python\nimport torch\n\ndef f(x):\n    return x.sin()\n\ntorch.compile(f)(torch.randn(3))\n```"
    issue = make_issue(4305, title="Graph break in a long model", body=f"{LONG_BODY}\n\n{repro}")
    page = _sized(make_page(triager.username), width)
    page.goto(issue.get_absolute_url())
    assert _rect(page, "#bisection")["top"] > 1000  # far below the fold, where the issue found nothing happening
    page.keyboard.press("b")
    page.wait_for_selector('#bisection-current[data-run-status="queued"]')
    assert _in_window(page, "#bisection-current")
    assert page.evaluate("document.activeElement.id") == "bisection-current"
    assert BisectionRun.objects.get().issue == issue
    screenshot(page, f"issue-bisect-b-{width}")


@pytest.mark.parametrize("width", WIDTHS)
def test_it_follows_every_lane_swap_in_the_url_and_restores_the_lane_on_back(
    transactional_db, triager, make_page, width
):
    make_issue(4306, title="In the CPU lane", labels=("oncall: cpu inductor",))
    make_issue(4307, title="In the PT2 lane")
    make_issue(4308, title="Flagged for the meeting", labels=("oncall: pt2", "triage review"))
    page = _sized(make_page(triager.username), width)
    page.goto("/")
    _not_reloaded(page)

    def shown() -> tuple[str, str, list[str]]:
        lane = page.url.split("lane=")[1].split("&")[0]
        checked = page.evaluate("document.querySelector('#queue-filters input[name=lane]:checked').value")
        rows = page.eval_on_selector_all("[data-issue-row]", "rows => rows.map(r => r.dataset.issueRow)")
        return lane, checked, sorted(rows)

    expected = {"cpu": ["4306"], "all": ["4306", "4307", "4308"], "review": ["4308"], "pt2": ["4307", "4308"]}
    for lane in ("cpu", "all", "review", "pt2"):
        page.click(f"label.lane:has(input[value={lane}])")
        page.wait_for_url(f"**/?lane={lane}*")  # this click's lane, not the one before
        page.wait_for_function(
            "n => document.querySelectorAll('[data-issue-row]').length === n", arg=len(expected[lane])
        )
        assert shown() == (lane, lane, expected[lane])
    for lane in ("review", "all", "cpu"):
        page.go_back()
        page.wait_for_url(f"**/?lane={lane}*")
        page.wait_for_function(
            "n => document.querySelectorAll('[data-issue-row]').length === n", arg=len(expected[lane])
        )
        assert shown() == (lane, lane, expected[lane])  # the lane highlighted is the lane shown
    page.click("label.lane:has(input[value=pt2])")  # and the next click swaps from there
    page.wait_for_url("**/?lane=pt2*")
    assert _still_the_same_document(page)


@pytest.mark.parametrize("width", WIDTHS)
def test_it_never_breaks_an_age_inside_a_word(transactional_db, triager, make_page, width):
    now = timezone.now()
    for n, days in ((4311, 3), (4312, 17), (4313, 400)):
        make_issue(n, title="a title long enough to squeeze the columns " * 4, created_at=now - timedelta(days=days))
    page = _sized(make_page(triager.username), width)
    page.goto("/")
    # Every age shown (the column at 1280, under the title at 800) sits on one line: no word cut in two.
    lines = page.eval_on_selector_all(
        "td.age, .opened-narrow",
        """els => els.filter(e => e.offsetParent).map(e => {
             const r = document.createRange(); r.selectNodeContents(e);
             return [e.textContent.trim(), new Set(Array.from(r.getClientRects()).map(x => Math.round(x.top))).size];
           })""",
    )
    assert lines and all(count == 1 for _, count in lines), lines
