"""A small GitHub REST server on 127.0.0.1: the demo's GitHub, and the tests' fake.

`make run` without a GITHUB_TOKEN starts it (`python -m rubric_app.demo.github_http`), seeded
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
import re
import textwrap
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from rubric_app.demo.github_people import People, _iso
from rubric_app.vocabulary import PT2_ONCALL

REPO = "pytorch/pytorch"
# Who adds the labels of a bot-triaged demo issue: PyTorch's triage workflow runs as GitHub Actions.
BOT_LOGIN = "github-actions[bot]"


def blob_sha(text: str) -> str:
    """The git blob sha of a file's text: what the contents API reports as its `sha`."""
    data = text.encode()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


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


class FakeGitHub(People):
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

    def delete_label(self, name: str) -> None:
        """Someone deletes a label of the catalog: GitHub takes it off every issue too (without touching their
        updated_at, and without label events on them)."""
        with self.lock:
            del self.labels[name]
            for issue in self.issues.values():
                issue["labels"] = [n for n in issue["labels"] if n != name]

    def rename_label(self, old: str, new: str) -> None:
        """Someone renames a label: every issue carrying it carries the new name."""
        with self.lock:
            self.labels[new] = {**self.labels.pop(old), "name": new}
            for issue in self.issues.values():
                issue["labels"] = [new if n == old else n for n in issue["labels"]]

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

    def mark_duplicate(self, number: int, original: int, actor: str = "a-maintainer") -> None:
        """Someone marks the issue a duplicate of #original on GitHub: a `marked_as_duplicate` event on its timeline
        (naming the original as `canonical`, as GitHub's MarkedAsDuplicateEvent does) and the issue closed with
        state_reason "duplicate"."""
        with self.lock:
            issue = self.issues[number]
            stamp = self.tick()
            issue.setdefault("timeline", []).append(
                {
                    "id": self._next_event_id,
                    "event": "marked_as_duplicate",
                    "actor": actor,
                    "created_at": stamp,
                    "canonical": original,
                }
            )
            self._next_event_id += 1
            issue.update(state="closed", state_reason="duplicate", closed_at=stamp, updated_at=stamp)

    def timeline_json(self, event: dict) -> dict:
        return {
            "id": event["id"],
            "event": event["event"],
            "actor": {"login": event["actor"]},
            "created_at": _iso(event["created_at"]),
            "canonical": {"number": event["canonical"], "url": f"{self._base()}/issues/{event['canonical']}"},
        }

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
        return {**data, **issue.get("sent_as", {})}  # sent_as: fields sent as they are (a malformed answer)

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


# --- the demo ------------------------------------------------------------------------------
