"""GitHub, through PyGithub: the only module that imports it. It returns plain data and raises the named errors
of data.py; callers never see PyGithub's types. connect.py says which GitHub to talk to, and as whom.

Reads retry 5xx answers, timeouts and secondary rate limits (honouring Retry-After), watch
X-RateLimit-Remaining/Reset and send If-None-Match where the caller has an ETag. Writes are never retried on 5xx
or timeouts (the change may have landed): they report GitHub's answer, and are paced at least
settings.GITHUB_WRITE_INTERVAL seconds apart per process (one worker consumes the `github` queue, so that is the
pace of the whole site).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from datetime import UTC, datetime
from urllib.parse import quote, urlencode

import requests
import urllib3
from django.conf import settings
from github import Auth, Github, GithubException, GithubRetry

from rubric_app.github.data import (
    MAX_RATE_LIMIT_WAITS,
    Answer,
    CommentData,
    DuplicateEventData,
    GitHubError,
    GitHubUnavailable,
    IssueData,
    LabelData,
    LabelEventData,
    MalformedResponse,
    Page,
    PageGone,
    RateLimited,
    TokenRefused,
    WriteResult,
    excerpt,
    next_link,
    parse_comment,
    parse_duplicate_event,
    parse_issue,
    parse_label,
    parse_label_event,
    rate_limit_wait,
)

log = logging.getLogger(__name__)

# How long a read may wait for a primary rate-limit reset before giving up (the sync resumes later).
MAX_RATE_LIMIT_WAIT_S = 120
MALFORMED_RETRIES = 2


# The last mutation's monotonic time, per process: pacing must hold across tasks and clients.
_write_lock = threading.Lock()
_last_write_at = 0.0


class Client:
    """A connection to one repo. Counts what it asked: `requests_made`, `not_modified` (304s)."""

    def __init__(
        self,
        *,
        base_url: str,
        token: str,
        repo: str,
        timeout: float = 15.0,
        write_interval: float = 1.0,
        retry_backoff: float = 0.25,
        on_answer=None,
        as_user: bool = False,
    ) -> None:
        self.repo = repo
        # as_user: the token is a person's (sign-in), so a 401 or a 403 names what they must do.
        self.as_user = as_user
        # on_answer(status, rate_remaining, rate_reset_at): called after each answer (credentials keeps them).
        self._on_answer = on_answer
        self.write_interval = write_interval
        self.requests_made = 0
        self.not_modified = 0
        self.rate_remaining: int | None = None
        self._spent_until = 0  # epoch of the rate limit's reset while the budget is spent
        auth = Auth.Token(token) if token else None
        common = dict(
            base_url=base_url,
            auth=auth,
            per_page=100,
            timeout=max(int(round(timeout)), 1),
            # PyGithub's own throttle would add 0.25 s per read; writes are paced below, per process.
            seconds_between_requests=None,
            seconds_between_writes=None,
        )
        self._github_options, self._retry_backoff = common, retry_backoff
        self._reader = Github(
            retry=GithubRetry(
                total=5, backoff_factor=retry_backoff, backoff_max=4, max_rate_limit_wait=MAX_RATE_LIMIT_WAIT_S
            ),
            **common,
        )
        # Writes: retry only a 403 that says "rate limited" (GitHub did nothing); a 5xx or a
        # timeout may have been applied, so it is reported, not repeated.
        self._writer = Github(
            retry=GithubRetry(
                total=3,
                status_forcelist=[],
                read=0,
                backoff_factor=retry_backoff,
                max_rate_limit_wait=MAX_RATE_LIMIT_WAIT_S,
                allowed_methods=frozenset({"GET", "POST", "DELETE", "PATCH"}),
            ),
            **common,
        )

    # --- plumbing -----------------------------------------------------------------------

    def _call(self, gh: Github, verb: str, url: str, *, params=None, headers=None, input=None) -> Answer:
        """One logical request through PyGithub's requester; raises GitHubUnavailable/RateLimited."""
        self._before_request()
        self.requests_made += 1
        try:
            status, resp_headers, text = gh.requester.requestJson(
                verb, url, parameters=params, headers=headers, input=input
            )
        except GithubException as exc:  # raised by the retry layer (403s it gave up on)
            message = (exc.data or {}).get("message", "") if isinstance(exc.data, dict) else str(exc.data)
            if exc.status == 403 and "rate limit" in message.lower():
                raise RateLimited(f"GitHub rate limit: {message}") from None
            answer = Answer(
                exc.status or 0, {k.lower(): v for k, v in (exc.headers or {}).items()}, json.dumps(exc.data)
            )
            self._watch_rate_limit(answer)
            return answer
        except (requests.exceptions.RetryError, urllib3.exceptions.MaxRetryError) as exc:
            raise GitHubUnavailable(f"GitHub kept failing for {verb} {url}: {exc.__class__.__name__}") from None
        except (requests.exceptions.Timeout, requests.exceptions.ConnectionError) as exc:
            raise GitHubUnavailable(f"GitHub did not answer {verb} {url} ({exc.__class__.__name__})") from None
        answer = Answer(status, {k.lower(): v for k, v in resp_headers.items()}, text or "")
        if status == 304:
            self.not_modified += 1
        self._watch_rate_limit(answer)
        return answer

    def _watch_rate_limit(self, answer: Answer) -> None:
        """Note when the budget is spent: the next request waits for the reset (see _before_request)."""
        remaining = answer.headers.get("x-ratelimit-remaining")
        reset = answer.headers.get("x-ratelimit-reset", "")
        if remaining is not None and remaining.isdigit():
            self.rate_remaining = int(remaining)
            self._spent_until = int(reset) if self.rate_remaining == 0 and reset.isdigit() else 0
        if self._on_answer is not None:
            known = remaining is not None and remaining.isdigit()
            reset_at = datetime.fromtimestamp(int(reset), UTC) if known and reset.isdigit() else None
            self._on_answer(answer.status, int(remaining) if known else None, reset_at)

    def _before_request(self) -> None:
        """Wait for the rate limit's reset if it is near; raise RateLimited if it is far."""
        if not self._spent_until:
            return
        wait = self._spent_until - time.time() + 1
        reset_at = datetime.fromtimestamp(self._spent_until, UTC)
        if wait > MAX_RATE_LIMIT_WAIT_S:
            raise RateLimited(f"GitHub's rate limit is spent until {reset_at:%H:%M:%S} UTC", reset_at)
        log.info("rate limit spent; waiting %.1f s for the reset", wait)
        time.sleep(max(wait, 0))
        self._spent_until = 0

    def _read_json(self, url: str, *, params=None, etag: str = "") -> tuple[Answer, object]:
        """GET url and decode it; returns (answer, data) with data None on 304.

        Raises PageGone (404/410/422), GitHubUnavailable (5xx), GitHubError (other 4xx),
        MalformedResponse when the body stays undecodable after MALFORMED_RETRIES retries.
        """
        headers = {"If-None-Match": etag} if etag else None
        for attempt in range(MALFORMED_RETRIES + 1):
            answer = self._call(self._reader, "GET", url, params=params, headers=headers)
            if answer.status == 304:
                return answer, None
            if answer.status == 401 and self.as_user:
                raise TokenRefused(self._refusal(answer), 401)
            if answer.status in (404, 410, 422):
                raise PageGone(f"GET {url} answered {answer.status}", answer.status)
            if answer.status >= 500:
                raise GitHubUnavailable(f"GET {url} answered {answer.status}", answer.status)
            if answer.status >= 400:
                raise GitHubError(f"GET {url} answered {answer.status}: {excerpt(answer.text, 200)}", answer.status)
            try:
                return answer, json.loads(answer.text)
            except ValueError:
                log.warning("malformed JSON from GET %s (attempt %d)", url, attempt + 1)
        raise MalformedResponse(f"GET {url} kept answering malformed JSON", answer.status)

    def _page(self, url: str, *, params=None, etag: str = "", parse=None, each: bool = False) -> Page:
        """One page of a listing, its items parsed. each: an item that cannot be parsed is left out, with why, on
        page.skipped (one bad issue never stops its page); else it fails the page (MalformedResponse)."""
        answer, data = self._read_json(url, params=params, etag=etag)
        if answer.status == 304:
            return Page(not_modified=True, etag=etag)
        if not isinstance(data, list):
            raise MalformedResponse(f"GET {url} answered {type(data).__name__}, expected a list", answer.status)
        items, skipped = [], []
        for raw in data:
            try:
                items.append(parse(raw))
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                if not each:
                    raise MalformedResponse(f"GET {url}: an item lacks a field ({exc})", answer.status) from None
                number = raw.get("number", "?") if isinstance(raw, dict) else "?"
                skipped.append((number, f"not read: GitHub sent it without a usable field ({exc.__class__.__name__})"))
        return Page(
            items=items,
            next_url=next_link(answer.headers.get("link", "")),
            etag=answer.headers.get("etag", ""),
            skipped=skipped,
        )

    # --- reads ----------------------------------------------------------------------------

    def issues_url(
        self, *, label: str = "", state: str = "open", since: datetime | None = None, sort: str = "created"
    ) -> str:
        """The first page's URL of the repo's issues, oldest first by `sort`, 100 a page."""
        params = {"state": state, "sort": sort, "direction": "asc", "per_page": 100}
        if label:
            params["labels"] = label
        if since is not None:
            params["since"] = since.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return f"/repos/{self.repo}/issues?{urlencode(params)}"

    def issues_page(self, url: str, *, etag: str = "") -> Page:
        """One page of issues from issues_url() or an earlier page's next_url; PRs included (callers skip them)."""
        return self._page(url, etag=etag, parse=parse_issue, each=True)

    def comments(self, number: int) -> list[CommentData]:
        """All comments of an issue, oldest first (one request per 100)."""
        return self._every_page(f"/repos/{self.repo}/issues/{number}/comments", parse=parse_comment)

    def label_events(self, number: int) -> list[LabelEventData]:
        """The issue's label events (who added or removed which label), oldest first (one request per 100 events)."""
        events = self._every_page(f"/repos/{self.repo}/issues/{number}/events", parse=parse_label_event)
        return [e for e in events if e is not None]

    def duplicate_events(self, number: int) -> list[DuplicateEventData]:
        """Who marked the issue a duplicate of which original (its timeline's marked_as_duplicate events), oldest
        first (one request per 100 timeline events)."""
        events = self._every_page(f"/repos/{self.repo}/issues/{number}/timeline", parse=parse_duplicate_event)
        return [e for e in events if e is not None]

    def labels(self) -> list[LabelData]:
        """The repo's whole label catalog."""
        return self._every_page(f"/repos/{self.repo}/labels", parse=parse_label)

    def label(self, name: str) -> LabelData | None:
        """One label of the repo's catalog as GitHub has it now (GET /labels/{name}, which matches names as GitHub
        does, whatever their case), or None when the repository has no such label."""
        try:
            answer, data = self._read_json(f"/repos/{self.repo}/labels/{quote(name, safe='')}")
        except PageGone:
            return None
        try:
            return parse_label(data)
        except (KeyError, TypeError, AttributeError) as exc:
            raise MalformedResponse(f"label {name!r}: unexpected answer ({exc})", answer.status) from None

    def _every_page(self, path: str, *, parse):
        """Every item of a paginated list, following Link headers, 100 a page."""
        page = self._page(path, params={"per_page": 100}, parse=parse)
        items = list(page.items)
        while page.next_url:
            page = self._page(page.next_url, parse=parse)
            items += page.items
        return items

    def issue(self, number: int) -> IssueData:
        """One issue as GitHub has it now; PageGone if it is gone (404/410)."""
        answer, data = self._read_json(f"/repos/{self.repo}/issues/{number}")
        try:
            return parse_issue(data)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise MalformedResponse(f"issue #{number}: unexpected answer ({exc})", answer.status) from None

    # --- writes -----------------------------------------------------------------------------

    def _pace(self) -> None:
        """Sleep until write_interval has passed since the previous mutation was answered."""
        wait = _last_write_at + self.write_interval - time.monotonic()
        if wait > 0:
            time.sleep(wait)

    def _write(self, action: str, target: str, verb: str, url: str, input=None) -> WriteResult:
        global _last_write_at
        # Counted from the previous answer, not its start: GitHub sees the gap even when a request was slow.
        with _write_lock:
            self._pace()
            try:
                answer = self._call(self._writer, verb, url, input=input)
            except GitHubError as exc:
                return WriteResult(action, target, exc.status, False, exc.message)
            finally:
                _last_write_at = time.monotonic()
        ok = 200 <= answer.status < 300
        if self.as_user and answer.status in (401, 403):
            return WriteResult(action, target, answer.status, False, self._refusal(answer))
        labels = data = None
        if ok:
            try:
                data = json.loads(answer.text)
                # A label write answers the labels, an issue PATCH the issue with its labels; a comment has none.
                raw_labels = data if isinstance(data, list) else data["labels"] if "labels" in data else None
                if raw_labels is not None:
                    labels = tuple(sorted(parse_label(raw).name for raw in raw_labels))
            except (ValueError, KeyError, TypeError, AttributeError):
                labels = None
        # The audit shows the labels GitHub says the issue has now, rather than raw JSON.
        response = f"labels now: {', '.join(labels)}" if labels is not None else excerpt(answer.text)
        return WriteResult(action, target, answer.status, ok, response, labels, data)

    def _refusal(self, answer: Answer) -> str:
        """What a person must do when GitHub refused their own token (401: revoked or expired; 403: no right)."""
        try:
            message = str(json.loads(answer.text).get("message", ""))
        except (ValueError, AttributeError):
            message = ""
        if answer.status == 401:
            why = excerpt(message, 100) or "bad credentials"
            return f"GitHub no longer accepts your token ({why}): sign in to GitHub again"
        if "rate limit" in message.lower():
            return f"GitHub's rate limit for your account is spent: {excerpt(message, 100)}"
        return (
            f"GitHub refused: your account lacks triage permission on {self.repo} "
            f"({excerpt(message, 100) or 'forbidden'}); ask a maintainer for the triage role"
        )

    def add_label(self, number: int, name: str) -> WriteResult:
        """Add one label (GitHub keeps the others): POST /issues/{n}/labels."""
        return self._write("add_label", name, "POST", f"/repos/{self.repo}/issues/{number}/labels", {"labels": [name]})

    def remove_label(self, number: int, name: str) -> WriteResult:
        """Remove one label: DELETE /issues/{n}/labels/{name}."""
        return self._write(
            "remove_label", name, "DELETE", f"/repos/{self.repo}/issues/{number}/labels/{quote(name, safe='')}"
        )

    def comment(self, number: int, body: str) -> WriteResult:
        """Post a comment (a standard reply): POST /issues/{n}/comments. The audit keeps its first line."""
        first_line = body.strip().splitlines()[0] if body.strip() else ""
        return self._write(
            "comment", first_line[:200], "POST", f"/repos/{self.repo}/issues/{number}/comments", {"body": body}
        )

    def close_issue(self, number: int, reason: str = "completed") -> WriteResult:
        """Close the issue with GitHub's state_reason: completed, not_planned (a question) or duplicate."""
        return self._write(
            "close",
            f"#{number} ({reason.replace('_', ' ')})",
            "PATCH",
            f"/repos/{self.repo}/issues/{number}",
            {"state": "closed", "state_reason": reason},
        )

    def repository_id(self, full_name: str) -> str:
        """The GraphQL node id of a repository ("pytorch/vision"); PageGone when there is none."""
        _, data = self._read_json(f"/repos/{full_name}")
        node_id = data.get("node_id") if isinstance(data, dict) else None
        if not node_id:
            raise MalformedResponse(f"repository {full_name}: no node_id in GitHub's answer")
        return node_id

    def transfer_issue(self, issue_node_id: str, repository_node_id: str, *, number: int, to: str) -> WriteResult:
        """Move the issue to another repository (G2). REST has no endpoint for it: GraphQL's transferIssue.

        GitHub answers 200 even when it refuses; the refusal is in `errors`, and counts as a failure.
        """
        mutation = (
            "mutation($issue: ID!, $repo: ID!) { transferIssue(input: {issueId: $issue, repositoryId: $repo}) "
            "{ issue { number url } } }"
        )
        result = self._write(
            "transfer",
            f"#{number} to {to}",
            "POST",
            "/graphql",
            {"query": mutation, "variables": {"issue": issue_node_id, "repo": repository_node_id}},
        )
        if not result.ok:
            return result
        data = result.data if isinstance(result.data, dict) else {}
        errors = data.get("errors")
        moved = ((data.get("data") or {}).get("transferIssue") or {}).get("issue")
        if errors or not isinstance(moved, dict):
            why = (
                "; ".join(str(e.get("message", e)) if isinstance(e, dict) else str(e) for e in errors)
                if isinstance(errors, list) and errors
                else "no issue in GitHub's answer"
            )
            return WriteResult(result.action, result.target, 422, False, f"GitHub refused the transfer: {excerpt(why)}")
        return WriteResult(result.action, result.target, result.status, True, f"now {moved.get('url', '')}")


# --- a Client from the settings ----------------------------------------------------------------


def configured(token: str) -> dict:
    """A Client's keywords from the settings (which GitHub, which repository, timeout, pacing, retries), acting
    with `token`."""
    return {
        "base_url": settings.GITHUB_API_URL,
        "token": token,
        "repo": settings.GITHUB_REPO,
        "timeout": settings.GITHUB_TIMEOUT,
        "write_interval": settings.GITHUB_WRITE_INTERVAL,
        "retry_backoff": settings.GITHUB_RETRY_BACKOFF,
    }


def user_client(token: str) -> Client:
    """A Client that acts with `token` (a signed-in user's, or the site's) at settings.GITHUB_API_URL."""
    return Client(**configured(token))


# The App's installation token, per process, until INSTALLATION_TOKEN_MARGIN before it expires
# (GitHub issues them for an hour): one token request an hour, not one per write.
INSTALLATION_TOKEN_MARGIN = 300
_installation_lock = threading.Lock()
_installation: dict = {}


def installation_token() -> str:
    """A token for the GitHub App's installation on GITHUB_REPO, cached until shortly before it expires.

    Finds the installation with the App's JWT (GET /repos/{repo}/installation), then asks for a token
    (POST /app/installations/{id}/access_tokens). Raises GitHubError when GitHub refuses either.
    """
    from github import GithubIntegration  # only the App setup needs it

    key = (settings.GITHUB_API_URL, settings.GITHUB_APP_ID, settings.GITHUB_REPO)
    with _installation_lock:
        cached = _installation.get(key)
        if cached and cached["expires_at"] > time.time() + INSTALLATION_TOKEN_MARGIN:
            return cached["token"]
        integration = GithubIntegration(
            base_url=settings.GITHUB_API_URL,
            auth=Auth.AppAuth(settings.GITHUB_APP_ID, settings.GITHUB_APP_PRIVATE_KEY),
            timeout=max(int(round(settings.GITHUB_TIMEOUT)), 1),
        )
        try:
            installation_id = cached["installation_id"] if cached else None
            if installation_id is None:
                owner, name = settings.GITHUB_REPO.split("/", 1)
                installation_id = integration.get_repo_installation(owner, name).id
            grant = integration.get_access_token(installation_id)
        except GithubException as exc:
            raise GitHubError(
                f"the GitHub App could not get an installation token ({exc.status})", exc.status
            ) from None
        except (requests.exceptions.RequestException, urllib3.exceptions.HTTPError) as exc:
            raise GitHubUnavailable(
                f"GitHub did not answer the App's token request ({exc.__class__.__name__})"
            ) from None
        expires_at = grant.expires_at.timestamp() if grant.expires_at else time.time() + 3600
        _installation[key] = {"token": grant.token, "expires_at": expires_at, "installation_id": installation_id}
        return grant.token


# --- long read-only walks over the repository (the history backfill, rubric_app/github/history.py)--------------


class PacedClient(Client):
    """A read-only Client for walks of thousands of requests: GitHub's rate limits are waited out, never failed.

    Every answer's X-RateLimit-Remaining/Reset is read: once `reserve` requests or fewer are left, the next request
    waits for the reset (the hour's last requests stay with the queue's sync and the decisions, which share the
    token). A 403 or 429 that says rate limit (rate_limit_wait) is sent again after Retry-After or the reset. Each
    wait is announced to on_wait(seconds, why) first, then slept with `sleep` (time.sleep; tests give a short,
    real one). `waited_s` sums the waits; `last_link` is the last answer's Link header (its rel="last" page says
    how long a listing is), `rate_reset` the budget's reset. 5xx answers and timeouts are retried as the site's
    reader retries them.
    """

    def __init__(self, *, sleep=time.sleep, on_wait=None, reserve: int = 0, **kwargs) -> None:
        super().__init__(**kwargs)
        self._sleep, self._on_wait, self.reserve = sleep, on_wait, reserve
        self.waited_s = 0.0
        self.last_link = ""
        self.rate_reset = 0  # epoch of the rate limit's next reset, as the last answer said
        self._reader = Github(
            **self._github_options,
            # Not GithubRetry: it sleeps on a rate limit itself (up to a cap, then raises). 403 and 429 come back here.
            retry=urllib3.Retry(
                total=5,
                backoff_factor=self._retry_backoff,
                backoff_max=4,
                status_forcelist=list(range(500, 600)),
                allowed_methods=frozenset({"GET"}),
                raise_on_status=False,
                respect_retry_after_header=False,
            ),
        )

    def _wait(self, seconds: float, why: str) -> None:
        if self._on_wait is not None:
            self._on_wait(seconds, why)
        log.info("waiting %.0f s: %s", seconds, why)
        self._sleep(seconds)
        self.waited_s += seconds

    def _before_request(self) -> None:
        """Wait for the reset once the budget is down to the reserve (never raise: a backfill may wait an hour)."""
        if not self._spent_until:
            return
        wait, until = self._spent_until - time.time() + 1, self._spent_until
        self._spent_until = 0
        if wait > 0:
            reset = datetime.fromtimestamp(until, UTC)
            self._wait(wait, f"{self.rate_remaining} requests left until the reset at {reset:%H:%M:%S} UTC")

    def _watch_rate_limit(self, answer: Answer) -> None:
        super()._watch_rate_limit(answer)
        reset = answer.headers.get("x-ratelimit-reset", "")
        self.rate_reset = int(reset) if reset.isdigit() else self.rate_reset
        if self.rate_remaining is not None and self.rate_remaining <= self.reserve and reset.isdigit():
            self._spent_until = int(reset)

    def _call(self, gh: Github, verb: str, url: str, *, params=None, headers=None, input=None) -> Answer:
        for _ in range(MAX_RATE_LIMIT_WAITS + 1):
            answer = super()._call(gh, verb, url, params=params, headers=headers, input=input)
            wait = rate_limit_wait(answer.status, answer.headers, answer.text, time.time())
            if wait is None:
                self.last_link = answer.headers.get("link", "")
                return answer
            self._spent_until = 0  # this wait covers the reset too
            self._wait(wait, f"GitHub answered {answer.status}: {excerpt(answer.text, 120)}")
        raise RateLimited(f"GitHub kept answering {answer.status} (rate limit) to GET {url}")
