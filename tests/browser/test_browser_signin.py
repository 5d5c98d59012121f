"""Sign in with GitHub in a real browser: the login page's button, the demo GitHub's authorize page
(pick a seeded user), and back on the queue with the role the user's GitHub teams give."""

from __future__ import annotations

import pytest
from allauth.socialaccount.models import SocialAccount

from tests.browser.conftest import screenshot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_it_signs_a_team_member_in_with_github_as_triager(browser, live_server, github_signin):
    context = browser.new_context(base_url=live_server.url, viewport={"width": 1400, "height": 900})
    context.set_default_timeout(20_000)
    page = context.new_page()
    try:
        page.goto("/accounts/login/")
        assert "read:org" in page.inner_text("main") and "public_repo" in page.inner_text("main")
        page.click("text=Sign in with GitHub")

        page.wait_for_url(f"{github_signin.url}/login/oauth/authorize*")
        assert "read:org" in page.inner_text("body")
        page.click("button[value=demo-triager]")

        page.wait_for_url(f"{live_server.url}/")
        assert page.inner_text(".topbar .who") == "demo-triager"
        screenshot(page, "signin-github-triager")
    finally:
        context.close()
    user = SocialAccount.objects.get(provider="github", extra_data__login="demo-triager").user
    assert set(user.groups.values_list("name", flat=True)) == {"triager"}


def test_it_shows_an_outsider_the_refusal(browser, live_server, github_signin):
    context = browser.new_context(base_url=live_server.url)
    context.set_default_timeout(20_000)
    page = context.new_page()
    try:
        page.goto("/accounts/login/")
        page.click("text=Sign in with GitHub")
        page.click("button[value=demo-outsider]")
        page.wait_for_url(f"{live_server.url}/accounts/github/login/callback/*")
        assert "is not a member of the pytorch organisation" in page.inner_text("main")
    finally:
        context.close()
    assert not SocialAccount.objects.exists()
