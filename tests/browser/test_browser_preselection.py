"""Pre-selected vs possible labels in a real browser: `a` accepts exactly the ticked, pre-selected set.

The engine ticks only labels whose calibrated confidence clears the pre-selection threshold; the others
are shown unticked as "possible", with their evidence. `j a Enter` from the queue, and `a` on the issue
page after ticking a possible label by hand, must both apply the pre-selected labels only.
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import screenshot
from tests.factories import make_issue, make_label, make_suggestion

pytestmark = [pytest.mark.browser, pytest.mark.worker]

CATALOG = ("oncall: pt2", "module: dynamo", "module: inductor", "triaged", "triage review")


def _issue(fake, number: int) -> None:
    """An issue whose suggestions are one pre-selected component and one possible one."""
    for name in CATALOG:
        fake.add_label(name)
        make_label(name)
    title, body = (
        "Graph break on a generator, then a wrong kernel?",
        "Compiling this model hits a graph break on every step.",
    )
    fake.add_issue(number, title=title, body=body, labels=["oncall: pt2"])
    issue = make_issue(number, title=title, body=body, labels=("oncall: pt2",), suggested_route="pt2")
    make_suggestion(
        issue,
        "module: dynamo",
        "R1.2",
        confidence=0.93,
        preselected=True,
        evidence="graph break",
        evidence_source="body",
        reason="graph breaks belong to Dynamo",
    )
    make_suggestion(
        issue,
        "module: inductor",
        "R2.2",
        confidence=0.41,
        preselected=False,
        evidence="kernel",
        evidence_source="title",
        reason="Inductor code generation is involved",
    )


PLAN_HAS_INDUCTOR = """(want) => { const plan = document.querySelector('#apply-preview-5103 .plan');
    return !!plan && plan.innerText.includes('module: inductor') === want; }"""


def _wait_applied(page, scope: str) -> None:
    page.wait_for_selector(f'{scope} [data-decision-status="applied"]', timeout=30_000)


def test_it_shows_pre_selected_and_possible_labels_with_their_confidence(
    transactional_db, fake_github, triager, make_page
):
    _issue(fake_github, 5101)
    page = make_page(triager.username)
    page.goto("/issues/5101")
    assert page.is_checked('input[name=labels][value="module: dynamo"]')
    assert not page.is_checked('input[name=labels][value="module: inductor"]')
    possible = page.locator("tr.suggestion.possible")
    assert possible.count() == 1 and "module: inductor" in possible.inner_text() and "41%" in possible.inner_text()
    assert "possible" in possible.inner_text()
    assert "93%" in page.locator("tr.suggestion.preselected").inner_text()
    screenshot(page, "issue-preselected")


def test_it_applies_only_the_pre_selected_labels_with_j_a_enter(
    transactional_db, celery_worker_process, fake_github, triager, make_page
):
    _issue(fake_github, 5102)
    page = make_page(triager.username)
    page.goto("/")
    page.keyboard.press("j")
    assert page.get_attribute("tr.selected", "data-issue-row") == "5102"
    page.keyboard.press("a")
    page.wait_for_selector("#apply-preview-5102 [data-apply]")
    assert page.inner_text("#apply-preview-5102 .plan").split("\n") == ["+ module: dynamo", "+ triaged"]
    page.keyboard.press("Enter")
    _wait_applied(page, "#apply-preview-5102")
    assert fake_github.labels_of(5102) == ["module: dynamo", "oncall: pt2", "triaged"]


def test_it_resets_a_hand_ticked_possible_label_when_a_accepts(
    transactional_db, celery_worker_process, fake_github, triager, make_page
):
    _issue(fake_github, 5103)
    page = make_page(triager.username)
    page.goto("/issues/5103")
    page.check('input[name=labels][value="module: inductor"]')
    # The form previews on change: wait for that preview, so the next one is surely `a`'s.
    page.wait_for_function(PLAN_HAS_INDUCTOR, arg=True)
    page.evaluate("document.activeElement.blur()")  # keys typed into a form field are not shortcuts
    page.keyboard.press("a")
    page.wait_for_function(PLAN_HAS_INDUCTOR, arg=False)
    assert not page.is_checked('input[name=labels][value="module: inductor"]')
    assert page.inner_text("#apply-preview-5103 .plan").split("\n") == ["+ module: dynamo", "+ triaged"]
    page.keyboard.press("Enter")
    _wait_applied(page, "#apply-preview-5103")
    assert fake_github.labels_of(5103) == ["module: dynamo", "oncall: pt2", "triaged"]
