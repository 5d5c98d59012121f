"""People's GitHub user tokens: stored encrypted, refreshed before they expire, and the choice of
whose identity writes a decision to GitHub.

A token is kept only as Fernet ciphertext (MultiFernet over settings.TOKEN_ENCRYPTION_KEYS, newest
first, so a key can be rotated; in development a key derived from SECRET_KEY). It is decrypted on the
worker just before a write and never put in a template, a log line or a repro's environment.
A token GitHub no longer accepts is never replaced by another identity: the decision fails with
"sign in to GitHub again".
"""

from __future__ import annotations

import base64
import hashlib
import logging
from datetime import datetime, timedelta

import requests
from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from rubric_app.github import client as github
from rubric_app.github import connect
from rubric_app.models import GitHubCredential

log = logging.getLogger(__name__)

# Refresh this long before expiry, so a write never starts with a token about to lapse.
REFRESH_MARGIN = timedelta(minutes=5)
SIGN_IN_AGAIN = "sign in to GitHub again"


class CredentialError(github.TokenRefused):
    """This person's GitHub token cannot be used (none, revoked, expired): they must sign in again."""


def _fernet() -> MultiFernet:
    keys = list(settings.TOKEN_ENCRYPTION_KEYS)
    if not keys:
        # Development only (settings refuses this with DEBUG off and sign-in on).
        digest = hashlib.sha256(b"rubric_app.github.credentials:" + settings.SECRET_KEY.encode()).digest()
        keys = [base64.urlsafe_b64encode(digest).decode()]
    return MultiFernet([Fernet(key.encode()) for key in keys])


def encrypt(token: str) -> str:
    return _fernet().encrypt(token.encode()).decode() if token else ""


def decrypt(ciphertext: str) -> str:
    """The token, or "" when there is none; CredentialError when no key opens it (a lost or rotated-out key)."""
    if not ciphertext:
        return ""
    try:
        return _fernet().decrypt(ciphertext.encode()).decode()
    except InvalidToken:
        raise CredentialError(f"the stored GitHub token cannot be decrypted: {SIGN_IN_AGAIN}") from None


def save_user_token(
    user,
    *,
    access_token: str,
    refresh_token: str | None,
    expires_at: datetime | None,
    scopes: str,
    login: str = "",
    refresh_expires_at: datetime | None = None,
) -> None:
    """Store (replace) the user's GitHub token from sign-in, encrypted; clears an earlier revocation."""
    GitHubCredential.objects.update_or_create(
        user=user,
        defaults={
            "login": login or getattr(user, "username", ""),
            "access_token_encrypted": encrypt(access_token),
            "refresh_token_encrypted": encrypt(refresh_token or ""),
            "expires_at": expires_at,
            "refresh_expires_at": refresh_expires_at,
            "scopes": scopes,
            "revoked_at": None,
        },
    )


def token_for(user) -> str:
    """The user's GitHub access token, refreshed first if it expires within REFRESH_MARGIN.

    Raises CredentialError ("sign in to GitHub again") when there is no credential, it was revoked,
    or it expired and cannot be refreshed. Refreshes under a row lock: two workers refresh once.
    """
    try:
        return _token_for(user)
    except CredentialError as exc:
        if pk := getattr(exc, "revoke_pk", None):
            GitHubCredential.objects.filter(pk=pk).update(revoked_at=timezone.now())
        raise


def _token_for(user) -> str:
    with transaction.atomic():
        cred = GitHubCredential.objects.select_for_update().filter(user=user).first()
        if cred is None:
            raise CredentialError(f"{user} has no GitHub token: sign in with GitHub")
        if cred.revoked_at is not None:
            raise CredentialError(f"GitHub no longer accepts {cred.login}'s token: {SIGN_IN_AGAIN}")
        now = timezone.now()
        if cred.expires_at is None or cred.expires_at - REFRESH_MARGIN > now:
            return decrypt(cred.access_token_encrypted)
        refresh_token = decrypt(cred.refresh_token_encrypted)
        if not refresh_token or (cred.refresh_expires_at is not None and cred.refresh_expires_at <= now):
            if cred.expires_at > now:
                return decrypt(cred.access_token_encrypted)  # still valid for a moment; nothing to refresh it with
            raise CredentialError(f"{cred.login}'s GitHub token expired: {SIGN_IN_AGAIN}")
        return _refresh(cred, refresh_token, now)


def _refresh(cred: GitHubCredential, refresh_token: str, now: datetime) -> str:
    """Trade the refresh token for a new pair at {GITHUB_URL}/login/oauth/access_token; save it; return the token."""
    try:
        answer = requests.post(
            f"{settings.GITHUB_URL}/login/oauth/access_token",
            data={
                "client_id": settings.GITHUB_OAUTH_CLIENT_ID,
                "client_secret": settings.GITHUB_OAUTH_CLIENT_SECRET,
                "grant_type": "refresh_token",
                "refresh_token": refresh_token,
            },
            headers={"Accept": "application/json"},
            timeout=settings.GITHUB_TIMEOUT,
        )
        data = answer.json() if answer.status_code == 200 else {}
    except (requests.RequestException, ValueError) as exc:
        # GitHub did not answer: the token may still be good later, so it is not marked revoked.
        raise github.GitHubUnavailable(
            f"refreshing {cred.login}'s GitHub token failed ({exc.__class__.__name__})"
        ) from None
    if not data.get("access_token"):
        # GitHub answers 200 with {"error": "bad_refresh_token"}; the error code holds no secret.
        log.warning("GitHub refused to refresh %s's token: %s", cred.login, data.get("error") or answer.status_code)
        error = CredentialError(f"GitHub refused to refresh {cred.login}'s token: {SIGN_IN_AGAIN}")
        error.revoke_pk = cred.pk  # marked by token_for once the transaction is rolled back
        raise error
    cred.access_token_encrypted = encrypt(data["access_token"])
    if data.get("refresh_token"):
        cred.refresh_token_encrypted = encrypt(data["refresh_token"])
    cred.expires_at = now + timedelta(seconds=int(data["expires_in"])) if data.get("expires_in") else None
    if data.get("refresh_token_expires_in"):
        cred.refresh_expires_at = now + timedelta(seconds=int(data["refresh_token_expires_in"]))
    cred.save(
        update_fields=[
            "access_token_encrypted",
            "refresh_token_encrypted",
            "expires_at",
            "refresh_expires_at",
            "updated_at",
        ]
    )
    log.info("refreshed %s's GitHub token", cred.login)
    return data["access_token"]


def sign_in_configured() -> bool:
    return bool(settings.GITHUB_OAUTH_CLIENT_ID)


def write_as() -> str:
    """ "user" (each triager's own token) or "app" (the site's identity): GITHUB_WRITE_AS, and when it is
    unset, "user" exactly when sign-in with GitHub is configured. Without sign-in there are no user tokens."""
    chosen = settings.GITHUB_WRITE_AS or ("user" if sign_in_configured() else "app")
    return chosen if sign_in_configured() else "app"


def why_not_as(user) -> str:
    """Why a decision by `user` could not be written as them ("" when it could, or when the site writes):
    checked when it is requested, so a local account hears it at once instead of from the worker."""
    if write_as() != "user" or connect.mode() == "demo" and not GitHubCredential.objects.filter(user=user).exists():
        return ""
    cred = GitHubCredential.objects.filter(user=user).only("revoked_at", "login").first()
    if cred is None:
        return "decisions are written to GitHub as you, and this account has no GitHub token: sign in with GitHub"
    if cred.revoked_at is not None:
        return f"GitHub no longer accepts {cred.login}'s token: {SIGN_IN_AGAIN}"
    return ""


def write_client_for(user) -> github.Client:
    """The client that writes a decision made by `user`.

    GITHUB_WRITE_AS=user with sign-in configured: the user's own token (CredentialError when they have
    none usable: never another identity). Otherwise the site's identity (GITHUB_TOKEN or the App);
    so are the local demo accounts' decisions on the demo GitHub (`make run`, no GITHUB_TOKEN).
    """
    if write_as() != "user":
        return connect.client()
    if user is None:
        raise CredentialError("the decision has no author to write as: sign in with GitHub")
    if connect.mode() == "demo" and not GitHubCredential.objects.filter(user=user).exists():
        # `make run`'s demo accounts are local; on the demo GitHub they write as the dashboard, as before.
        return connect.client()
    token = token_for(user)
    cred = GitHubCredential.objects.get(user=user)
    # A budget GitHub said was spent stays spent until its reset, across decisions and processes.
    spent = cred.rate_limit_remaining == 0 and cred.rate_limit_reset_at and cred.rate_limit_reset_at > timezone.now()
    return connect.client_for_user(
        token,
        on_answer=lambda status, remaining, reset_at: _note(cred, status, remaining, reset_at),
        spent_until=cred.rate_limit_reset_at if spent else None,
    )


def _note(cred: GitHubCredential, status: int, remaining: int | None, reset_at: datetime | None) -> None:
    """Keep what GitHub's headers said about this token: its rate limit, and a 401 (revoked)."""
    fields = {"updated_at": timezone.now()}
    if remaining is not None:
        fields["rate_limit_remaining"] = remaining
        fields["rate_limit_reset_at"] = reset_at
    if status == 401:
        fields["revoked_at"] = timezone.now()
    GitHubCredential.objects.filter(pk=cred.pk).update(**fields)
