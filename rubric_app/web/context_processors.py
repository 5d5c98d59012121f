"""What every page needs to know about the setup: is GitHub real, the local demo, or off."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest

from rubric_app.github import connect


def github_mode(request: HttpRequest) -> dict:
    """github_mode: "github", "demo" or "off"; github_off: why Apply is disabled ("" if it is not); github_web_url:
    where links to an issue on GitHub point.

    The API URL is shown only for the demo (it is this machine's); never the token.
    """
    current = connect.mode()
    return {
        "github_mode": current,
        "github_off": connect.off_reason(),
        "demo_github_url": settings.GITHUB_API_URL if current == "demo" else "",
        # GitHub's web root, for "on GitHub" links: the demo GitHub's own pages in the demo.
        "github_web_url": settings.GITHUB_URL,
    }
