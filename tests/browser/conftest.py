"""Playwright (sync API) driving Debian's Chromium against pytest-django's live server."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.db import connections

# Playwright's sync API keeps an asyncio loop running in this thread; the tests' own ORM
# calls are still plain synchronous code, so Django's async-safety guard does not apply.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "screenshots"


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield chromium
        chromium.close()
        # While Playwright's loop runs in this thread, Django keeps this thread's connections apart from
        # the ones it had before (asgiref's Local sees an async context), and every later test in the
        # session uses that second set. Closed here, before the loop stops hiding them: left open, one
        # kept the test database busy when pytest-django dropped it.
        connections.close_all()


@pytest.fixture
def make_page(browser, live_server):
    """make_page(username, js=True): a fresh browser context signed in through the login form."""
    contexts = []

    def make(username: str, *, js: bool = True):
        context = browser.new_context(
            base_url=live_server.url, viewport={"width": 1400, "height": 900}, java_script_enabled=js
        )
        context.set_default_timeout(20_000)
        contexts.append(context)
        page = context.new_page()
        page.dialogs = []
        page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
        page.goto("/accounts/login/")
        page.fill("input[name=username]", username)
        page.fill("input[name=password]", "password")
        page.click("button[type=submit]")
        page.wait_for_url(lambda url: "/accounts/login" not in url)
        return page

    yield make
    for context in contexts:
        context.close()


def screenshot(page, name: str) -> Path:
    """Save a full-page screenshot under screenshots/ (git-ignored) for the README."""
    SCREENSHOTS.mkdir(exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
