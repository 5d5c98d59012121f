"""Similar issues in a real browser: closing a possible duplicate from the issue page with `d` and Enter (its open
original labelled as the group route does), and one decision for the issues sharing a failure, from the queue, through
the real Celery worker to the fake GitHub (and the group again without JavaScript)."""

from __future__ import annotations

import pytest

from rubric_app.models import GitHubWrite, Issue, TriageDecision
from rubric_app.triage import followups
from tests.browser.conftest import screenshot
from tests.factories import make_issue, make_label
from tests.helpers import wait_until
from tests.rubric.test_signature import _lowering

pytestmark = [pytest.mark.browser, pytest.mark.worker]
LABELS = ("oncall: pt2", "module: dynamic shapes", "module: inductor", "triaged", "triage review")


def _reports(fake, numbers) -> list[Issue]:
    """Reports of one Inductor lowering failure (other shapes and paths each), on the fake GitHub and in the
    dashboard, indexed, with suggestions and possible-duplicate marks as a sync's page leaves them."""
    for name in LABELS:
        fake.add_label(name)
        make_label(name)
    issues = []
    for i, number in enumerate(numbers):
        title, body = (
            f"Audio model {i} fails on the second call",
            "It breaks when the length changes.\n\n" + _lowering(b=2 + i, s=i),
        )
        fake.add_issue(number, title=title, body=body, labels=["oncall: pt2"])
        issues.append(make_issue(number, title=title, body=body))
    followups.issues_changed([issue.pk for issue in issues], "sync")
    return issues


def test_it_closes_a_possible_duplicate_with_d_then_enter(
    transactional_db, celery_worker_process, fake_github, triager, make_page
):
    _reports(fake_github, [5101, 5102])
    page = make_page(triager.username)
    page.goto("/issues/5102")
    assert "same failure signature" in page.locator('[data-similar="5101"]').inner_text()
    assert "AssertionError: expected a static pad amount" in page.inner_text("[data-signature]")
    mark = page.locator('[data-possible-duplicate="5101"]')
    assert "Possible duplicate of #5101" in mark.inner_text() and "same failure signature" in mark.inner_text()

    page.keyboard.press("d")  # the preview of the close, nothing more
    preview = page.locator("#apply-preview-5102 .plan").first
    preview.wait_for()
    assert "close as duplicate of #5101" in preview.inner_text() and "duplicate" in page.get_attribute(
        "[data-reply]", "data-reply"
    )
    # #5101 is open in the queue: the labels ticked on #5102 go to it, in a decision of its own (the group route's).
    ticked = page.eval_on_selector_all('#triage-form input[name="labels"]:checked', "boxes => boxes.map(b => b.value)")
    original = page.locator('[data-original-plan="5101"]').inner_text()
    assert ticked and all(f"+ {name}" in original for name in ticked)
    assert fake_github.issues[5102]["state"] == "open" and not TriageDecision.objects.exists()
    screenshot(page, "issue-duplicate-preview")
    page.keyboard.press("Enter")
    page.wait_for_selector('[data-decision-status="applied"]', timeout=30_000)
    wait_until(lambda: TriageDecision.objects.filter(status="applied").count() == 2, timeout=30)

    on_github = fake_github.issues[5102]
    assert (on_github["state"], on_github["state_reason"]) == ("closed", "duplicate")
    assert on_github["comments"][0]["body"].startswith("Duplicate of #5101")
    closed, labelled = TriageDecision.objects.get(issue__number=5102), TriageDecision.objects.get(issue__number=5101)
    assert [w.action for w in closed.writes.all()] == ["read_labels", "read_original", "comment", "close"]
    assert "add_label" in [w.action for w in labelled.writes.all()]
    assert set(ticked) <= set(fake_github.labels_of(5101)) and fake_github.issues[5101]["state"] == "open"
    assert "close as a duplicate of #5101" in page.inner_text("#apply-preview-5102")


def test_it_decides_once_for_every_issue_sharing_a_failure(
    transactional_db, celery_worker_process, fake_github, triager, make_page
):
    _reports(fake_github, [5201, 5202, 5203])
    page = make_page(triager.username)
    page.goto("/")
    group = page.locator("[data-group]")
    assert "3 open issues share this failure" in group.inner_text()
    screenshot(page, "queue-shared-failure")
    group.locator("a", has_text="share this failure").click()
    page.wait_for_selector("[data-member='5203']")
    page.check('input[name="labels"][value="module: dynamic shapes"]')
    # What goes to GitHub is what is ticked: the added label, and what the rubric pre-selected on all three.
    ticked = page.eval_on_selector_all('input[name="labels"]:checked', "boxes => boxes.map(b => b.value)")
    page.click("[data-group-preview]")
    page.wait_for_selector("[data-group-apply]")
    plans = page.locator("[data-plan]")
    assert plans.count() == 3 and all("+ module: dynamic shapes" in plans.nth(i).inner_text() for i in range(3))
    screenshot(page, "group-preview")

    page.click("[data-group-apply]")
    for number in (5201, 5202, 5203):
        page.wait_for_selector(f'[data-outcome="{number}"] [data-decision-status="applied"]', timeout=60_000)

    for number in (5201, 5202, 5203):
        assert fake_github.labels_of(number) == sorted({*ticked, "oncall: pt2", "triaged"})
        assert "module: dynamic shapes" in ticked
    assert TriageDecision.objects.filter(status="applied").count() == 3
    # Each issue's own writes, audited: its ticked labels and `triaged`.
    assert GitHubWrite.objects.filter(action="add_label", ok=True).count() == 3 * (len(ticked) + 1)


def test_it_decides_for_a_group_without_javascript(
    transactional_db, celery_worker_process, fake_github, triager, make_page
):
    issues = _reports(fake_github, [5301, 5302])
    page = make_page(triager.username, js=False)
    page.goto(f"/signatures/{Issue.objects.get(pk=issues[0].pk).signature}")
    page.check('input[name="route"][value="duplicate"]')
    page.fill('input[name="duplicate_of"]', "5301")
    page.click("[data-group-preview]")  # a plain form post: the whole page comes back with every plan
    # The labels "for all of them" (pre-ticked: the rubric pre-selects them on both) go to the original, left open.
    assert "+ module: inductor" in page.inner_text('[data-plan="5301"]')
    page.click("[data-group-apply]")  # posts, then redirects back to the group (PRG)
    page.wait_for_url("**/signatures/*")
    assert "2 decisions queued, 0 refused" in page.inner_text(".messages")
    wait_until(lambda: TriageDecision.objects.filter(status="applied").count() == 2, timeout=30)
    page.reload()
    assert fake_github.issues[5302]["state_reason"] == "duplicate" and fake_github.issues[5301]["state"] == "open"
    assert "module: inductor" in fake_github.labels_of(5301)
    # #5302 left the queue: listed with the same failure elsewhere, closed; #5301 stays, the only member.
    assert page.locator("[data-member]").count() == 1 and "#5302" in page.inner_text(".similar")
