"""The demo GitHub over HTTP: the REST routes PyGithub and the dashboard call (issues, comments, labels, events,
contents, releases, OAuth, memberships, GraphQL's transfer), each answered from the state of github_server.FakeGitHub,
paginated as GitHub paginates; the server on 127.0.0.1 and `python -m rubric_app.demo.github_http`, which
`make run` starts without a GITHUB_TOKEN."""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import secrets
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from rubric_app.demo.github_people import _iso
from rubric_app.demo.github_seeds import seed_demo, seed_demo_people
from rubric_app.demo.github_server import RATE_LIMIT, REPO, FakeGitHub, Recorded, _parse_iso


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
        except (KeyError, StopIteration):
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
        if path.startswith(f"{base}/labels/") and method == "GET":  # one label, its name matched whatever the case
            with fake.lock:
                wanted = path[len(f"{base}/labels/") :].lower()
                name = next(n for n in fake.labels if n.lower() == wanted)  # StopIteration: none, 404 below
                return 200, fake.label_json(name), {}
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
            if rest == "/timeline" and method == "GET":
                rows, link, _ = paginate(issue.get("timeline", []), query, f"{fake.url}{path}")
                return 200, [fake.timeline_json(e) for e in rows], {"Link": link} if link else {}
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
