"""The queue's search box in a real browser: ranked full-text results and issue numbers in any lane."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.factories import make_issue

pytestmark = pytest.mark.browser


def test_it_searches_as_the_triager_types_and_finds_a_number_in_another_lane(transactional_db, viewer, make_page):
    now = timezone.now()
    make_issue(5101, title="Inductor crash on a view", body="dies with SIGSEGV", updated_at=now)
    make_issue(5102, title="Segmentation fault in a compiled cumsum", updated_at=now - timedelta(days=2))
    make_issue(5103, title="CPU vectorization gives wrong results", labels=("oncall: cpu inductor",))
    page = make_page(viewer.username)
    page.goto("/")  # newest activity first: 5101, 5102
    page.evaluate("window.notReloaded = true")
    make_issue(5104, title="Graph break in a generator", updated_at=now + timedelta(minutes=1))
    page.fill("input[name=q]", "segfault")
    page.wait_for_selector("#queue-table >> text=best match first")
    rows = page.eval_on_selector_all("[data-issue-row]", "rows => rows.map(r => r.dataset.issueRow)")
    assert rows == ["5102", "5101"]  # the title match ranks above the body match, though older
    assert "q=segfault" in page.url and page.evaluate("window.notReloaded") is True
    page.fill("input[name=q]", "#5103")
    page.wait_for_selector("#search-reference >> text=CPU vectorization gives wrong results")
    page.click("#search-reference >> text=oncall: cpu inductor")
    page.wait_for_selector('[data-issue-row="5103"]')
    assert "lane=cpu" in page.url and page.is_checked("input[name=lane][value=cpu]")
