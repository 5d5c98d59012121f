"""Our own 404 page for every Http404 a view raises, with DEBUG on as well as off.

With DEBUG on (`make run`), Django answers a missing issue with its technical 404
page (the URLconf, settings hints); a triager following a stale link should get the
dashboard's page instead: what was not found and where to go. Unknown URLs still get
Django's handler (templates/404.html with DEBUG off).

CurrentRoleMiddleware keeps a GitHub user's role current while they are signed in (github/identity.py).
"""

from __future__ import annotations

import time

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import BACKEND_SESSION_KEY, logout
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from rubric_app.github import identity
from rubric_app.github.auth_backends import GITHUB_BACKEND


class NotFoundPageMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if not isinstance(exception, Http404):
            return None
        number = request.resolver_match.kwargs.get("number") if request.resolver_match else None
        return render(
            request,
            "404.html",
            {"number": number, "request_path": request.path, "repo": settings.GITHUB_REPO},
            status=404,
        )


# When this session last had its GitHub role confirmed (epoch seconds): the check costs GitHub requests, so a session
# asks at most every identity.ROLE_RECHECK (and a minute after GitHub could not answer).
ROLE_CHECKED_KEY = "github_role_checked_at"


class CurrentRoleMiddleware:
    """Re-read a GitHub user's role from GitHub at least every identity.ROLE_RECHECK while they are signed in (issue
    35): a triager removed from the team is a viewer at their next page; someone removed from the org is signed out.
    Sessions of local accounts are left alone (their backend is not the GitHub sign-in's: no query for them)."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        user = getattr(request, "user", None)
        session = request.session
        if user is None or not user.is_authenticated or session.get(BACKEND_SESSION_KEY) != GITHUB_BACKEND:
            return self.get_response(request)
        now = time.time()
        every = identity.ROLE_RECHECK.total_seconds()
        if now - session.get(ROLE_CHECKED_KEY, 0) < every:
            return self.get_response(request)
        check = identity.recheck(user, max_age=identity.ROLE_RECHECK)
        if check.error:
            session[ROLE_CHECKED_KEY] = now - every + 60  # ask again in a minute; writes are refused meanwhile
            messages.warning(
                request,
                "GitHub could not confirm your role just now: you can read, and changes to GitHub wait until it can.",
            )
        elif check.role is None:
            login = identity.github_login(user)
            logout(request)
            return render(
                request, "rubric_app/signin_refused.html", {"login": login, "org": settings.TRIAGE_ORG}, status=403
            )
        else:
            session[ROLE_CHECKED_KEY] = now
        return self.get_response(request)
