"""Optional error reporting (SENTRY_DSN): sentry-sdk with its Django and Celery integrations, and a scrubber.

What leaves for Sentry is what an operator needs to find a bug: the exception's type, the frames' file, function
and line, the request's method and path, the release. Never a token (the site's, a user's, a webhook secret) and
never issue text (bodies, comments, titles, repro code: untrusted, and not ours to send elsewhere), so the
scrubber drops request bodies, cookies, query strings, headers but a few, every frame's local variables and
every breadcrumb's message and data, and masks anything shaped like a token in what is left.
"""

from __future__ import annotations

import re
from typing import Any

# GitHub's token formats (classic, OAuth, user-to-server, server-to-server, refresh, fine-grained), bearer
# headers, a DSN or URL with a password, and Fernet tokens (the encrypted user tokens at rest).
TOKEN = re.compile(
    r"\b(?:gh[pousr]_[A-Za-z0-9]{20,255}|github_pat_[A-Za-z0-9_]{20,255}|gAAAAA[A-Za-z0-9_\-=]{20,})\b"
    r"|(?i:bearer|token)\s+[A-Za-z0-9._\-]{16,}"
    r"|(?<=://)[^/\s:@]{1,200}:[^/\s@]{1,200}(?=@)"
)
MASK = "[scrubbed]"
KEPT_HEADERS = {"user-agent", "content-type", "content-length", "host", "x-github-event", "x-github-delivery"}
MAX_TEXT = 500  # an exception message past this is cut: a long one is quoting input


def mask(text: str) -> str:
    return TOKEN.sub(MASK, text)


def scrub_event(event: dict[str, Any], hint: dict[str, Any] | None = None) -> dict[str, Any]:
    """Sentry's before_send: the event with tokens and issue text taken out (see the module's docstring)."""
    request = event.get("request")
    if isinstance(request, dict):
        for key in ("data", "cookies", "query_string", "env"):
            request.pop(key, None)
        headers = request.get("headers")
        if isinstance(headers, dict):
            request["headers"] = {k: v for k, v in headers.items() if k.lower() in KEPT_HEADERS}
        if isinstance(request.get("url"), str):
            request["url"] = mask(request["url"])
    for exception in (event.get("exception") or {}).get("values") or []:
        if isinstance(exception.get("value"), str):
            exception["value"] = mask(exception["value"])[:MAX_TEXT]
        for frame in (exception.get("stacktrace") or {}).get("frames") or []:
            frame.pop("vars", None)
            for key in ("context_line", "pre_context", "post_context"):
                frame.pop(key, None)  # a repro's source lines, when the frame is its code
    for breadcrumb in (event.get("breadcrumbs") or {}).get("values") or []:
        breadcrumb.pop("data", None)
        breadcrumb.pop("message", None)
    if isinstance(event.get("logentry"), dict):
        event["logentry"] = {"message": mask(str(event["logentry"].get("message", "")))[:MAX_TEXT]}
    event.pop("extra", None)
    event.pop("user", None)
    return event


def init(dsn: str, environment: str) -> None:
    """Start sentry-sdk for this process (web or worker), with the scrubber on every event."""
    import sentry_sdk
    from sentry_sdk.integrations.celery import CeleryIntegration
    from sentry_sdk.integrations.django import DjangoIntegration

    sentry_sdk.init(
        dsn=dsn,
        environment=environment,
        integrations=[DjangoIntegration(), CeleryIntegration()],
        send_default_pii=False,
        include_local_variables=False,
        max_request_body_size="never",
        before_send=scrub_event,
        before_send_transaction=scrub_event,
        traces_sample_rate=0.0,
    )
