"""What a new user meets first, in a real browser: keys on the issue page, the 404 page."""

from __future__ import annotations

from tests.factories import make_issue


def test_it_opens_the_issue_on_github_with_o_from_the_issue_page(transactional_db, viewer, make_page):
    issue = make_issue(4321, title="o opens me on GitHub")
    page = make_page(viewer.username)
    # Nothing leaves the machine: GitHub's page is answered here.
    page.context.route(
        "https://github.com/**", lambda route: route.fulfill(body="<title>GitHub</title>", content_type="text/html")
    )
    page.goto(issue.get_absolute_url())
    with page.context.expect_page() as opened:
        page.keyboard.press("o")
    github = opened.value
    github.wait_for_load_state()
    assert github.url == issue.html_url
    assert page.url.endswith(issue.get_absolute_url())  # the dashboard stays where it was


def test_it_shows_the_dashboards_404_page_for_a_missing_issue(transactional_db, viewer, make_page):
    page = make_page(viewer.username)
    response = page.goto("/issues/999999")
    assert response.status == 404
    assert page.locator("h1").inner_text() == "Not found"
    page.click("text=Search the queue for #999999")
    page.wait_for_url(lambda url: "q=%23999999" in url)
