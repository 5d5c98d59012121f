"""The keyboard path of the issue page and the queue: what is shown ticked when Enter is pressed is
what goes to GitHub, whatever the order of a (accept), r (review flag) and Enter, typed slowly or fast.

Applies go through the real worker to the fake GitHub server, as in test_browser_triage.
"""

from __future__ import annotations

import pytest

from rubric_app.models import TriageDecision
from tests.browser.test_browser_triage import _issue_on_both, _wait_for_status

pytestmark = [pytest.mark.browser, pytest.mark.worker]

SUGGEST = (("module: dynamo", "R1.2"), ("module: dynamic shapes", "R1.1"))


def _shown(page) -> tuple[list[str], bool]:
    """The triage form as the triager sees it: the ticked labels and the review box."""
    labels = page.eval_on_selector_all("#triage-form input[name=labels]:checked", "boxes => boxes.map(b => b.value)")
    return sorted(labels), page.is_checked("#triage-form input[name=review]")


def _assert_applied_as_shown(page, fake, number: int, shown: tuple[list[str], bool]) -> None:
    _wait_for_status(page, "applied", f"#apply-preview-{number}")
    labels, review = shown
    decision = TriageDecision.objects.get(issue__number=number)
    on_github = fake.labels_of(number)
    for name in ("module: dynamo", "module: dynamic shapes"):
        assert (name in decision.labels_added) == (name in labels), (shown, decision.labels_added)
        assert (name in on_github) == (name in labels), (shown, on_github)
    # R11: flagged for the meeting instead of triaged, exactly when the box was ticked.
    assert ("triage review" in on_github) == review and ("triaged" in on_github) == (not review), (shown, on_github)


def test_it_applies_the_review_flag_ticked_with_r_after_a(
    transactional_db, celery_worker_process, fake_github, triager, make_page
):
    _issue_on_both(fake_github, 5101, "Graph break under dynamic shapes", suggest=SUGGEST)
    page = make_page(triager.username)
    page.goto("/issues/5101")
    page.keyboard.press("a")
    page.wait_for_selector("#apply-preview-5101 [data-apply]")
    page.keyboard.press("r")
    assert page.is_checked("#triage-form input[name=review]")
    # The preview follows the box: the review flag, and no `triaged` (R11).
    page.wait_for_selector("#apply-preview-5101 .plan >> text=+ triage review")
    assert "+ triaged" not in page.inner_text("#apply-preview-5101")
    shown = _shown(page)
    page.keyboard.press("Enter")
    _assert_applied_as_shown(page, fake_github, 5101, shown)
    assert shown[1] is True


@pytest.mark.parametrize(
    "keys",
    [
        ["a", "r", "Enter"],
        ["r", "a", "Enter"],
        ["a", "r", "r", "Enter"],
        ["r", "a", "r", "Enter"],
        ["a", "Enter"],
    ],
)
def test_it_applies_what_is_shown_for_keys_typed_without_waiting(
    transactional_db, celery_worker_process, fake_github, triager, make_page, keys
):
    """No pause between keys: Enter must not apply a preview the later keys already made stale."""
    _issue_on_both(fake_github, 5102, "Recompiles on every call", suggest=SUGGEST)
    page = make_page(triager.username)
    page.goto("/issues/5102")
    for key in keys[:-1]:
        page.keyboard.press(key)
    shown = _shown(page)
    page.keyboard.press("Enter")
    _assert_applied_as_shown(page, fake_github, 5102, shown)
    review = False  # not suggested here: `a` brings the box back to unticked, `r` toggles it
    for key in keys[:-1]:
        review = (not review) if key == "r" else False
    assert shown[1] == review


def test_it_shows_the_suggestions_again_when_accept_is_clicked(
    transactional_db, celery_worker_process, fake_github, triager, make_page
):
    """The mouse's Accept shows what it applies: the boxes return to the suggestions, then r and Enter."""
    _issue_on_both(fake_github, 5103, "Graph break in a generator", suggest=SUGGEST)
    page = make_page(triager.username)
    page.goto("/issues/5103")
    page.click('#triage-form input[value="module: dynamo"]')  # untick one suggestion
    page.wait_for_selector("#apply-preview-5103 .plan")
    page.click("#triage-form [data-accept]")
    page.wait_for_selector("#apply-preview-5103 .plan >> text=+ module: dynamo")
    assert _shown(page) == (["module: dynamic shapes", "module: dynamo"], False)
    page.keyboard.press("r")
    page.wait_for_selector("#apply-preview-5103 .plan >> text=+ triage review")
    shown = _shown(page)
    page.keyboard.press("Enter")
    _assert_applied_as_shown(page, fake_github, 5103, shown)
    assert shown[1] is True


def test_it_applies_from_the_queue_with_j_a_enter_typed_without_waiting(
    transactional_db, celery_worker_process, fake_github, triager, make_page
):
    _issue_on_both(fake_github, 5104, "Graph break on a dict comprehension", suggest=SUGGEST)
    page = make_page(triager.username)
    page.goto("/")
    for key in ("j", "a", "Enter"):
        page.keyboard.press(key)
    _wait_for_status(page, "applied", "#apply-preview-5104")
    assert fake_github.labels_of(5104) == ["module: dynamic shapes", "module: dynamo", "oncall: pt2", "triaged"]
