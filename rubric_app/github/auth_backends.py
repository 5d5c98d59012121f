"""Who may sign in with a password: local accounts only (issue 35).

A GitHub user's role is GitHub's to give (rubric_app/github/signin.py): a password on such an account would keep
them signing in after GitHub took the role away. So a password never signs in an account linked to GitHub,
whichever form asks (the login page, the admin's), and the session of a GitHub sign-in names a backend of
its own, which is how the role re-check (CurrentRoleMiddleware) knows whose role comes from GitHub.
Local accounts (the demo's triager/chair/viewer, an operator's break-glass superuser) keep their passwords.
"""

from __future__ import annotations

from allauth.account.auth_backends import AuthenticationBackend
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth.backends import ModelBackend

GITHUB_BACKEND = "rubric_app.github.auth_backends.GitHubSignInBackend"


def is_github_user(user) -> bool:
    """Whether `user` signs in with GitHub (an allauth GitHub account is linked to it)."""
    return SocialAccount.objects.filter(user=user, provider="github").exists()


class LocalAccountBackend(ModelBackend):
    """Django's password check, refused for an account linked to GitHub (its password, if one was ever set,
    is never used)."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        user = super().authenticate(request, username=username, password=password, **kwargs)
        if user is not None and is_github_user(user):
            return None
        return user


class GitHubSignInBackend(AuthenticationBackend):
    """The backend allauth records for a GitHub sign-in (it picks the first backend of its kind). It checks
    no password at all: a GitHub user gets in only through GitHub."""

    def authenticate(self, request, **credentials):
        return None
