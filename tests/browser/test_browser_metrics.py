"""Queue health in a real browser: the charts render, their bars carry the numbers of the tables
beside them, and a decision applied from the dashboard (through the real worker and the fake
GitHub) moves the figures."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from rubric_app.models import Assignment, Duty, Issue, week_start
from tests.browser.conftest import screenshot
from tests.factories import make_issue, make_label, make_suggestion

pytestmark = [pytest.mark.browser, pytest.mark.worker]

SLUGS = ("open", "flow", "age", "triage", "triagers")


def _bars_and_cells(page, slug: str) -> tuple[dict, dict]:
    """{(category, series): value} of the chart's bars and of its table's cells."""
    bars = page.eval_on_selector_all(
        f'svg[data-chart="{slug}"] rect.bar',
        "els => els.map(e => [e.dataset.category, e.dataset.series, e.dataset.value])",
    )
    cells = page.eval_on_selector_all(
        f'table[data-table="{slug}"] td[data-series]',
        "els => els.map(e => [e.dataset.category, e.dataset.series, e.textContent.trim()])",
    )
    as_number = lambda text: 0.0 if text == "–" else float(text)  # noqa: E731 - "–": nothing triaged that week
    return ({(c, s): float(v) for c, s, v in bars}, {(c, s): as_number(v) for c, s, v in cells})


def _figure(page, name: str) -> str:
    return page.inner_text(f'.headline [data-figure="{name}"]')


def test_it_charts_the_queue_and_a_decision_moves_the_figures(
    transactional_db, celery_worker_process, fake_github, triager, make_page
):
    now = timezone.now()
    for name in ("oncall: pt2", "module: dynamo", "triaged", "triage review"):
        fake_github.add_label(name)
        make_label(name)
    for number, days in [(7001, 2), (7002, 12), (7003, 45), (7004, 200)]:
        make_issue(number, title=f"graph break {number}", created_at=now - timedelta(days=days))
    make_issue(
        7005, created_at=now - timedelta(days=20), state="closed", in_queue=False, closed_at=now - timedelta(days=3)
    )
    fake_github.add_issue(7001, title="graph break 7001", labels=["oncall: pt2"])
    issue = Issue.objects.get(number=7001)
    make_suggestion(
        issue,
        "module: dynamo",
        "R1.2",
        confidence=0.9,
        evidence="graph break",
        evidence_source="title",
        reason="graph breaks belong to Dynamo",
    )

    page = make_page(triager.username)
    page.goto("/metrics")
    for slug in SLUGS[:4]:
        bars, cells = _bars_and_cells(page, slug)
        assert bars and bars == cells, slug
        assert page.locator(f'svg[data-chart="{slug}"]').bounding_box()["width"] > 300
    assert page.locator('svg[data-chart="triagers"]').count() == 0  # nobody decided anything yet
    assert (_figure(page, "untriaged"), _figure(page, "triage-median"), _figure(page, "triaged")) == ("4", "– h", "0")
    _, age = _bars_and_cells(page, "age")
    assert age == {
        ("< 1 week", "untriaged"): 1,
        ("1–4 weeks", "untriaged"): 1,
        ("1–3 months", "untriaged"): 1,
        ("> 3 months", "untriaged"): 1,
    }

    page.goto("/issues/7001")
    page.click("[data-preview]")
    page.wait_for_selector("#apply-preview-7001 [data-apply]")
    page.click("[data-apply]")
    page.wait_for_selector('#apply-preview-7001 [data-decision-status="applied"]', timeout=30_000)

    page.goto("/metrics")
    assert (_figure(page, "untriaged"), _figure(page, "triaged")) == ("3", "1")
    assert 47.0 <= float(_figure(page, "triage-median").split()[0]) <= 49.0  # opened two days ago
    for slug in SLUGS:
        bars, cells = _bars_and_cells(page, slug)
        assert bars and bars == cells, slug
    _, triagers = _bars_and_cells(page, "triagers")
    assert triagers == {("tina-triager", "decisions"): 1, ("tina-triager", "applied"): 1}
    _, age = _bars_and_cells(page, "age")
    assert age[("< 1 week", "untriaged")] == 0
    screenshot(page, "metrics")

    Duty.objects.create(user=triager, week=week_start(timezone.now()), modules=["module: dynamo"])
    Assignment.objects.create(issue=Issue.objects.get(number=7002), user=triager)
    page.goto("/meeting")
    assert page.inner_text('#health-summary [data-figure="untriaged"]') == "3"
    assert page.inner_text('#roster [data-assigned="7002"] [data-holder]') == "tina-triager"
    assert page.locator('#health-summary svg[data-chart="flow"]').count() == 1
    screenshot(page, "meeting-health")


def test_it_shows_the_metrics_without_javascript(transactional_db, viewer, make_page):
    make_issue(7101, created_at=timezone.now() - timedelta(days=3))
    page = make_page(viewer.username, js=False)
    page.goto("/metrics?weeks=4")
    assert page.locator("svg.chart").count() == 4  # no decisions: no triager chart
    bars, cells = _bars_and_cells(page, "age")
    assert bars == cells and cells[("< 1 week", "untriaged")] == 1
