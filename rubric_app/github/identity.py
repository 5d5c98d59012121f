"""Whether someone who signed in with GitHub still holds their role: asked of GitHub often enough to trust it.

A GitHub user's role comes from their org and team memberships (github/signin.github_role). Read once at sign-in, it
would outlive a removal from the team or the org for as long as the session lasts (issue 35), so:
- a signed-in GitHub user's role is re-read at least every ROLE_RECHECK (CurrentRoleMiddleware), and someone no
  longer in the org is signed out and keeps no role;
- every write to GitHub needs an answer at most WRITE_TRUST old: when a decision is requested on the web, and
  again on the worker that writes it (as the user or as the site): a removed triager's queued decision is not
  written. When GitHub cannot answer, the write is refused, never made on an older answer, and says why.
Local accounts (the demo's, a break-glass superuser) have no GitHub identity: their groups are their role.
The last answer's time is GitHubCredential.roles_checked_at, shared by the web processes and the workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from allauth.socialaccount.models import SocialAccount
from django.conf import settings
from django.utils import timezone

from rubric_app.github import client as github
from rubric_app.github import connect, signin
from rubric_app.models import GitHubCredential
from rubric_app.roles import ROLES

ROLE_RECHECK = timedelta(minutes=10)
WRITE_TRUST = timedelta(seconds=60)
# Django caches a user's permissions on the object; a role changed mid-request must be read again.
_PERMISSION_CACHES = ("_perm_cache", "_user_perm_cache", "_group_perm_cache")


@dataclass(frozen=True)
class RoleCheck:
    """One check of a user's role. linked: a GitHub account (else a local one, nothing asked). role: the role GitHub's
    memberships give (None: not in the org). asked: GitHub was asked now (not a recent enough earlier answer).
    error: GitHub could not answer (the role was left as it was, and may not be relied on for a write)."""

    linked: bool
    role: str | None = None
    asked: bool = False
    error: str = ""


def github_login(user) -> str | None:
    """The GitHub login of a user who signs in with GitHub; None for a local account."""
    account = SocialAccount.objects.filter(user=user, provider="github").only("extra_data").first()
    return str(account.extra_data.get("login", "")) if account is not None else None


def held_role(user) -> str | None:
    """The dashboard role `user`'s groups give now (the highest), or None."""
    names = set(user.groups.values_list("name", flat=True))
    return next((role for role in signin.ROLE_ORDER if role in names), None)


def forget_permissions(user) -> None:
    for cache in _PERMISSION_CACHES:
        if hasattr(user, cache):  # through getattr/delattr: request.user is a lazy object around the User
            delattr(user, cache)


def recheck(user, *, max_age: timedelta, now=None) -> RoleCheck:
    """Make `user`'s role GitHub's current answer, unless GitHub answered less than `max_age` ago; returns the check.

    A local account is left alone (linked=False). When GitHub cannot say (an outage, no token to ask with), the
    role is left as it was and the check carries the error: callers that write refuse then.
    """
    login = github_login(user)
    if login is None:
        return RoleCheck(linked=False, role=held_role(user))
    now = now or timezone.now()
    credential = GitHubCredential.objects.filter(user=user).only("roles_checked_at").first()
    if credential is not None and credential.roles_checked_at and now - credential.roles_checked_at < max_age:
        return RoleCheck(linked=True, role=held_role(user))
    token = signin._check_token(user)
    try:
        if not token and connect.mode() != "demo":
            raise github.GitHubError("there is no GitHub token to ask with (GITHUB_TOKEN, or the user's own)")
        role = signin.github_role(token=token, login=login)
    except github.GitHubError as exc:
        GitHubCredential.objects.filter(user=user).update(roles_check_error=exc.message[:300])
        return RoleCheck(linked=True, role=held_role(user), asked=True, error=exc.message)
    signin.set_role(user, role)
    forget_permissions(user)
    GitHubCredential.objects.filter(user=user).update(roles_checked_at=now, roles_check_error="")
    return RoleCheck(linked=True, role=role, asked=True)


def write_refusal(user, *, needs: tuple[str, ...] = ("rubric_app.apply_labels",), now=None) -> str:
    """Why `user` may not write to GitHub now by their GitHub role ("" when they may, and for local accounts):
    their role re-read if GitHub's answer is older than WRITE_TRUST; `needs`: the permissions the write takes."""
    if user is None:
        return ""
    check = recheck(user, max_age=WRITE_TRUST, now=now)
    if not check.linked:
        return ""
    if check.error:
        return (
            f"GitHub could not confirm just now that you still hold your role ({check.error}); nothing is written "
            f"on a role GitHub has not confirmed in the last {WRITE_TRUST.seconds} s. Try again in a minute."
        )
    missing = [perm for perm in needs if not user.has_perm(perm)]
    if not missing:
        return ""
    if check.role is None:
        return f"Your GitHub account is no longer a member of {settings.TRIAGE_ORG}: you hold no role here now."
    allowed = [role for role, codenames in ROLES.items() if all(p.split(".", 1)[1] in codenames for p in needs)]
    return (
        f"Your GitHub teams now give you the {check.role} role, and this takes the {allowed[0]} role "
        f"({', '.join(f'{slug}={role}' for slug, role in settings.TRIAGE_TEAMS.items())})."
    )
