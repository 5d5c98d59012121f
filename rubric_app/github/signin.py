"""Sign in with GitHub: who gets in, as what (allauth's adapters), and the daily re-check.

A GitHub user gets in only as a member of settings.TRIAGE_ORG; their role comes from the teams in
settings.TRIAGE_TEAMS (the highest one they are an active member of), else viewer. Everyone else
is refused before allauth creates a user. Roles are re-read at each sign-in, by `refresh_github_roles`
(beat, daily), at least every 10 minutes of a session and before every write (identity.py). A GitHub user
never signs in with a password (auth_backends.py) and never sees allauth's sign-up form: the account is
made from GitHub's data.
"""

from __future__ import annotations

import logging
from datetime import UTC

from allauth.account.adapter import DefaultAccountAdapter
from allauth.core.exceptions import ImmediateHttpResponse
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.models import SocialAccount, SocialLogin
from allauth.socialaccount.providers.github.views import GitHubOAuth2Adapter
from allauth.socialaccount.providers.oauth2.views import OAuth2CallbackView, OAuth2LoginView
from allauth.socialaccount.views import login_cancelled  # noqa: F401 - mounted in triage_site/urls.py
from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.auth.views import LoginView
from django.http import HttpRequest
from django.shortcuts import render
from django.utils import timezone

from rubric_app.github import client as github
from rubric_app.github import connect, credentials, memberships
from rubric_app.models import GitHubCredential
from rubric_app.roles import ROLES, ensure_roles

log = logging.getLogger(__name__)

# Highest first: someone in both mapped teams gets the stronger role.
ROLE_ORDER = list(reversed(ROLES))


def is_configured() -> bool:
    """True when sign-in with GitHub is offered (both OAuth settings set)."""
    return bool(settings.GITHUB_OAUTH_CLIENT_ID and settings.GITHUB_OAUTH_CLIENT_SECRET)


def github_role(*, token: str, login: str) -> str | None:
    """The role `login` has on the dashboard by their GitHub memberships, or None when they are not in the org.

    Raises github.GitHubError when GitHub cannot tell (a refused token, an outage): never a guess.
    """
    org = settings.TRIAGE_ORG
    if not memberships.is_org_member(token=token, org=org, login=login):
        return None
    roles = {
        role
        for slug, role in settings.TRIAGE_TEAMS.items()
        if memberships.is_team_member(token=token, org=org, team_slug=slug, login=login)
    }
    return next((role for role in ROLE_ORDER if role in roles), "viewer")


def set_role(user: User, role: str | None) -> None:
    """Make `role` the user's only dashboard role (None: none, for someone who left the org)."""
    groups = ensure_roles()
    user.groups.remove(*[group for name, group in groups.items() if name != role])
    if role:
        user.groups.add(groups[role])


def _save_token(user: User, sociallogin: SocialLogin) -> None:
    """Hand the user's token to credentials.py, which keeps it encrypted (allauth stores none:
    SOCIALACCOUNT_STORE_TOKENS is off). allauth keeps an OAuth2 refresh token in token_secret."""
    token = sociallogin.token
    expires_at = token.expires_at
    if expires_at is not None and expires_at.tzinfo is None:
        expires_at = expires_at.replace(tzinfo=UTC)
    credentials.save_user_token(
        user,
        access_token=token.token,
        refresh_token=token.token_secret or None,
        expires_at=expires_at,
        scopes=",".join(settings.SOCIALACCOUNT_PROVIDERS["github"]["SCOPE"]),
        login=str(sociallogin.account.extra_data.get("login", "")),
    )
    # pre_social_login has just read the role from GitHub: the answer a write may rely on (identity.py).
    GitHubCredential.objects.filter(user=user).update(roles_checked_at=timezone.now(), roles_check_error="")


class SocialAccountAdapter(DefaultSocialAccountAdapter):
    def pre_social_login(self, request: HttpRequest, sociallogin: SocialLogin) -> None:
        """Refuse anyone outside the org (no user row is made); re-read an existing user's role."""
        login = str(sociallogin.account.extra_data.get("login", ""))
        # No e-mail from GitHub reaches allauth: one matching a local account's would send the user to allauth's
        # sign-up form (a username and an unverified e-mail of their choosing, the token pending in the session).
        sociallogin.email_addresses = []
        try:
            role = github_role(token=sociallogin.token.token, login=login)
        except github.GitHubError as exc:
            log.warning("sign-in of %s: GitHub could not say their memberships (%s)", login, exc.message)
            raise ImmediateHttpResponse(
                render(request, "rubric_app/signin_refused.html", {"login": login, "unavailable": True}, status=503)
            ) from None
        if role is None:
            log.info("sign-in of %s refused: not a member of %s", login, settings.TRIAGE_ORG)
            if sociallogin.is_existing:  # left the org since: no role now, not only no session
                set_role(sociallogin.user, None)
            raise ImmediateHttpResponse(
                render(
                    request, "rubric_app/signin_refused.html", {"login": login, "org": settings.TRIAGE_ORG}, status=403
                )
            )
        sociallogin.state["role"] = role
        if sociallogin.is_existing:
            set_role(sociallogin.user, role)
            _save_token(sociallogin.user, sociallogin)

    def get_provider(self, request: HttpRequest, provider, client_id=None):
        """allauth's GitHub provider, redirecting to the addresses in settings (GitHubAdapter below)."""
        found = super().get_provider(request, provider, client_id)
        if found.id == "github":
            found.oauth2_adapter_class = GitHubAdapter
        return found

    def is_open_for_signup(self, request: HttpRequest, sociallogin: SocialLogin) -> bool:
        # Only reached after pre_social_login let the user in.
        return "role" in sociallogin.state

    def is_auto_signup_allowed(self, request: HttpRequest, sociallogin: SocialLogin) -> bool:
        # Always: the account is made from GitHub's data, never through the sign-up form (not mounted).
        return True

    def populate_user(self, request: HttpRequest, sociallogin: SocialLogin, data: dict) -> User:
        """The new account from what GitHub vouches for: its login as the username (allauth makes it unique when a
        local account has it) and the name; no e-mail (GitHub's public one is unverified, and nothing is mailed)."""
        sociallogin.email_addresses = []
        user = super().populate_user(request, sociallogin, {**data, "email": None})
        login = str(data.get("username") or "")
        if login and User.objects.filter(username__iexact=login).exists():
            user.username = f"{login}@github"  # a local account holds the login: this one says where it is from
        return user

    def save_user(self, request: HttpRequest, sociallogin: SocialLogin, form=None) -> User:
        user = super().save_user(request, sociallogin, form)
        set_role(user, sociallogin.state["role"])
        _save_token(user, sociallogin)
        return user


class AccountAdapter(DefaultAccountAdapter):
    def is_open_for_signup(self, request: HttpRequest) -> bool:
        # No local sign-up page: local accounts are made by an operator; GitHub users by sign-in.
        return False


class GitHubAdapter(GitHubOAuth2Adapter):
    """allauth's GitHub adapter, with its addresses read from settings at each request: allauth reads
    its GITHUB_URL once at import and derives GitHub Enterprise's /api/v3 from it, but github.com's
    API is api.github.com (settings.GITHUB_API_URL) and the tests' GitHub gets its port at start."""

    @property
    def access_token_url(self) -> str:
        return f"{settings.GITHUB_URL}/login/oauth/access_token"

    @property
    def authorize_url(self) -> str:
        return f"{settings.GITHUB_URL}/login/oauth/authorize"

    @property
    def profile_url(self) -> str:
        return f"{settings.GITHUB_API_URL}/user"

    @property
    def emails_url(self) -> str:
        return f"{settings.GITHUB_API_URL}/user/emails"


def login_view(request: HttpRequest):
    """Django's login page (local accounts), offering "Sign in with GitHub" when it is configured."""
    return LoginView.as_view(
        extra_context={"github_signin": is_configured(), "github_url": settings.GITHUB_URL, "org": settings.TRIAGE_ORG}
    )(request)


oauth2_login = OAuth2LoginView.adapter_view(GitHubAdapter)
oauth2_callback = OAuth2CallbackView.adapter_view(GitHubAdapter)


def _check_token(user: User) -> str:
    """The token to read `user`'s memberships with: their own (refreshed by credentials.py when it is
    about to expire), else the site's GITHUB_TOKEN; "" when there is neither."""
    try:
        return credentials.token_for(user)
    except github.GitHubError:  # none stored, revoked or expired: the site's token still answers
        return settings.GITHUB_TOKEN


def refresh_github_roles() -> dict[str, int]:
    """Re-read the role of every GitHub-linked user; returns counts {"checked", "changed", "failed"}.

    Someone no longer in the org loses every role (their account stays, as a record of their
    decisions). A user GitHub cannot answer for keeps their role until the next run.
    """
    counts = {"checked": 0, "changed": 0, "failed": 0}
    for account in SocialAccount.objects.filter(provider="github").select_related("user"):
        user, login = account.user, str(account.extra_data.get("login", ""))
        token = _check_token(user)
        if not token and connect.mode() != "demo":  # nothing to ask with (the demo GitHub needs no token)
            counts["failed"] += 1
            continue
        try:
            role = github_role(token=token, login=login)
        except github.GitHubError as exc:
            log.warning("role check of %s failed: %s", login, exc.message)
            counts["failed"] += 1
            continue
        before = set(user.groups.values_list("name", flat=True)) & set(ROLES)
        set_role(user, role)
        GitHubCredential.objects.filter(user=user).update(roles_checked_at=timezone.now(), roles_check_error="")
        counts["checked"] += 1
        counts["changed"] += before != ({role} if role else set())
    return counts
