"""The triager's week, third pass (issue 53), in Chromium at 1280×800 and 800 px wide, on the demo's own issues synced
from the fake GitHub: `a` on #170116 previews and applies G2's transfer; in the queue `r` flags review and the Hold is
lifted or answered with `low priority` from the row, exactly the preview applied; the meeting card keeps the suggested
component beside `module: crash` (#170092); the picker finds "correctness"; one preview open after `j`; /history
within the window; rule ids whole at 800 px; no htmx error logged leaving a page with a poll in flight.

Applies go through the real worker to the fake GitHub server.
"""

from __future__ import annotations

import pytest

from rubric_app.models import TriageDecision
from tests.browser.conftest import screenshot
from tests.browser.test_browser_flow import _not_reloaded, _sized, _still_the_same_document
from tests.browser.test_browser_triage import _wait_for_recorded, _wait_for_status
from tests.factories import make_issue
from tests.helpers import demo_synced

pytestmark = [pytest.mark.browser]

WIDTHS = [1280, 800]


def _plan(page, number: int) -> list[str]:
    return page.inner_text(f"#queue-plan-{number} .plan").split("\n")


def _wait_plan(page, number: int, text: str, present: bool = True) -> None:
    page.wait_for_function(
        "([s, t, want]) => { const p = document.querySelector(s); return !!p && p.innerText.includes(t) === want; }",
        arg=[f"#queue-plan-{number} .plan", text, present],
    )


def _select(page, number: int) -> None:
    """j until the row of `number` is selected."""
    for _ in range(10):
        if page.locator(f'[data-issue-row="{number}"].selected').count():
            return
        page.keyboard.press("j")
    raise AssertionError(f"#{number} never selected")


def _within_window(page) -> bool:
    return page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")


@pytest.mark.worker
@pytest.mark.parametrize("width", WIDTHS)
def test_it_previews_and_applies_g2s_transfer_of_170116_with_a(
    transactional_db, celery_worker_process, fake_github, triager, make_page, tmp_path, width
):
    """#170116: "transfer this to the vision repo" (G2). `a` in the queue previews the transfer with its evidence, and
    Enter applies it; on the issue page the route is pre-selected as pytorch/vision."""
    demo_synced(fake_github, tmp_path, 170116)
    page = _sized(make_page(triager.username), width)
    page.goto("/issues/170116")
    assert page.is_checked('#triage-form input[name=route][value="transfer"]')
    assert page.input_value("#triage-form select[name=transfer_to]") == "pytorch/vision"
    page.goto("/?lane=all")
    _not_reloaded(page)
    _select(page, 170116)
    page.keyboard.press("a")
    page.wait_for_selector("#apply-preview-170116 [data-apply]")
    assert _plan(page, 170116) == ["transfer to pytorch/vision (G2: it leaves this queue)"]
    assert "transfer this to the vision repo" in page.inner_text("#apply-preview-170116 [data-route-evidence]")
    assert _within_window(page)
    screenshot(page, f"queue-transfer-{width}")
    page.keyboard.press("Enter")
    _wait_for_status(page, "applied", "#apply-preview-170116")
    assert fake_github.transferred[170116][0] == "pytorch/vision"
    assert _still_the_same_document(page)


@pytest.mark.worker
@pytest.mark.parametrize("width", WIDTHS)
def test_it_flags_review_with_r_from_the_queue_row_and_applies_exactly_the_preview(
    transactional_db, celery_worker_process, fake_github, triager, make_page, tmp_path, width
):
    """#170134: the Hold asks whether the slowdown is a regression (R11), never saying it is one. `r` on the row opens
    its preview with the review box ticked; the plan says so; Enter applies exactly that plan."""
    demo_synced(fake_github, tmp_path, 170134)
    page = _sized(make_page(triager.username), width)
    page.goto("/?lane=all")
    _not_reloaded(page)
    _select(page, 170134)
    page.keyboard.press("r")
    page.wait_for_selector("#apply-preview-170134 [data-apply]")
    _wait_plan(page, 170134, "+ triage review")
    asks = page.inner_text("#apply-preview-170134 [data-hold-asks]")
    assert "A performance regression?" not in asks and "slowdown" in asks
    assert page.is_checked("#q170134-review")
    plan = _plan(page, 170134)
    assert "+ triage review" in plan and "+ triaged" not in plan
    assert _within_window(page)
    screenshot(page, f"queue-review-{width}")
    page.keyboard.press("Enter")
    _wait_for_status(page, "applied", "#apply-preview-170134")
    decision = TriageDecision.objects.get()
    assert sorted(f"+ {n}" for n in decision.labels_added) + sorted(
        f"− {n}" for n in decision.labels_removed
    ) == sorted(plan)
    assert "triage review" in fake_github.labels_of(170134) and "triaged" not in fake_github.labels_of(170134)


@pytest.mark.worker
@pytest.mark.parametrize("width", WIDTHS)
def test_it_lifts_the_hold_or_answers_it_with_low_priority_from_the_queue_row(
    transactional_db, celery_worker_process, fake_github, triager, make_page, tmp_path, width
):
    """#170134's Hold lifted (untick it: `triaged`), and #170110's fuzzer Hold answered with `low priority` (R12.5):
    each from its row's preview, the plan following each box, Enter applying exactly it; the other row untouched."""
    demo_synced(fake_github, tmp_path, 170134, 170110)
    page = _sized(make_page(triager.username), width)
    page.goto("/?lane=all")
    _not_reloaded(page)
    _select(page, 170134)
    page.keyboard.press("a")
    page.wait_for_selector("#apply-preview-170134 [data-apply]")
    assert "+ triaged" not in _plan(page, 170134) and page.is_checked("#q170134-hold")
    page.click("#q170134-hold")  # lifted: marked triaged
    _wait_plan(page, 170134, "+ triaged")
    lifted = _plan(page, 170134)
    page.keyboard.press("Enter")
    _wait_for_status(page, "applied", "#apply-preview-170134")
    first = TriageDecision.objects.get(issue__number=170134)
    assert sorted(f"+ {n}" for n in first.labels_added) + sorted(f"− {n}" for n in first.labels_removed) == sorted(
        lifted
    )
    assert "triaged" in fake_github.labels_of(170134)

    _select(page, 170110)
    page.keyboard.press("a")
    page.wait_for_selector("#apply-preview-170110 [data-apply]")
    assert page.locator("#apply-preview-170110 [data-low-priority]").count() == 1
    page.click('#apply-preview-170110 [data-queue-labels] input[value="low priority"]')
    _wait_plan(page, 170110, "+ low priority")
    page.click("#q170110-hold")
    _wait_plan(page, 170110, "+ triaged")
    answered = _plan(page, 170110)
    assert {"+ low priority", "+ triaged"} <= set(answered)
    screenshot(page, f"queue-low-priority-{width}")
    page.keyboard.press("Enter")
    _wait_for_status(page, "applied", "#apply-preview-170110")
    second = TriageDecision.objects.get(issue__number=170110)
    assert sorted(f"+ {n}" for n in second.labels_added) == sorted(answered)
    assert {"low priority", "triaged"} <= set(fake_github.labels_of(170110))
    assert _still_the_same_document(page)


@pytest.mark.worker
@pytest.mark.parametrize("width", WIDTHS)
def test_it_keeps_the_suggested_component_beside_module_crash_on_the_meeting_card(
    transactional_db, celery_worker_process, fake_github, chair, make_page, tmp_path, width
):
    """#170092 (illegal memory access, R11): the chair picks `module: crash` on the card and decides `high priority`;
    the suggested component stays ticked, so the decision adds it too (a category label is no component, G4)."""
    demo_synced(fake_github, tmp_path, 170092, labels={170092: ["oncall: pt2", "triage review"]})
    page = _sized(make_page(chair.username), width)
    page.goto("/meeting")
    page.click("[data-start-meeting]")
    card = "#agenda-item-170092"
    assert page.is_checked(f"{card} [data-component]")
    component = page.get_attribute(f"{card} [data-component]", "value")
    assert component == "module: inductor"
    page.fill("#add_labels-170092", "crash")
    page.press("#add_labels-170092", "Enter")
    page.wait_for_selector(f'{card} [data-picked] input[value="module: crash"]')
    assert page.is_checked(f"{card} [data-component]")
    assert _within_window(page)
    screenshot(page, f"meeting-component-{width}")
    page.click(f'{card} button[value="high priority"]')
    _wait_for_recorded(page, 170092, "applied")
    assert fake_github.labels_of(170092) == ["high priority", "module: crash", component, "oncall: pt2", "triaged"]


@pytest.mark.parametrize("width", WIDTHS)
def test_it_finds_correctness_in_the_picker_and_offers_did_you_mean_for_a_near_miss(
    transactional_db, fake_github, triager, make_page, tmp_path, width
):
    demo_synced(fake_github, tmp_path, 170134)
    page = _sized(make_page(triager.username), width)
    page.goto("/?lane=all")
    _select(page, 170134)
    page.keyboard.press("a")
    page.wait_for_selector("#apply-preview-170134 [data-apply]")
    page.keyboard.press("l")
    page.keyboard.type("correctness")
    page.keyboard.press("Enter")
    page.wait_for_selector('#apply-preview-170134 [data-picked] input[value="module: correctness (silent)"]')
    _wait_plan(page, 170134, "+ module: correctness (silent)")
    page.keyboard.press("l")
    page.keyboard.type("numerical stabilty")
    page.keyboard.press("Enter")
    page.wait_for_selector("#queue-plan-170134 [data-form-errors]")
    refusal = page.inner_text("#queue-plan-170134 [data-form-errors]")
    assert "did you mean module: numerical-stability?" in refusal, refusal
    assert _within_window(page)


@pytest.mark.parametrize("width", WIDTHS)
def test_it_keeps_one_preview_open_after_j(transactional_db, fake_github, triager, make_page, tmp_path, width):
    demo_synced(fake_github, tmp_path, 170134, 170110)
    page = _sized(make_page(triager.username), width)
    page.goto("/?lane=all")
    _select(page, 170134)
    page.keyboard.press("a")
    page.wait_for_selector("#apply-preview-170134 [data-apply]")
    _select(page, 170110)
    assert page.locator("[data-apply]").count() == 0 and page.locator("[data-queue-edit]").count() == 0
    page.keyboard.press("a")
    page.wait_for_selector("#apply-preview-170110 [data-apply]")
    assert page.locator("[data-apply]").count() == 1 and page.locator("[data-queue-edit]").count() == 1


@pytest.mark.parametrize("width", WIDTHS)
def test_it_keeps_history_within_the_window_and_rule_ids_whole(transactional_db, viewer, make_page, width):
    make_issue(
        170900,
        title="torch.compile(mode='max-autotune') on a long_model_name_without_any_space_in_it_" + "x" * 80,
        labels=("oncall: pt2", "module: inductor", "module: correctness (silent)", "triaged", "high priority"),
        state="closed",
    )
    make_issue(170901, title="R12.5 fuzzer", labels=("topic: fuzzer", "triaged"), state="closed")
    make_issue(
        170902,
        title="Triaged, no module",
        labels=("oncall: pt2", "triaged"),
        checklist=[{"rule_id": "R12.5", "text": "complex and rare", "state": "violated"}],
    )
    page = _sized(make_page(viewer.username), width)
    page.goto("/history")
    page.wait_for_selector('[data-history="170900"]')
    assert _within_window(page), page.evaluate("document.documentElement.scrollWidth")
    screenshot(page, f"history-{width}")
    page.goto("/?lane=all")
    # Every rule id on the row sits on one line (R12.5 never broken as "R12." and "5").
    assert page.evaluate(
        "[...document.querySelectorAll('.rule, .rule-id')].every(el => el.getClientRects().length <= 1)"
    )


def test_it_logs_no_htmx_error_leaving_a_page_with_a_poll_in_flight(transactional_db, triager, make_page):
    """A decision's fragment polls every second. The poll out as the triager leaves ends with the page (an error to
    htmx, which logs it): nothing is logged once the page is leaving, and no new poll starts.

    Headless Chromium cancels a held request silently when the next page commits, so the request is ended here the
    way a browser or a proxy ends it while the page is going: after `beforeunload`, before the next page."""
    issue = make_issue(170950, title="Polled while leaving")
    TriageDecision.objects.create(issue=issue, user=triager, status="pending", labels_seen=["oncall: pt2"])
    page = make_page(triager.username)
    errors = []
    page.on("console", lambda message: message.type == "error" and errors.append(message.text))
    held = []
    page.route("**/decisions/**", lambda route: held.append(route))  # held by the network: in flight
    page.goto("/issues/170950")
    page.wait_for_function("document.querySelector('[data-decision-status]').classList.contains('htmx-request')")
    page.evaluate("window.dispatchEvent(new Event('beforeunload'))")  # the triager leaves
    held[0].abort()
    page.wait_for_timeout(1500)  # a poll would be due by now
    with page.expect_navigation():
        page.click("nav a[href='/history']")
    assert len(held) == 1 and not [e for e in errors if "htmx" in e], errors
