"""What GitHub answers, as plain data: the issues, comments, labels and label events the client returns, its named
errors, and the parsing of GitHub's JSON into them. No PyGithub here: the client (client.py) is its only importer
of PyGithub and returns these."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime


class GitHubError(Exception):
    """GitHub could not be read or written; `status` is the HTTP status when there was one."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class GitHubUnavailable(GitHubError):
    """5xx answers or timeouts, still failing after the retries."""


class RateLimited(GitHubError):
    """The rate limit is spent until `reset_at`, later than we are willing to wait."""

    def __init__(self, message: str, reset_at: datetime | None = None) -> None:
        super().__init__(message, 403)
        self.reset_at = reset_at


class MalformedResponse(GitHubError):
    """GitHub answered 200 with a body that is not the JSON it should be."""


class TokenRefused(GitHubError):
    """A person's own token cannot be used (revoked, expired, none): they must sign in to GitHub again."""


class PageGone(GitHubError):
    """A page of a listing answered 404/410/422 while we paginated (the listing changed)."""


@dataclass(frozen=True)
class LabelData:
    name: str
    color: str = "ededed"
    description: str = ""


@dataclass(frozen=True)
class CommentData:
    github_id: int
    author: str
    body: str
    created_at: datetime
    updated_at: datetime
    association: str = ""  # GitHub's author_association: MEMBER, OWNER, COLLABORATOR, CONTRIBUTOR, NONE...
    replaced: tuple[tuple[str, str], ...] = ()  # (field, what storable() replaced in it)


@dataclass(frozen=True)
class LabelEventData:
    """Who added (labeled) or removed (unlabeled) which label when, from an issue's events."""

    label: str
    action: str
    actor: str
    created_at: datetime


@dataclass(frozen=True)
class DuplicateEventData:
    """A marked_as_duplicate event of an issue's timeline: who marked it a duplicate of which original, when."""

    original: int
    actor: str
    created_at: datetime


@dataclass(frozen=True)
class IssueData:
    number: int
    title: str
    body: str
    state: str
    author: str
    html_url: str
    labels: tuple[LabelData, ...]
    comments_count: int
    created_at: datetime
    updated_at: datetime
    is_pull_request: bool
    closed_at: datetime | None = None
    node_id: str = ""  # GraphQL's id: what transferIssue names the issue by
    state_reason: str = ""  # why it was closed: completed, not_planned, duplicate ("" while open)
    repository_url: str = ""  # the API address of the repository it is in now (another one's: transferred away)
    replaced: tuple[tuple[str, str], ...] = ()  # (field, what storable() replaced in it): "title", "1 NUL byte"

    @property
    def label_names(self) -> list[str]:
        return sorted(label.name for label in self.labels)


@dataclass
class Page:
    """One page of a listing. not_modified: GitHub answered 304 to our ETag (items is empty). skipped: (number, why)
    of the items of an issues page that could not be read (a field missing): the others are read."""

    items: list = field(default_factory=list)
    next_url: str = ""
    etag: str = ""
    not_modified: bool = False
    skipped: list = field(default_factory=list)


@dataclass(frozen=True)
class WriteResult:
    """GitHub's answer to one mutating request (status None: no answer, e.g. a timeout)."""

    action: str
    target: str
    status: int | None
    ok: bool
    response: str
    labels: tuple[str, ...] | None = None  # the issue's labels after the write, when GitHub said
    data: object = field(default=None, compare=False, repr=False)  # GitHub's decoded answer, when it was JSON


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


# What PostgreSQL's text and jsonb refuse, and UTF-8 cannot encode: NUL, and surrogates (a lone one is half an
# emoji: GitHub's JSON may carry one as a \ud83d escape). Each is stored as REPLACEMENT, and the row says so.
_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def storable(text: str) -> tuple[str, str]:
    """(text a database and UTF-8 can store, what was replaced in words or ""): NUL bytes and lone surrogates become
    REPLACEMENT; a surrogate pair (an emoji sent as two escapes) becomes its character."""
    if not _UNSTORABLE.search(text):
        return text, ""
    text = _PAIR.sub(lambda m: m.group().encode("utf-16-le", "surrogatepass").decode("utf-16-le"), text)
    nul, lone = text.count("\x00"), len(_UNSTORABLE.findall(text)) - text.count("\x00")
    what = [f"{n} {name}{'' if n == 1 else 's'}" for n, name in ((nul, "NUL byte"), (lone, "lone surrogate")) if n]
    return _UNSTORABLE.sub(REPLACEMENT, text), ", ".join(what)


def storable_json(value, path: str = "") -> tuple[object, dict[str, str]]:
    """GitHub's decoded JSON made storable (storable() on every string, keys included): (the value, {path: what was
    replaced}), paths like "issue.title" or "labels.0.name". The one place GitHub's text is made storable: the client's
    parsers below and the webhook receiver call it."""
    if isinstance(value, str):
        text, what = storable(value)
        return text, ({path: what} if what else {})
    if isinstance(value, dict):
        out, found = {}, {}
        for key, item in value.items():
            key, _ = storable(str(key))
            out[key], inner = storable_json(item, f"{path}.{key}" if path else key)
            found.update(inner)
        return out, found
    if isinstance(value, list):
        out, found = [], {}
        for index, item in enumerate(value):
            clean, inner = storable_json(item, f"{path}.{index}" if path else str(index))
            out.append(clean)
            found.update(inner)
        return out, found
    return value, {}


def _text_fields(found: dict[str, str], earlier: dict[str, str] | None) -> tuple[tuple[str, str], ...]:
    """The replacements in an issue's or a comment's own text (title, body), with what an earlier pass (the webhook
    receiver) replaced before the payload was stored."""
    merged = {**(earlier or {}), **found}
    return tuple((key, merged[key]) for key in ("title", "body") if key in merged)


def parse_label(raw: dict) -> LabelData:
    raw, _ = storable_json(raw)
    return LabelData(
        name=raw["name"], color=(raw.get("color") or "ededed")[:6], description=raw.get("description") or ""
    )


def parse_issue(raw: dict, earlier: dict[str, str] | None = None) -> IssueData:
    """Map GitHub's issue JSON (REST or webhook payload) to IssueData; KeyError if a field is missing.

    earlier: what the webhook receiver replaced in this issue's fields before it stored the payload."""
    raw, found = storable_json(raw)
    return IssueData(
        number=int(raw["number"]),
        title=raw.get("title") or "",
        body=raw.get("body") or "",
        state=raw.get("state") or "open",
        author=(raw.get("user") or {}).get("login", ""),
        html_url=raw.get("html_url") or "",
        labels=tuple(parse_label(label) for label in raw.get("labels") or []),
        comments_count=int(raw.get("comments") or 0),
        node_id=raw.get("node_id") or "",
        created_at=parse_time(raw["created_at"]),
        updated_at=parse_time(raw["updated_at"]),
        is_pull_request=bool(raw.get("pull_request")),
        closed_at=parse_time(raw.get("closed_at")),
        state_reason=raw.get("state_reason") or "",
        repository_url=raw.get("repository_url") or "",
        replaced=_text_fields(found, earlier),
    )


def parse_label_event(raw: dict) -> LabelEventData | None:
    """A labeled/unlabeled event; None for the issue's other events."""
    if raw.get("event") not in ("labeled", "unlabeled"):
        return None
    raw, _ = storable_json(raw)
    return LabelEventData(
        label=str((raw.get("label") or {})["name"]),
        action=raw["event"],
        actor=str((raw.get("actor") or {}).get("login", "")),
        created_at=parse_time(raw["created_at"]),
    )


def parse_duplicate_event(raw: dict) -> DuplicateEventData | None:
    """A marked_as_duplicate timeline event naming its original (`canonical`); None for any other event."""
    if raw.get("event") != "marked_as_duplicate" or not isinstance(raw.get("canonical"), dict):
        return None
    number = raw["canonical"].get("number")
    if not isinstance(number, int) or isinstance(number, bool) or number <= 0:
        return None
    actor = raw.get("actor") if isinstance(raw.get("actor"), dict) else {}
    return DuplicateEventData(number, str(actor.get("login") or "")[:100], parse_time(raw["created_at"]))


def parse_comment(raw: dict, earlier: dict[str, str] | None = None) -> CommentData:
    raw, found = storable_json(raw)
    return CommentData(
        github_id=int(raw["id"]),
        author=(raw.get("user") or {}).get("login", ""),
        body=raw.get("body") or "",
        created_at=parse_time(raw["created_at"]),
        updated_at=parse_time(raw.get("updated_at") or raw["created_at"]),
        association=str(raw.get("author_association") or "")[:30],
        replaced=_text_fields(found, earlier),
    )


@dataclass(frozen=True)
class RepoFile:
    """A file read through the contents API. not_modified: GitHub answered 304 to our ETag (text is empty)."""

    path: str
    text: str = ""
    sha: str = ""
    etag: str = ""
    not_modified: bool = False


@dataclass(frozen=True)
class ReleaseData:
    """The repository's latest release. not_modified: 304 to our ETag (the other fields are empty)."""

    tag: str = ""
    name: str = ""
    published_at: datetime | None = None
    etag: str = ""
    not_modified: bool = False


# One request is sent again after at most this many rate-limit answers in a row, then RateLimited.
MAX_RATE_LIMIT_WAITS = 20


# A secondary limit's 403 or 429 without Retry-After: GitHub's documentation asks for a minute at least.
SECONDARY_RATE_WAIT_S = 60


def rate_limit_wait(status: int, headers: dict[str, str], text: str, now: float) -> float | None:
    """Seconds GitHub asks us to wait before sending the request again, or None when the answer is no rate limit.

    A 429, or a 403 with Retry-After, a spent X-RateLimit-Remaining or "rate limit" in its message: Retry-After
    first, then the reset of the spent budget (plus one second: the reset's second is not exact), else
    SECONDARY_RATE_WAIT_S. A 403 without any of these is a refusal (no permission), not a limit."""
    if status not in (403, 429):
        return None
    retry_after, remaining = headers.get("retry-after", ""), headers.get("x-ratelimit-remaining")
    reset = headers.get("x-ratelimit-reset", "")
    if status == 403 and not retry_after and remaining != "0" and "rate limit" not in text.lower():
        return None
    if retry_after.isdigit():
        return float(retry_after)
    if remaining == "0" and reset.isdigit():
        return max(int(reset) - now, 0.0) + 1
    return float(SECONDARY_RATE_WAIT_S)


def next_link(link_header: str) -> str:
    for part in (link_header or "").split(","):
        if 'rel="next"' in part:
            return part.split(";")[0].strip().strip("<>")
    return ""


def excerpt(text: str, limit: int = 500) -> str:
    return text if len(text) <= limit else text[:limit] + "…"


@dataclass
class Answer:
    """One HTTP answer as the client read it: status, headers (lower-case names), body text."""

    status: int
    headers: dict[str, str]
    text: str
