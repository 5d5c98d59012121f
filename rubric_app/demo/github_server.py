"""A small GitHub REST server on 127.0.0.1: the demo's GitHub, and the tests' fake.

`make run` without a GITHUB_TOKEN starts it (`python -m rubric_app.demo.github_server`), seeded
with the demo issues and the shipped label catalog, and points GITHUB_API_URL at it: the
whole flow (sync, apply labels, the labels changing on "GitHub", the next sync) works
offline and nothing leaves the machine. The tests (tests/fakegithub.py) start it with a
token and inject faults.

It is a real threaded HTTP server: PyGithub talks to it over HTTP through
`settings.GITHUB_API_URL`, exactly as it talks to api.github.com. It serves
the endpoints the dashboard uses (issue lists with Link pagination, single
issues, comments, the label catalog, label writes, posting comments, closing, GraphQL's
transferIssue, a file's contents, the latest release), answers
If-None-Match with 304, sends X-RateLimit-* headers, records every request,
and injects faults on demand (`inject`). Pure Python: no Django import.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import secrets
import socket
import textwrap
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from rubric_app.vocabulary import BOT_TRIAGED, HIGH_PRIORITY, PT2_ONCALL, QUEUE_LABELS, TRIAGE_REVIEW, TRIAGED

REPO = "pytorch/pytorch"
# Who the dashboard's token is, as the comments it posts show it.
DASHBOARD_LOGIN = "pt2-triage-dashboard"
# Who adds the labels of a bot-triaged demo issue: PyTorch's triage workflow runs as GitHub Actions.
BOT_LOGIN = "github-actions[bot]"


def blob_sha(text: str) -> str:
    """The git blob sha of a file's text: what the contents API reports as its `sha`."""
    data = text.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_iso(value: str) -> datetime:
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


@dataclass
class Recorded:
    """One request the server received, and the status it answered."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    at: float
    status: int = 0
    body: str = ""  # the first 200 characters of the answer
    sent: str = ""  # the request's body
    actor: str = ""  # who the request's token is (per-token identity), "" when anonymous


@dataclass
class Fault:
    kind: str
    method: str | None
    path: re.Pattern | None
    query: dict[str, str]
    times: int
    options: dict = field(default_factory=dict)

    def matches(self, method: str, path: str, query: dict[str, str]) -> bool:
        return (
            self.times > 0
            and (self.method is None or self.method == method)
            and (self.path is None or bool(self.path.search(path)))
            and all(query.get(k) == v for k, v in self.query.items())
        )


# Repositories of the organisation the fake knows, besides its own (GET /repos/{name}, transfers).
OTHER_REPOS = (
    "pytorch/vision",
    "pytorch/audio",
    "pytorch/text",
    "pytorch/executorch",
    "pytorch/ao",
    "pytorch/torchrec",
    "pytorch/torchtune",
    "pytorch/xla",
    "pytorch/TensorRT",
    "pytorch/tutorials",
)
# The site token's requests an hour, as GitHub grants a token; the budget comes back whole at its reset.
RATE_LIMIT = 5000
FAULT_KINDS = (
    "race",
    "error",
    "timeout",
    "secondary_rate_limit",
    "rate_limit_exhausted",
    "rate_limited",
    "too_many_requests",
    "malformed_json",
    "vanish_page",
)


class FakeGitHub:
    """The state of the fake: one repo's issues, comments and labels, and what it was asked."""

    def __init__(self, repo: str = REPO, token: str | None = None) -> None:
        self.repo = repo
        self.token = token  # None: no Authorization needed (the local demo); else it must match
        self.url = ""  # set once the server listens
        self.lock = threading.RLock()
        self.reset()

    # --- state -----------------------------------------------------------------------

    def reset(self) -> None:
        with self.lock:
            self.issues: dict[int, dict] = {}
            self.labels: dict[str, dict] = {}
            self.requests: list[Recorded] = []
            self.faults: list[Fault] = []
            self.rate_limit_remaining = RATE_LIMIT
            self.rate_limit_reset = int(time.time()) + 3600
            self._clock = datetime.now(UTC).replace(microsecond=0) - timedelta(days=30)
            self._next_comment_id = 900_000_001
            self._next_event_id = 700_000_001
            # Issues moved to another repository (transferIssue): number -> (repository, url there).
            self.transferred: dict[int, tuple[str, str]] = {}
            # The repositories an issue may be transferred to (G2), as GitHub would find them.
            self.other_repos = set(OTHER_REPOS)
            # The repository's files the contents API serves (path -> text), and its latest release (None: none).
            self.files: dict[str, str] = {}
            self.release: dict | None = None
            self.reset_identities()
            self.reset_people()

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

    def tick(self) -> datetime:
        """Return a fresh updated_at, strictly later than every earlier one (second resolution)."""
        with self.lock:
            now = datetime.now(UTC).replace(microsecond=0)
            self._clock = max(now, self._clock + timedelta(seconds=1))
            return self._clock

    def add_label(self, name: str, color: str = "ededed", description: str = "") -> dict:
        with self.lock:
            label = self.labels.setdefault(name, {"name": name, "color": color, "description": description})
            label.update(color=color, description=description)
            return label

    def add_issue(
        self,
        number: int,
        title: str = "torch.compile fails",
        body: str = "",
        labels=(PT2_ONCALL,),
        comments=(),
        state: str = "open",
        pull_request: bool = False,
        user: str = "someone",
        updated_at: datetime | None = None,
        labelled_by: str = "",
        closed_at: datetime | None = None,
        state_reason: str | None = None,
    ) -> dict:
        """Create (or replace) an issue. comments: strings, or dicts with body/user (and id, created_at, association:
        GitHub's author_association, NONE unless given). Its labels' `labeled` events name labelled_by (default: the
        author) as their actor. A closed issue was closed at closed_at (default: its updated_at), for state_reason
        (GitHub's: completed, not_planned, duplicate; default completed)."""
        with self.lock:
            for name in labels:
                if name not in self.labels:
                    self.add_label(name)
            stamp = updated_at or self.tick()
            issue = {
                "number": number,
                "title": title,
                "body": body,
                "state": state,
                "user": user,
                "labels": list(labels),
                "pull_request": pull_request,
                "created_at": stamp,
                "updated_at": stamp,
                "comments": [],
                "events": [],
                "closed_at": (closed_at or stamp) if state == "closed" else None,
                "state_reason": (state_reason or "completed") if state == "closed" else None,
            }
            self.issues[number] = issue
            self._label_events(issue, (), labels, labelled_by or user, stamp)
            for item in comments:
                item = {"body": item} if isinstance(item, str) else item
                self._append_comment(
                    issue,
                    item.get("body", ""),
                    item.get("user", "commenter"),
                    item.get("created_at", stamp),
                    item.get("id"),
                    item.get("association", "NONE"),
                )
            return issue

    def _append_comment(
        self, issue: dict, body: str, user: str, stamp: datetime, comment_id: int | None = None, association="NONE"
    ) -> dict:
        comment = {
            "id": comment_id or self._next_comment_id,
            "body": body,
            "user": user,
            "association": association,
            "created_at": stamp,
            "updated_at": stamp,
        }
        self._next_comment_id = max(self._next_comment_id, comment["id"]) + 1
        issue["comments"].append(comment)
        return comment

    def add_comment(self, number: int, body: str, user: str = "commenter", association: str = "NONE") -> dict:
        """Someone comments: bumps the issue's updated_at, as GitHub does. association: GitHub's author_association
        of `user` on this repository (MEMBER, CONTRIBUTOR, NONE...)."""
        with self.lock:
            issue = self.issues[number]
            stamp = self.tick()
            issue["updated_at"] = stamp
            return self._append_comment(issue, body, user, stamp, association=association)

    def put_file(self, path: str, text: str) -> str:
        """Commit `text` at `path` (what the contents API then serves); returns its blob sha, as git computes it."""
        with self.lock:
            self.files[path] = text
        return blob_sha(text)

    def publish_release(self, tag: str, name: str = "") -> None:
        """Publish a release: from now on the latest (GET /releases/latest)."""
        with self.lock:
            self.release = {"tag_name": tag, "name": name or f"PyTorch {tag.lstrip('v')} Release", "at": self.tick()}

    def contents_json(self, path: str) -> dict:
        text = self.files[path]
        return {
            "type": "file",
            "encoding": "base64",
            "path": path,
            "name": path.rsplit("/", 1)[-1],
            "size": len(text.encode()),
            "sha": blob_sha(text),
            # GitHub wraps the base64 at 60 characters: a client must not mind the newlines.
            "content": "\n".join(textwrap.wrap(base64.b64encode(text.encode()).decode(), 60)) + "\n",
            "url": f"{self._base()}/contents/{path}",
        }

    def release_json(self) -> dict:
        release = self.release
        return {
            "id": 90_000_001,
            "tag_name": release["tag_name"],
            "name": release["name"],
            "draft": False,
            "prerelease": False,
            "published_at": _iso(release["at"]),
            "html_url": f"https://github.com/{self.repo}/releases/tag/{release['tag_name']}",
        }

    def graphql(self, request: dict) -> dict:
        """The one GraphQL call the dashboard makes: transferIssue (G2). Refusals come back as 200 with
        `errors`, as GitHub sends them."""
        query, variables = str(request.get("query", "")), request.get("variables") or {}
        if "transferIssue" not in query:
            return {"errors": [{"message": "This fake serves only transferIssue"}]}
        with self.lock:
            issue = next((i for n, i in self.issues.items() if f"I_{n}" == variables.get("issue")), None)
            repo = str(variables.get("repo", ""))[2:]
            if issue is None or repo not in self.other_repos:
                return {"errors": [{"type": "NOT_FOUND", "message": "Could not resolve to a node with the global id"}]}
            number = issue["number"]
            url = f"https://github.com/{repo}/issues/{number}"
            del self.issues[number]  # GitHub redirects the old address; the fake forgets it
            self.transferred[number] = (repo, url)
            return {"data": {"transferIssue": {"issue": {"number": number, "url": url}}}}

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

    def record_label_event(self, number: int, event: str, label: str, actor: str) -> None:
        with self.lock:
            self.label_events.append({"issue": number, "event": event, "label": label, "actor": actor})

    def labels_of(self, number: int) -> list[str]:
        with self.lock:
            return sorted(self.issues[number]["labels"])

    def set_labels(self, number: int, labels, actor: str = "someone") -> None:
        """Someone else relabels the issue (bumps updated_at, records the label events with their actor)."""
        with self.lock:
            for name in labels:
                if name not in self.labels:
                    self.add_label(name)
            issue = self.issues[number]
            before = issue["labels"]
            issue["labels"] = list(labels)
            issue["updated_at"] = self.tick()
            self._label_events(issue, before, labels, actor, issue["updated_at"])

    def _label_events(self, issue: dict, before, after, actor: str, stamp: datetime) -> None:
        events = issue.setdefault("events", [])
        changes = [("labeled", n) for n in after if n not in before] + [
            ("unlabeled", n) for n in before if n not in after
        ]
        for kind, name in changes:
            events.append(
                {"id": self._next_event_id, "event": kind, "label": name, "actor": actor, "created_at": stamp}
            )
            self._next_event_id += 1

    def event_json(self, event: dict) -> dict:
        return {
            "id": event["id"],
            "event": event["event"],
            "actor": {"login": event["actor"]},
            "label": {"name": event["label"], "color": self.labels.get(event["label"], {}).get("color", "ededed")},
            "created_at": _iso(event["created_at"]),
        }

    def update_issue(self, number: int, **fields) -> None:
        """Change fields (title, body, state, ...) as someone on GitHub would (bumps updated_at)."""
        with self.lock:
            issue = self.issues[number]
            was = issue["state"]
            issue.update(fields)
            issue["updated_at"] = self.tick()
            if issue["state"] == "closed" and was != "closed":  # GitHub stamps the close and says why
                issue["closed_at"] = fields.get("closed_at") or issue["updated_at"]
                issue["state_reason"] = fields.get("state_reason") or "completed"
            elif issue["state"] == "open":
                issue["closed_at"] = issue["state_reason"] = None

    def move_issue(self, number: int, repo: str) -> None:
        """The issue was transferred to `repo` and the listing still shows it there (repository_url names the other
        repository, as in GitHub's listing right after a transfer); its own addresses answer 404."""
        with self.lock:
            self.issues[number]["moved_to"] = repo

    def inject(
        self, kind: str, *, method: str | None = None, path: str | None = None, query=None, times: int = 1, **options
    ) -> None:
        """Answer the next `times` matching requests with a fault.

        kind: "race" (run=callable, called before the request is answered normally: someone
        else's change lands first), "error" (status=502|503|404|422|..., message=...), "timeout" (delay=s, then a normal
        answer), "secondary_rate_limit" (403 with Retry-After: retry_after=s), "rate_limit_exhausted"
        (a normal answer with X-RateLimit-Remaining: 0 and a reset in reset_in=s), "malformed_json"
        (200 with a truncated body), "vanish_page" (the issues of that page are closed first, as if
        someone closed them while we paginated, so the page comes back empty).
        path is a regex searched in the URL path; query a dict that must match; after=n lets the
        first n matching requests through.
        """
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; expected one of {FAULT_KINDS}")
        with self.lock:
            self.faults.append(
                Fault(kind, method, re.compile(path) if path else None, dict(query or {}), times, options)
            )

    def requests_to(self, path_regex: str, method: str | None = None) -> list[Recorded]:
        pattern = re.compile(path_regex)
        with self.lock:
            return [r for r in self.requests if pattern.search(r.path) and (method is None or r.method == method)]

    # --- JSON shapes -----------------------------------------------------------------

    def _base(self) -> str:
        return f"{self.url}/repos/{self.repo}"

    def label_json(self, name: str) -> dict:
        label = self.labels.get(name) or {"name": name, "color": "ededed", "description": ""}
        return {"id": abs(hash(name)) % 10**9, "url": f"{self._base()}/labels/{name}", **label, "default": False}

    def issue_json(self, issue: dict) -> dict:
        number = issue["number"]
        moved = issue.get("moved_to")
        data = {
            "id": 10_000_000 + number,
            "url": f"{self._base()}/issues/{number}",
            "repository_url": f"{self.url}/repos/{moved}" if moved else self._base(),
            "comments_url": f"{self._base()}/issues/{number}/comments",
            "html_url": f"https://github.com/{self.repo}/issues/{number}",
            "number": number,
            "node_id": f"I_{number}",
            "title": issue["title"],
            "body": issue["body"],
            "state": issue["state"],
            "user": {"login": issue["user"]},
            "labels": [self.label_json(name) for name in issue["labels"]],
            "comments": len(issue["comments"]),
            "created_at": _iso(issue["created_at"]),
            "updated_at": _iso(issue["updated_at"]),
            "closed_at": _iso(issue.get("closed_at") or issue["updated_at"]) if issue["state"] == "closed" else None,
            "state_reason": issue.get("state_reason"),
        }
        if issue["pull_request"]:
            data["pull_request"] = {"url": f"{self._base()}/pulls/{number}"}
        return data

    def comment_json(self, number: int, comment: dict) -> dict:
        return {
            "id": comment["id"],
            "url": f"{self._base()}/issues/comments/{comment['id']}",
            "issue_url": f"{self._base()}/issues/{number}",
            "user": {"login": comment["user"]},
            "author_association": comment.get("association", "NONE"),
            "body": comment["body"],
            "created_at": _iso(comment["created_at"]),
            "updated_at": _iso(comment["updated_at"]),
        }

    # --- request handling ---------------------------------------------------------------

    def take_fault(self, method: str, path: str, query: dict[str, str]) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.matches(method, path, query):
                    if fault.options.get("after", 0) > 0:  # let this many matching requests through first
                        fault.options["after"] -= 1
                        continue
                    fault.times -= 1
                    return fault
        return None

    def list_issues(self, query: dict[str, str]) -> list[dict]:
        wanted = [name for name in query.get("labels", "").split(",") if name]
        state = query.get("state", "open")
        since = _parse_iso(query["since"]) if query.get("since") else None
        with self.lock:
            rows = [
                issue
                for issue in self.issues.values()
                if (state == "all" or issue["state"] == state)
                and all(name in issue["labels"] for name in wanted)
                and (since is None or issue["updated_at"] >= since)
            ]
        key = "updated_at" if query.get("sort") == "updated" else "created_at"
        rows.sort(key=lambda i: (i[key], i["number"]), reverse=query.get("direction", "desc") == "desc")
        return rows


def paginate(rows: list, query: dict[str, str], base_path: str) -> tuple[list, str | None, int]:
    """Return (page rows, Link header or None, page number) for GitHub-style page/per_page."""
    per_page = min(int(query.get("per_page", 30)), 100)
    page = max(int(query.get("page", 1)), 1)
    chunk = rows[(page - 1) * per_page : page * per_page]
    last = max((len(rows) + per_page - 1) // per_page, 1)
    links = []

    def link(n: int, rel: str) -> str:
        return f'<{base_path}?{urlencode({**query, "page": n})}>; rel="{rel}"'

    if page < last:
        links += [link(page + 1, "next"), link(last, "last")]
    if page > 1:
        links += [link(1, "first"), link(page - 1, "prev")]
    return chunk, (", ".join(links) or None), page


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeServer

    def setup(self) -> None:
        super().setup()
        # Headers and body go out in two writes: without NODELAY, Nagle plus delayed ACKs
        # would add ~40 ms to every response.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, *args) -> None:  # keep test output quiet
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PATCH(self) -> None:
        self._handle("PATCH")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _handle(self, method: str) -> None:
        fake = self.server.fake
        parts = urlsplit(self.path)
        path = unquote(parts.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        record = Recorded(
            method,
            path,
            query,
            {k.lower(): v for k, v in self.headers.items()},
            time.time(),
            sent=raw.decode("utf-8", "replace"),
        )
        with fake.lock:
            fake.requests.append(record)
        self._record = record
        fault = fake.take_fault(method, path, query)
        extra: dict[str, str] = {}
        if fault and fault.kind == "race":
            fault.options["run"]()
            fault = None
        if fault and fault.kind == "timeout":
            time.sleep(fault.options.get("delay", 2.0))
            fault = None
        if fault and fault.kind == "vanish_page":
            self._vanish(query)
            fault = None
        if fault and fault.kind == "error":
            return self._send(
                record, fault.options.get("status", 502), {"message": fault.options.get("message", "Server Error")}
            )
        if fault and fault.kind == "secondary_rate_limit":
            return self._send(
                record,
                403,
                {
                    "message": (
                        "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
                    )
                },
                {"Retry-After": str(fault.options.get("retry_after", 1))},
            )
        if fault and fault.kind == "rate_limited":
            reset = str(int(time.time() + fault.options.get("reset_in", 1)))
            message = "API rate limit exceeded for installation. (But here's the good news: ...)"
            return self._send(
                record, 403, {"message": message}, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": reset}
            )
        if fault and fault.kind == "too_many_requests":
            message = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
            return self._send(
                record, 429, {"message": message}, {"Retry-After": str(fault.options.get("retry_after", 1))}
            )
        if fault and fault.kind == "rate_limit_exhausted":
            extra = {
                "X-RateLimit-Remaining": "0",
                "X-RateLimit-Reset": str(int(time.time() + fault.options.get("reset_in", 1))),
            }
        if path == "/login/oauth/access_token" and method == "POST" and b"refresh_token" in raw:
            return self._send(record, 200, fake.refresh_grant({k: v[-1] for k, v in parse_qs(raw.decode()).items()}))
        if path.startswith("/login/oauth/"):  # GitHub's web side: no API token involved
            return self._oauth(record, method, path, query, raw)
        if method == "GET" and (page := re.fullmatch(rf"/{re.escape(fake.repo)}/issues/(\d+)", path)):
            return self._issue_page(record, int(page.group(1)))  # an issue's web page, as github.com/<repo>/issues/N
        actor, kind = fake.identity(self.headers.get("Authorization", ""))
        if actor is None:
            return self._send(record, 401, {"message": "Bad credentials"})
        record.actor = actor
        if (answer := fake.app_route(method, path, kind)) is not None:
            return self._send(record, *answer)
        if kind == "jwt":  # an App's JWT opens only the App endpoints
            return self._send(record, 401, {"message": "A JSON web token could not be decoded"})
        if method != "GET" and path.startswith(f"/repos/{fake.repo}/issues/") and not fake.may_write(actor, kind):
            return self._send(record, 403, {"message": "Must have triage access to change this issue."})
        try:
            status, payload, headers = self._route(method, path, query, raw)
        except KeyError:
            status, payload, headers = 404, {"message": "Not Found"}, {}
        headers.update(extra)
        if fault and fault.kind == "malformed_json" and status == 200:
            body = json.dumps(payload).encode()
            return self._send_bytes(record, 200, body[: max(len(body) // 2, 1)], headers)
        self._send(record, status, payload, headers)

    def _vanish(self, query: dict[str, str]) -> None:
        """Close the issues the requested page would hold (someone closed them meanwhile)."""
        fake = self.server.fake
        rows = fake.list_issues(query)
        per_page = min(int(query.get("per_page", 30)), 100)
        page = max(int(query.get("page", 1)), 1)
        for issue in rows[(page - 1) * per_page : page * per_page]:
            fake.update_issue(issue["number"], state="closed")

    def _route(self, method: str, path: str, query: dict[str, str], raw: bytes):
        fake = self.server.fake
        base = f"/repos/{fake.repo}"
        if path == base and method == "GET":
            return (
                200,
                {
                    "full_name": fake.repo,
                    "url": fake._base(),
                    "name": fake.repo.split("/")[1],
                    "node_id": f"R_{fake.repo}",
                },
                {},
            )
        if re.fullmatch(r"/repos/[\w.-]+/[\w.-]+", path) and method == "GET":
            name = path[len("/repos/") :]
            if name not in fake.other_repos:
                raise KeyError(path)
            return 200, {"full_name": name, "name": name.split("/")[1], "node_id": f"R_{name}"}, {}
        if path.startswith(("/user", "/orgs/")) and method == "GET":
            return self._people(path)
        if path == "/graphql" and method == "POST":
            return 200, fake.graphql(json.loads(raw or b"{}")), {}
        if path == f"{base}/issues" and method == "GET":
            rows, link, _ = paginate(fake.list_issues(query), query, f"{fake.url}{path}")
            with fake.lock:
                data = [fake.issue_json(issue) for issue in rows]
            return 200, data, {"Link": link} if link else {}
        if path.startswith(f"{base}/contents/") and method == "GET":
            with fake.lock:
                return 200, fake.contents_json(path[len(f"{base}/contents/") :]), {}
        if path == f"{base}/releases/latest" and method == "GET":
            with fake.lock:
                if fake.release is None:
                    raise KeyError(path)
                return 200, fake.release_json(), {}
        if path == f"{base}/labels" and method == "GET":
            with fake.lock:
                names = sorted(fake.labels)
                rows, link, _ = paginate(names, query, f"{fake.url}{path}")
                data = [fake.label_json(name) for name in rows]
            return 200, data, {"Link": link} if link else {}
        match = re.fullmatch(rf"{re.escape(base)}/issues/(\d+)(/.*)?", path)
        if not match:
            raise KeyError(path)
        number, rest = int(match.group(1)), match.group(2) or ""
        with fake.lock:
            issue = fake.issues[number]
            if issue.get("moved_to"):
                raise KeyError(path)
            if rest == "" and method == "GET":
                return 200, fake.issue_json(issue), {}
            if rest == "" and method == "PATCH":
                fields = json.loads(raw or b"{}")
                fake.update_issue(
                    number, **{k: v for k, v in fields.items() if k in ("state", "state_reason", "title", "body")}
                )
                return 200, fake.issue_json(issue), {}
            if rest == "/comments" and method == "POST":
                body = json.loads(raw or b"{}").get("body")
                if not isinstance(body, str) or not body.strip():
                    return (
                        422,
                        {"message": "Validation Failed", "errors": [{"field": "body", "code": "missing_field"}]},
                        {},
                    )
                return 201, fake.comment_json(number, fake.add_comment(number, body, user=self._actor())), {}
            if rest == "/comments" and method == "GET":
                since = _parse_iso(query["since"]) if query.get("since") else None
                comments = [c for c in issue["comments"] if since is None or c["updated_at"] >= since]
                rows, link, _ = paginate(comments, query, f"{fake.url}{path}")
                return 200, [fake.comment_json(number, c) for c in rows], {"Link": link} if link else {}
            if rest == "/events" and method == "GET":
                rows, link, _ = paginate(issue.get("events", []), query, f"{fake.url}{path}")
                return 200, [fake.event_json(e) for e in rows], {"Link": link} if link else {}
            if rest == "/labels" and method == "GET":
                return 200, [fake.label_json(name) for name in issue["labels"]], {}
            if rest == "/labels" and method == "POST":
                body = json.loads(raw or b"[]")
                names = body.get("labels", []) if isinstance(body, dict) else body
                added = [n for n in names if n not in issue["labels"]]
                fake.set_labels(number, issue["labels"] + added, actor=self._actor())
                for name in added:
                    fake.record_label_event(number, "labeled", name, self._actor())
                return 200, [fake.label_json(name) for name in issue["labels"]], {}
            if rest.startswith("/labels/") and method == "DELETE":
                name = rest[len("/labels/") :]
                if name not in issue["labels"]:
                    return 404, {"message": "Label does not exist"}, {}
                fake.set_labels(number, [n for n in issue["labels"] if n != name], actor=self._actor())
                fake.record_label_event(number, "unlabeled", name, self._actor())
                return 200, [fake.label_json(n) for n in issue["labels"]], {}
        raise KeyError(path)

    def _actor(self) -> str:
        """Who the request being answered acts as (the actor GitHub's timeline shows)."""
        return self._record.actor

    # --- people and OAuth sign-in (the demo's and the tests' "Sign in with GitHub") ----------

    def _bearer(self) -> str:
        value = self.headers.get("Authorization") or ""
        return value.split(" ", 1)[1].strip() if " " in value else ""

    def _people(self, path: str):
        """GET /user, /user/memberships/orgs/{org}, /orgs/{org}/members/{username} and
        /orgs/{org}/teams/{team_slug}/memberships/{username}, as GitHub documents them."""
        fake = self.server.fake
        with fake.lock:
            if path == "/user":
                login = fake.tokens.get(self._bearer())
                if login is None:
                    return 401, {"message": "Requires authentication"}, {}
                return 200, fake.user_json(login), {}
            if match := re.fullmatch(r"/user/memberships/orgs/([\w.-]+)", path):
                login, org = fake.tokens.get(self._bearer()), match.group(1)
                if login is None or login not in fake.org_members.get(org, set()):
                    raise KeyError(path)
                return 200, {"state": "active", "role": "member", "organization": {"login": org}}, {}
            if match := re.fullmatch(r"/orgs/([\w.-]+)/members/([\w.-]+)", path):
                org, login = match.groups()
                if not fake.sees_private_members(self._actor(), org):
                    # GitHub's answer to a requester outside the org: the public list, whoever is asked about.
                    return 302, None, {"Location": f"{fake.url}/orgs/{org}/public_members/{login}"}
                if login not in fake.org_members.get(org, set()):
                    raise KeyError(path)
                return 204, None, {}
            if match := re.fullmatch(r"/orgs/([\w.-]+)/public_members/([\w.-]+)", path):
                if match.group(2) not in fake.public_members.get(match.group(1), set()):
                    raise KeyError(path)
                return 204, None, {}
            if match := re.fullmatch(r"/orgs/([\w.-]+)/teams/([\w.-]+)/memberships/([\w.-]+)", path):
                org, slug, login = match.groups()
                if login not in fake.team_members.get((org, slug), set()):
                    raise KeyError(path)
                return 200, {"state": "active", "role": "member", "url": f"{fake.url}{path}"}, {}
        raise KeyError(path)

    def _oauth(self, record: Recorded, method: str, path: str, query: dict[str, str], raw: bytes) -> None:
        """/login/oauth/authorize (a page to pick a seeded user, then back to redirect_uri with a code)
        and /login/oauth/access_token (the code, with the app's client secret, for a token)."""
        fake = self.server.fake
        form = {k: v[-1] for k, v in parse_qs(raw.decode("utf-8", "replace")).items()} if raw else {}
        if path == "/login/oauth/authorize" and method == "GET":
            if query.get("client_id") not in fake.oauth_apps:
                return self._send_page(record, 404, "<h1>Unknown OAuth application</h1>")
            return self._send_page(record, 200, self._authorize_page(query))
        if path == "/login/oauth/authorize" and method == "POST":
            login = form.get("login", "")
            if form.get("client_id") not in fake.oauth_apps or login not in fake.users:
                return self._send_page(record, 400, "<h1>Pick one of the demo users</h1>")
            code = secrets.token_hex(10)
            with fake.lock:
                fake.oauth_codes[code] = {
                    "client_id": form["client_id"],
                    "login": login,
                    "scope": form.get("scope", ""),
                    "redirect_uri": form.get("redirect_uri", ""),
                }
            target = form.get("redirect_uri", "")
            target += ("&" if "?" in target else "?") + urlencode({"code": code, "state": form.get("state", "")})
            return self._send_page(record, 302, "", {"Location": target})
        if path == "/login/oauth/access_token" and method == "POST":
            with fake.lock:
                grant = fake.oauth_codes.pop(form.get("code", ""), None)
                secret = fake.oauth_apps.get(form.get("client_id", ""))
            if grant is None or secret is None or form.get("client_secret") != secret:
                return self._send(record, 200, {"error": "bad_verification_code"})
            token = fake.issue_token(grant["login"])
            scope = grant["scope"].replace(" ", ",")
            return self._send(record, 200, {"access_token": token, "token_type": "bearer", "scope": scope})
        return self._send(record, 404, {"message": "Not Found"})

    def _authorize_page(self, query: dict[str, str]) -> str:
        fake = self.server.fake
        hidden = "".join(
            f'<input type="hidden" name="{k}" value="{html.escape(query.get(k, ""))}">'
            for k in ("client_id", "redirect_uri", "scope", "state")
        )
        with fake.lock:
            rows = []
            for login in sorted(fake.users):
                orgs = [org for org, members in fake.org_members.items() if login in members]
                teams = [slug for (org, slug), members in fake.team_members.items() if login in members]
                where = ", ".join(orgs + teams) or "no organisation"
                rows.append(
                    f'<li><button type="submit" name="login" value="{html.escape(login)}">{html.escape(login)}</button>'
                    f" <small>{html.escape(where)}</small></li>"
                )
        return (
            "<!doctype html><title>Demo GitHub: authorize</title><h1>Demo GitHub: sign in as</h1>"
            f"<p>The application asks for: <code>{html.escape(query.get('scope', ''))}</code></p>"
            f'<form method="post" action="/login/oauth/authorize">{hidden}<ul>{"".join(rows)}</ul></form>'
        )

    def _issue_page(self, record: Recorded, number: int) -> None:
        """The issue as the demo GitHub shows it to a browser: its state, labels, text and comments, escaped (what
        the dashboard's "on GitHub" links open in the demo, where github.com has no such issue)."""
        fake = self.server.fake
        with fake.lock:
            issue = fake.issues.get(number)
            page = self._issue_html(number, issue) if issue else ""
        if not page:
            return self._send_page(record, 404, f"<h1>Demo GitHub: no issue #{number} in {html.escape(fake.repo)}</h1>")
        return self._send_page(record, 200, page)

    def _issue_html(self, number: int, issue: dict) -> str:
        labels = " ".join(f"<code>{html.escape(name)}</code>" for name in issue["labels"])
        comments = "".join(
            f"<h3>{html.escape(c['user'])}, {_iso(c['created_at'])}</h3><pre>{html.escape(c['body'])}</pre>"
            for c in issue["comments"]
        )
        return (
            f"<!doctype html><title>#{number} {html.escape(issue['title'])} · demo GitHub</title>"
            f"<p>Demo GitHub · {html.escape(self.server.fake.repo)}</p><h1>{html.escape(issue['title'])} #{number}</h1>"
            f"<p>{html.escape(issue['state'])} · opened by {html.escape(issue['user'])} · labels: {labels}</p>"
            f"<pre>{html.escape(issue['body'] or '')}</pre>{comments}"
        )

    def _send_page(self, record: Recorded, status: int, page: str, headers: dict | None = None) -> None:
        body = page.encode()
        record.status = status
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def _send(self, record: Recorded, status: int, payload, headers: dict | None = None) -> None:
        body = b"" if status in (204, 302) else json.dumps(payload).encode()  # 204, 302: no body, as GitHub sends them
        self._send_bytes(record, status, body, headers or {})

    def _send_bytes(self, record: Recorded, status: int, body: bytes, headers: dict) -> None:
        fake = self.server.fake
        etag = 'W/"' + hashlib.sha1(body).hexdigest() + '"'
        if status == 200 and record.method == "GET" and self.headers.get("If-None-Match") == etag:
            status, body = 304, b""  # a conditional hit costs no rate limit
        elif status != 401 and record.actor in fake.user_rate_limits:  # a person's token: their own budget
            with fake.lock:
                fake.user_rate_limits[record.actor] = max(fake.user_rate_limits[record.actor] - 1, 0)
                headers.setdefault("X-RateLimit-Remaining", str(fake.user_rate_limits[record.actor]))
        elif status != 401:
            with fake.lock:
                if time.time() >= fake.rate_limit_reset:  # a new hour: the whole budget again
                    fake.rate_limit_remaining, fake.rate_limit_reset = RATE_LIMIT, int(time.time()) + 3600
                fake.rate_limit_remaining = max(fake.rate_limit_remaining - 1, 0)
        record.status = status
        record.body = body[:200].decode("utf-8", "replace")
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        if status in (200, 304) and record.method == "GET":
            self.send_header("ETag", etag)
        self.send_header("X-RateLimit-Limit", "5000")
        self.send_header("X-RateLimit-Remaining", headers.pop("X-RateLimit-Remaining", str(fake.rate_limit_remaining)))
        self.send_header("X-RateLimit-Reset", headers.pop("X-RateLimit-Reset", str(fake.rate_limit_reset)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


class FakeServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, fake: FakeGitHub, port: int = 0) -> None:
        # Loopback only, always: this server stands in for GitHub on this machine and nowhere else.
        super().__init__(("127.0.0.1", port), Handler)
        self.fake = fake
        fake.url = f"http://127.0.0.1:{self.server_address[1]}"


def start_server(repo: str = REPO, *, token: str | None = None, port: int = 0) -> tuple[FakeGitHub, FakeServer]:
    """Start the server in a daemon thread; returns (state, server). Call server.shutdown() to stop."""
    fake = FakeGitHub(repo, token=token)
    server = FakeServer(fake, port)
    threading.Thread(target=server.serve_forever, name="fake-github", daemon=True).start()
    return fake, server


# --- the demo ------------------------------------------------------------------------------

DEMO_FILE = Path(__file__).resolve().parent / "demo_issues.json"

# The shipped catalog has no colours; these follow the families PyTorch uses so chips read alike.
PREFIX_COLOURS = [
    ("oncall:", "e99695"),
    ("module:", "c5def5"),
    ("topic:", "bfd4f2"),
    (TRIAGE_REVIEW, "fbca04"),
    (TRIAGED, "0e8a16"),
    (HIGH_PRIORITY, "b60205"),
    ("needs", "d4c5f9"),
]


def colour_for(name: str) -> str:
    for prefix, colour in PREFIX_COLOURS:
        if name.startswith(prefix):
            return colour
    return "ededed"


def seed_demo(fake: FakeGitHub, path: Path = DEMO_FILE) -> int:
    """Fill the server with the shipped label catalog and the demo issues (same numbers,
    comment ids and times as `manage.py load_demo`); returns the number of issues."""
    from rubric_app.rubric.catalog import load_catalog

    seed_skill(fake)
    for item in load_catalog() + json.loads(fake.files[SKILL_LABELS])["labels"]:
        fake.add_label(item["name"], colour_for(item["name"]), item.get("description", ""))
    with open(path, encoding="utf-8") as fh:
        demo = json.load(fh)
    issues = demo["issues"]
    for name in demo.get("repo_labels", ()):  # the repo's labels besides the catalog's (human feedback on the bot)
        fake.add_label(name, colour_for(name))
    for data in issues:
        for name in data["labels"]:
            if name not in fake.labels:
                fake.add_label(name, colour_for(name))
        issue = fake.add_issue(
            data["number"],
            title=data["title"],
            body=data["body"],
            labels=data["labels"],
            state=data.get("state", "open"),
            user=data.get("author", ""),
            updated_at=_parse_iso(data["updated_at"]),
            labelled_by=BOT_LOGIN if BOT_TRIAGED in data["labels"] else "",
            comments=[
                {
                    "id": c["id"],
                    "body": c["body"],
                    "user": c.get("author", ""),
                    "association": c.get("author_association", "NONE"),
                    "created_at": _parse_iso(c["created_at"]),
                }
                for c in data.get("comments", [])
            ],
        )
        issue["created_at"] = _parse_iso(data["created_at"])
    return len(issues)


# PyTorch's triage skill as the demo repository has it (rubric_app/github/skill_files.py reads it), and its latest
# release.
DATA = Path(__file__).resolve().parent.parent / "data"
SKILL_LABELS = ".agents/skills/triaging-issues/labels.json"
SKILL_TEMPLATES = ".agents/skills/triaging-issues/templates.json"
DEMO_RELEASE = "v2.13.0"


def seed_skill(fake: FakeGitHub, release: str = DEMO_RELEASE) -> None:
    """Commit the triage skill's current files (rubric_app/data/skill_*.json, as read from PyTorch's repository) and
    publish `release`."""
    fake.put_file(SKILL_LABELS, (DATA / "skill_labels.json").read_text(encoding="utf-8"))
    fake.put_file(SKILL_TEMPLATES, (DATA / "skill_templates.json").read_text(encoding="utf-8"))
    fake.publish_release(release)


# A harvested thread's marks ("login · comment · 2024-05-01"), as rubric/text.py reads them.
THREAD_MARK = re.compile(r"^([^\s·]{1,60}) · (description|comment) · (\d{4}-\d{2}-\d{2})[^\n]{0,40}$", re.M)


def seed_history(fake: FakeGitHub, records: list[dict]) -> int:
    """Serve harvested issues (the JSON-lines records of tests/data: number, title, body, labels, state) as the
    repository's history: each body's thread becomes the issue's description and its
    comments (authors and dates from the thread's marks), a record without a queue label gets `oncall: pt2` (every
    harvested issue was a PT2 one; its label was handed off or cut by the harvest), dates follow the numbers where
    the thread has none, closed issues are closed as completed a day after their last post. Returns how many."""
    from rubric_app.rubric.text import split_thread_authored  # pure Python, like this module

    ordered = sorted(records, key=lambda r: int(r["number"]))
    first = datetime(2022, 1, 1, tzinfo=UTC)
    for i, record in enumerate(ordered):
        title = record.get("title") or ""
        body = record.get("body") or ""
        if body.startswith(f"# {title}"):  # the harvester's heading: GitHub's body has none
            body = body[len(title) + 2 :].lstrip("\n")
        dates = [_parse_iso(f"{m.group(3)}T12:00:00Z") for m in THREAD_MARK.finditer(body)]
        created = dates[0] if dates else first + timedelta(hours=i)
        description, reporter, thread = split_thread_authored(body)
        labels = list(record.get("labels") or [])
        if not any(name in QUEUE_LABELS for name in labels):
            labels.append(PT2_ONCALL)
        last = max([created, *dates])
        closed = record.get("state") == "closed"
        issue = fake.add_issue(
            int(record["number"]),
            title=title,
            body=description,
            labels=labels,
            state="closed" if closed else "open",
            user=reporter,
            updated_at=last + timedelta(days=1) if closed else last,
            closed_at=last + timedelta(days=1) if closed else None,
            comments=[
                {"body": text, "user": author, "created_at": dates[k + 1] if k + 1 < len(dates) else last}
                for k, (author, text) in enumerate(thread)
            ],
        )
        issue["created_at"] = created
    return len(ordered)


# Who can sign in to the demo (the authorize page lists them): one of each kind the dashboard tells apart.
DEMO_ORG = "pytorch"
DEMO_PEOPLE = (
    ("demo-triager", "A pt2-triagers member", DEMO_ORG, ("pt2-triagers",)),
    ("demo-chair", "A pt2-triage-chairs member", DEMO_ORG, ("pt2-triage-chairs",)),
    ("demo-member", "A pytorch member in no triage team", DEMO_ORG, ()),
    ("demo-outsider", "Not in the pytorch organisation", None, ()),
)


def seed_demo_people(fake: FakeGitHub, *, client_id: str = "", client_secret: str = "") -> None:
    """Add the demo's users, org and teams, and the dashboard's OAuth app when one is given."""
    for login, name, org, teams in DEMO_PEOPLE:
        fake.add_user(login, name=name, org=org, teams=teams)
    if client_id and client_secret:
        fake.add_oauth_app(client_id, client_secret)


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="The demo's GitHub on 127.0.0.1, seeded with the demo issues.")
    parser.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    parser.add_argument("--repo", default=REPO)
    args = parser.parse_args()
    fake = FakeGitHub(args.repo)
    count = seed_demo(fake)
    # Sign in with GitHub: the same variables the dashboard reads (scripts/run.sh generates them).
    seed_demo_people(
        fake,
        client_id=os.environ.get("GITHUB_OAUTH_CLIENT_ID", ""),
        client_secret=os.environ.get("GITHUB_OAUTH_CLIENT_SECRET", ""),
    )
    server = FakeServer(fake, args.port)
    print(f"demo GitHub: {fake.url} ({count} issues of {args.repo}, {len(fake.labels)} labels)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
