"""Our own 404 page for every Http404 a view raises, with DEBUG on as well as off.

With DEBUG on (`make run`), Django answers a missing issue with its technical 404
page (the URLconf, settings hints); a triager following a stale link should get the
dashboard's page instead: what was not found and where to go. Unknown URLs still get
Django's handler (templates/404.html with DEBUG off).
"""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render


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
