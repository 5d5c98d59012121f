"""Which GitHub the dashboard talks to, and as whom: the real one with a token or the GitHub App, the demo GitHub on
this machine, or none (`off`: nothing may leave the machine); the site's client, a person's, and the paced reader
of the history backfill."""

from __future__ import annotations

import time
from datetime import datetime
from urllib.parse import urlsplit

from django.conf import settings

from rubric_app.github.client import Client, PacedClient, configured, installation_token
from rubric_app.github.data import (
    GitHubError,
)

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def is_local_url(url: str) -> bool:
    """True when url names this machine (the demo GitHub, the tests' fake): nothing leaves it."""
    host = (urlsplit(url).hostname or "").lower()
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def mode() -> str:
    """ "github" with a token; "demo" without one, against a GitHub on this machine (the demo
    GitHub `make run` starts); "off" without a token elsewhere: nothing may be sent there."""
    if settings.GITHUB_TOKEN or settings.GITHUB_APP_ID:
        return "github"
    return "demo" if is_local_url(settings.GITHUB_API_URL) else "off"


def off_reason() -> str:
    """Why GitHub cannot be reached in this setup, or "" when it can."""
    if mode() != "off":
        return ""
    return (
        f"no GITHUB_TOKEN or GITHUB_APP_ID, and GITHUB_API_URL ({settings.GITHUB_API_URL}) "
        "is not the local demo GitHub: "
        "without a token nothing is sent off this machine. Set GITHUB_TOKEN, or start with `make run`, "
        "which serves the demo GitHub on 127.0.0.1."
    )


def client() -> Client:
    """A Client for settings.GITHUB_REPO at settings.GITHUB_API_URL as the site: GITHUB_TOKEN, or the
    GitHub App's installation token when GITHUB_APP_ID is set.

    Raises GitHubError without a token unless the API is on this machine: an anonymous
    request to api.github.com would leave the machine and fail after its retries.
    """
    return Client(**_as_site())


def _as_site() -> dict:
    """The keywords of a client acting as the site, after the check that GitHub is not off."""
    if why := off_reason():
        raise GitHubError(f"GitHub is off: {why}")
    return configured(installation_token() if settings.GITHUB_APP_ID else settings.GITHUB_TOKEN)


def client_for_user(token: str, *, on_answer=None, spent_until: datetime | None = None) -> Client:
    """A Client acting as a person (their sign-in token); on_answer sees each answer's status and rate limit.
    spent_until: their rate limit is spent until then (the first request waits for it or raises RateLimited)."""
    cli = Client(**configured(token), on_answer=on_answer, as_user=True)
    if spent_until is not None:
        cli._spent_until = int(spent_until.timestamp())
    return cli


def last_page(link_header: str) -> int | None:
    """The page number of a Link header's rel="last" (how many pages the listing has), or None."""
    for part in (link_header or "").split(","):
        if 'rel="last"' in part:
            query = urlsplit(part.split(";")[0].strip().strip("<>")).query
            pages = [value for key, _, value in (p.partition("=") for p in query.split("&")) if key == "page"]
            return int(pages[0]) if pages and pages[0].isdigit() else None
    return None


def paced_client(*, sleep=time.sleep, on_wait=None, reserve: int = 0) -> PacedClient:
    """A PacedClient as the site (client()'s identity and checks) for settings.GITHUB_REPO."""
    return PacedClient(**_as_site(), sleep=sleep, on_wait=on_wait, reserve=reserve)
