"""Reviewing PyTorch's triage bot in a real browser, through the real worker to the fake GitHub: the bot lane,
`a` keeping the bot's labels (no GitHub write), "the bot got it wrong" (corrected labels plus `bot-mislabeled`),
and rubric health's kept/removed counts moving.
"""

from __future__ import annotations

import pytest

from rubric_app.models import TriageDecision
from tests.browser.conftest import screenshot
from tests.factories import make_issue, make_label

pytestmark = [pytest.mark.browser, pytest.mark.worker]

BOT_LABELS = ["bot-triaged", "module: inductor", "oncall: pt2", "triaged"]
REPO_LABELS = (*BOT_LABELS, "module: dynamo", "bot-mislabeled", "repro:agent:h100:incorrect")


def _bot_issue(fake, number: int, title: str):
    for name in REPO_LABELS:
        fake.add_label(name)
        make_label(name, allowed=name.startswith(("module:", "oncall:", "triaged")))
    fake.add_issue(number, title=title, labels=BOT_LABELS)
    return make_issue(number, title=title, labels=BOT_LABELS, suggested_route="pt2")


def _bot_row(page, label: str) -> tuple[str, str]:
    row = page.locator(f'[data-bot-label="{label}"]')
    return row.locator('[data-col="kept"]').inner_text(), row.locator('[data-col="removed"]').inner_text()


def test_it_reviews_the_bot_from_the_lane_and_the_issue_page(
    transactional_db, celery_worker_process, fake_github, triager, make_page
):
    _bot_issue(fake_github, 6001, "Wrong sums from index_put_ accumulate under inductor")
    _bot_issue(fake_github, 6002, "GRU recompiles on every sequence length")
    page = make_page(triager.username)
    page.goto("/?lane=bot")
    assert page.locator("[data-issue-row]").count() == 2
    page.keyboard.press("j")
    first = page.get_attribute("tr.selected", "data-issue-row")
    other = "6002" if first == "6001" else "6001"
    page.keyboard.press("a")  # keeps the bot's labels: a decision on record, nothing sent to GitHub
    page.wait_for_selector('[data-bot-review="confirmed"]')
    screenshot(page, "bot-lane-confirmed")
    assert TriageDecision.objects.get().bot_review == "confirmed"
    assert [r for r in fake_github.requests if r.method != "GET"] == []
    page.goto("/rubric")
    assert _bot_row(page, "module: inductor") == ("1", "0")

    page.goto(f"/issues/{other}")
    assert "Not reviewed" in page.inner_text("#automation")
    page.click("#automation summary")
    page.uncheck('#bot-correct-form input[name=keep][value="module: inductor"]')
    # The type-ahead picker (a text field tied to the catalog's datalist): the pick becomes a ticked box.
    page.fill("#bot-correct-form [data-label-picker] input[list]", "module: dynamo")
    page.press("#bot-correct-form [data-label-picker] input[list]", "Tab")
    assert page.is_checked('#bot-correct-form [data-picked] input[value="module: dynamo"]')
    page.click("[data-bot-correct]")
    page.wait_for_selector('[data-decision-status="applied"]', timeout=30_000)
    screenshot(page, "bot-corrected")

    assert fake_github.labels_of(int(other)) == [
        "bot-mislabeled",
        "bot-triaged",
        "module: dynamo",
        "oncall: pt2",
        "triaged",
    ]
    page.goto("/?lane=bot")
    assert page.locator("[data-issue-row]").count() == 0
    page.goto("/rubric")
    assert _bot_row(page, "module: inductor") == ("1", "1")
    assert _bot_row(page, "triaged") == ("2", "0")
