"""The demo GitHub's people: users and their tokens, the org and its teams (memberships answered as GitHub answers
them, a 302 to a non-member), OAuth sign-in, the GitHub App's installation and who a request's token acts as.
FakeGitHub (github_server.py) is People plus the repository."""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from datetime import UTC, datetime

# Who the dashboard's token is, as the comments it posts show it.
DASHBOARD_LOGIN = "pt2-triage-dashboard"


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class People:
    """The people half of FakeGitHub: reset by reset_people() and reset_identities()."""

    # --- people: users, their tokens, the org and its teams, OAuth sign-in ----------------------

    def reset_people(self) -> None:
        with self.lock:
            self.users: dict[str, dict] = {}
            self.tokens: dict[str, str] = {}  # access token -> login (per-token identity)
            self.org_members: dict[str, set[str]] = {}  # org -> logins
            self.team_members: dict[tuple[str, str], set[str]] = {}  # (org, team slug) -> logins
            self.public_members: dict[str, set[str]] = {}  # org -> logins who made their membership public
            self.oauth_apps: dict[str, str] = {}  # client id -> client secret
            self.oauth_codes: dict[str, dict] = {}  # code -> {client_id, login, scope, redirect_uri}
            self.label_events: list[dict] = []  # {"issue", "event", "label", "actor"}, oldest first

    def add_user(self, login: str, *, name: str = "", org: str | None = None, teams=(), email: str = "") -> dict:
        """A GitHub user; org: make them a member of it; teams: slugs of its teams they are in; email: the public
        e-mail on their profile (anyone may type any address there)."""
        with self.lock:
            user = self.users.setdefault(
                login, {"login": login, "id": 5_000_000 + len(self.users), "name": name, "email": email}
            )
            if org:
                self.org_members.setdefault(org, set()).add(login)
                for slug in teams:
                    self.team_members.setdefault((org, slug), set()).add(login)
            return user

    def remove_from_team(self, login: str, org: str, slug: str) -> None:
        with self.lock:
            self.team_members.get((org, slug), set()).discard(login)

    def remove_from_org(self, login: str, org: str) -> None:
        """An owner removes `login` from the org: GitHub drops their team memberships there too."""
        with self.lock:
            self.org_members.get(org, set()).discard(login)
            self.public_members.get(org, set()).discard(login)
            for (team_org, _), members in self.team_members.items():
                if team_org == org:
                    members.discard(login)

    def sees_private_members(self, requester: str, org: str) -> bool:
        """Whether GitHub shows `requester` the org's private members: the org's own members, and the site's
        identities (the dashboard's account and its App are in the org); anyone else is sent to the public list."""
        with self.lock:
            return (
                requester == DASHBOARD_LOGIN
                or requester.endswith("[bot]")
                or requester in self.org_members.get(org, set())
            )

    def add_oauth_app(self, client_id: str, client_secret: str) -> None:
        with self.lock:
            self.oauth_apps[client_id] = client_secret

    def issue_token(self, login: str) -> str:
        """A fresh access token that acts as `login` (what the OAuth token endpoint hands out)."""
        token = "gho_demo_" + secrets.token_hex(16)
        with self.lock:
            self.tokens[token] = login
        return token

    def revoke_tokens(self, login: str) -> None:
        with self.lock:
            self.tokens = {t: who for t, who in self.tokens.items() if who != login}
            for token, user in self.user_tokens.items():
                if user["login"] == login:
                    self.revoke(token)

    def user_json(self, login: str) -> dict:
        user = self.users[login]
        return {
            "login": login,
            "id": user["id"],
            "node_id": f"U_{login}",
            "type": "User",
            "name": user["name"] or login,
            "email": user.get("email") or None,
            "html_url": f"https://github.com/{login}",
            "avatar_url": "",
        }

    # --- identities: people's tokens, the GitHub App -----------------------------------------

    def reset_identities(self) -> None:
        with self.lock:
            # access token -> {"login", "expires_at" (epoch or None), "revoked"}; refresh token -> login
            self.user_tokens: dict[str, dict] = {}
            self.refresh_tokens: dict[str, str] = {}
            # Who may change labels: None, everyone with a token; else these logins (GitHub's triage role).
            self.triagers: set[str] | None = None
            self.user_rate_limits: dict[str, int] = {}  # login -> requests left this hour, per token's owner
            self.app: dict | None = None  # {"id", "public_key", "installation_id", "slug"}
            self.installation_tokens: dict[str, float] = {}  # token -> expiry (epoch)
            self._token_serial = 0

    def issue_user_token(self, login: str, *, expires_in: int | None = None, refresh: bool = True) -> tuple[str, str]:
        """A user access token for `login` (and a refresh token unless refresh=False), as the OAuth flow
        would grant; expires_in None: it never expires (an OAuth app's classic token)."""
        with self.lock:
            self._token_serial += 1
            access = f"ghu_{login}_{self._token_serial}_{hashlib.sha1(login.encode()).hexdigest()[:12]}"
            refresh_token = f"ghr_{login}_{self._token_serial}" if refresh else ""
            expires_at = time.time() + expires_in if expires_in is not None else None
            self.user_tokens[access] = {"login": login, "expires_at": expires_at, "revoked": False}
            self.tokens[access] = login  # /user and the memberships know it too
            if refresh_token:
                self.refresh_tokens[refresh_token] = login
            self.user_rate_limits.setdefault(login, 5000)
            return access, refresh_token

    def revoke(self, token: str) -> None:
        """The person revoked the app's access: the token answers 401 from now on."""
        with self.lock:
            self.user_tokens[token]["revoked"] = True
            self.tokens.pop(token, None)
            for refresh, login in list(self.refresh_tokens.items()):
                if login == self.user_tokens[token]["login"]:
                    del self.refresh_tokens[refresh]

    def refresh_grant(self, form: dict[str, str]) -> dict:
        """POST /login/oauth/access_token with grant_type=refresh_token: a new pair, the old refresh token spent.
        GitHub answers 200 with an `error` when it refuses."""
        with self.lock:
            login = self.refresh_tokens.pop(form.get("refresh_token", ""), None)
            if login is None:
                return {"error": "bad_refresh_token", "error_description": "The refresh token passed is incorrect."}
            access, refresh = self.issue_user_token(login, expires_in=28800)
            return {
                "access_token": access,
                "expires_in": 28800,
                "refresh_token": refresh,
                "refresh_token_expires_in": 15811200,
                "scope": "",
                "token_type": "bearer",
            }

    def install_app(self, app_id: str, public_key_pem: str, slug: str = "pt2-triage") -> None:
        """A GitHub App installed on the repo; its JWTs are checked against public_key_pem (RS256)."""
        with self.lock:
            self.app = {"id": str(app_id), "public_key": public_key_pem, "installation_id": 4242, "slug": slug}

    def identity(self, authorization: str) -> tuple[str | None, str]:
        """Who the Authorization header is: (login, kind) with kind site, user, installation or jwt;
        (None, why) when GitHub would answer 401."""
        scheme, _, credential = (authorization or "").partition(" ")
        with self.lock:
            if self.token is None and not credential:
                return DASHBOARD_LOGIN, "site"  # the local demo: no token needed
            if credential == self.token:
                return DASHBOARD_LOGIN, "site"
            user = self.user_tokens.get(credential)
            if user is not None:
                if user["revoked"]:
                    return None, "revoked"
                if user["expires_at"] is not None and user["expires_at"] <= time.time():
                    return None, "expired"
                return user["login"], "user"
            if credential in self.tokens:  # a token from the OAuth sign-in (no expiry)
                self.user_rate_limits.setdefault(self.tokens[credential], 5000)  # each person's own budget
                return self.tokens[credential], "user"
            if credential.startswith("gho_demo_"):
                return None, "revoked"  # revoked, or never issued
            expiry = self.installation_tokens.get(credential)
            if expiry is not None and expiry > time.time() and self.app:
                return f"{self.app['slug']}[bot]", "installation"
            if scheme.lower() == "bearer" and self.app and self._jwt_ok(credential):
                return f"app:{self.app['slug']}", "jwt"
            if self.token is None:
                return DASHBOARD_LOGIN, "site"  # the local demo takes any other token as the site's
        return None, "bad"

    def _jwt_ok(self, token: str) -> bool:
        try:
            import jwt  # PyJWT (a PyGithub dependency): only the App endpoints need it

            claims = jwt.decode(token, self.app["public_key"], algorithms=["RS256"])
        except Exception:  # any undecodable or badly signed JWT is GitHub's 401
            return False
        return str(claims.get("iss")) == self.app["id"]

    def app_route(self, method: str, path: str, kind: str) -> tuple[int, dict, dict] | None:
        """The App endpoints PyGithub's GithubIntegration calls, with the App's JWT; None: not one of them."""
        is_installation = path == f"/repos/{self.repo}/installation" and method == "GET"
        grant = re.fullmatch(r"/app/installations/(\d+)/access_tokens", path) if method == "POST" else None
        if not (is_installation or grant):
            return None
        if kind != "jwt":
            return 401, {"message": "A JSON web token could not be decoded"}, {}
        with self.lock:
            installation_id = self.app["installation_id"]
            if is_installation:
                return 200, {"id": installation_id, "app_id": int(self.app["id"]), "account": {"login": "pytorch"}}, {}
            if int(grant.group(1)) != installation_id:
                return 404, {"message": "Not Found"}, {}
            self._token_serial += 1
            token = f"ghs_installation_{self._token_serial}"
            expires = time.time() + 3600
            self.installation_tokens[token] = expires
            return 201, {"token": token, "expires_at": _iso(datetime.fromtimestamp(expires, UTC))}, {}

    def may_write(self, actor: str, kind: str) -> bool:
        """GitHub's triage permission: the site and the App may; a person only when in `triagers`."""
        return kind != "user" or self.triagers is None or actor in self.triagers
