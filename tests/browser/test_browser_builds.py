"""Torch builds in a real browser (issue #29): a repro run on two builds from the bisection form shows a regression
side by side; an issue whose repro passes on a newer build is found in the "may be fixed" lane and its reporter is
asked to confirm, through the real worker to the fake GitHub.

The session's worker hosts two builds (tests/conftest.py): "default", torch 2.13.0, and "nightly", a second
virtualenv whose Inductor refuses torch.sin (tests/torch_builds.py).
"""

from __future__ import annotations

import pytest

from rubric_app.models import BisectionRun, Issue, WorkerHeartbeat
from rubric_app.runs import build_checks
from tests.browser.conftest import screenshot
from tests.factories import INDUCTOR_RAISED, PASSED, make_finished_run, make_issue, make_label
from tests.helpers import wait_until
from tests.torch_builds import NEWER_VERSION, SIN_REPRO

pytestmark = [pytest.mark.browser, pytest.mark.worker]

COS_REPRO = "import torch\n\ndef f(x):\n    return torch.cos(x) + 1\n\nprint(torch.compile(f)(torch.randn(8)))\n"


@pytest.mark.torch
def test_it_bisects_on_two_builds_and_shows_the_regression_side_by_side(
    transactional_db, celery_worker_process, triager, make_page
):
    for name in ("oncall: pt2", "triage review", "module: regression", "module: inductor"):
        make_label(name)
    make_issue(6300, title="sin no longer compiles on the nightly", body=f"```python\n{SIN_REPRO}```")
    # The worker's next beat after the previous test's flush: the form offers the builds the live workers host.
    wait_until(lambda: WorkerHeartbeat.objects.hosted_builds()["cpu"].get("nightly") == NEWER_VERSION)
    page = make_page(triager.username)
    page.goto("/issues/6300")
    builds = page.locator("[data-builds]")
    assert f"nightly (torch {NEWER_VERSION})" in builds.inner_text()
    builds.locator('input[value="default"]').check()
    builds.locator('input[value="nightly"]').check()
    page.click("[data-bisect]")
    page.wait_for_selector(
        '#bisection-current[data-run-status="queued"], #bisection-current[data-run-status="running"]'
    )
    runs = BisectionRun.objects.filter(issue__number=6300)
    wait_until(lambda: runs.filter(status__in=["done", "failed"]).count() == 2, timeout=240)
    page.goto("/issues/6300")
    comparison = page.locator("#build-comparison")
    assert comparison.get_attribute("data-build-finding") == "regression"
    assert "regression (R11)" in comparison.text_content()
    rows = comparison.locator("[data-build-run]")
    assert [rows.nth(i).get_attribute("data-build-run") for i in range(2)] == ["default", "nightly"]
    assert [rows.nth(i).get_attribute("class") for i in range(2)] == ["outcome-passed", "outcome-reproduced"]
    screenshot(page, "issue-builds-regression")
    page.goto("/?lane=all")
    assert page.locator('[data-issue-row="6300"] [data-build-finding="regression"]').count() == 1


def test_it_asks_the_reporter_of_a_may_be_fixed_issue_to_confirm_from_its_lane(
    transactional_db, celery_worker_process, fake_github, triager, make_page
):
    fake_github.add_issue(6301, title="cos miscompiles", labels=["oncall: pt2"])
    issue = make_issue(6301, title="cos miscompiles", body=f"```python\n{COS_REPRO}```")
    make_finished_run(issue, code=COS_REPRO, build="default", results=INDUCTOR_RAISED, ago=30)
    make_finished_run(issue, code=COS_REPRO, build="nightly", version=NEWER_VERSION, results=PASSED, ago=10)
    build_checks.compare_issue(issue)
    page = make_page(triager.username)
    page.goto("/?lane=fixed")
    row = page.locator('[data-issue-row="6301"]')
    assert row.locator('[data-build-finding="may_be_fixed"]').text_content().strip() == "may be fixed"
    row.locator("a.title").click()
    page.wait_for_url("**/issues/6301")
    page.check('input[name=route][value="confirm fixed"]')  # a change previews it
    page.wait_for_selector('#apply-preview-6301 [data-reply="confirm_fixed"]')
    screenshot(page, "issue-may-be-fixed-preview")
    page.click("#apply-preview-6301 [data-apply]")
    page.wait_for_selector('#apply-preview-6301 [data-decision-status="applied"]', timeout=30_000)
    on_github = fake_github.issues[6301]
    assert f"no longer fails on torch {NEWER_VERSION}" in on_github["comments"][0]["body"]
    assert on_github["state"] == "open" and on_github["labels"] == ["oncall: pt2"]
    page.goto("/?lane=fixed")
    assert page.locator('[data-issue-row="6301"]').count() == 0  # asked: out of the lane
    assert Issue.objects.get(number=6301).build_finding == "may_be_fixed"
