"""PyTorch's triage skill as the repository has it: its labels.json and templates.json, and the latest release.

The sync reads them (sync_skill) before the queue, with conditional requests: GitHub answers an unchanged file
with 304, which costs no rate limit, and nothing is read again. What was read is kept in SkillFile rows; the
skill in use (in_use) is the repository's where a good copy was read, the copies shipped in rubric_app/data/
otherwise (the offline default). A file that cannot be read or parsed, a template with keys nobody knows, a tag
that is not a version: the row keeps its last good copy and says why (/rubric shows it); nothing raises.

Labels' names decide what may be suggested and applied (Label.allowed_for_triage, apply_catalog), their
descriptions are shown where a triager picks a label, the replies are what decisions post, and the release is
what G12 compares an issue's version with.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import quote

from django.utils import timezone

from rubric_app.github import client as github
from rubric_app.github.data import MalformedResponse, ReleaseData, RepoFile, parse_time
from rubric_app.models import Label, SkillFile
from rubric_app.rubric.engine import skill
from rubric_app.rubric.engine.skill import Changes, Skill, SkillFileError

RELEASE_PATH = "releases/latest"  # what the release's row says it was read from
FILES = (
    (SkillFile.LABELS, skill.LABELS_PATH, skill.parse_labels),
    (SkillFile.TEMPLATES, skill.TEMPLATES_PATH, skill.parse_templates),
)


@dataclass
class SkillReport:
    """What one read of the skill did: changed says the skill in use changed (its catalog and the issues'
    suggestions must follow); errors, why a file or the release was not taken."""

    changed: bool = False
    errors: list[str] = field(default_factory=list)


def sync_skill(gh: github.Client) -> SkillReport:
    """Read the skill's files and the latest release (three conditional requests), keep what is good, and make the
    label catalog follow when the skill in use changed. Never raises for GitHub or a bad file: the row says why."""
    rows = SkillFile.objects.by_name()
    report = SkillReport()
    for name, path, parse in FILES:
        row = rows.get(name) or SkillFile(name=name, path=path)
        report.changed |= _read_file(gh, row, path, parse)
        report.errors += [row.error] if row.error else []
    row = rows.get(SkillFile.RELEASE) or SkillFile(name=SkillFile.RELEASE, path=RELEASE_PATH)
    report.changed |= _read_release(gh, row)
    report.errors += [row.error] if row.error else []
    if report.changed:
        apply_catalog(in_use())
    return report


def _read_file(gh: github.Client, row: SkillFile, path: str, parse) -> bool:
    """Read one file into its row (kept as the last good copy unless this one parses); True when its content changed."""
    now = row.checked_at = timezone.now()
    try:
        got = repo_file(gh, path, etag=row.etag)
    except github.GitHubError as exc:
        return _failed(row, f"could not read {path}: {exc.message}", now)
    if got.not_modified:
        row.save()
        return False
    row.etag = got.etag  # a broken file is not read again either, until it changes
    try:
        content = parse(got.text)
    except SkillFileError as exc:
        return _failed(row, f"{exc} (sha {got.sha[:10]})", now)
    content = list(content) if isinstance(content, tuple) else content
    changed = content != row.content
    row.content, row.sha, row.path, row.read_at, row.error, row.error_at = content, got.sha, path, now, "", None
    row.save()
    return changed


def _read_release(gh: github.Client, row: SkillFile) -> bool:
    """Read the latest release into its row; True when its tag changed."""
    now = row.checked_at = timezone.now()
    try:
        got = latest_release(gh, etag=row.etag)
    except github.GitHubError as exc:
        return _failed(row, f"could not read the latest release: {exc.message}", now)
    if got.not_modified:
        row.save()
        return False
    row.etag = got.etag
    try:
        tag = skill.parse_release_tag(got.tag)
    except SkillFileError as exc:
        return _failed(row, str(exc), now)
    changed = (row.content or {}).get("tag") != tag
    published = got.published_at.isoformat() if got.published_at else ""
    row.content = {"tag": tag, "name": got.name, "published_at": published}
    row.sha, row.read_at, row.error, row.error_at = tag, now, "", None
    row.save()
    return changed


def _failed(row: SkillFile, why: str, now: datetime) -> bool:
    """Keep the last good copy and say why this answer was not taken."""
    fallback = "the latest release is unknown" if row.name == SkillFile.RELEASE else "the shipped copy is in use"
    row.error = f"{why}: {'the last good copy stays' if row.content is not None else fallback}"
    row.error_at = now
    row.save()
    return False


def in_use(rows: dict[str, SkillFile] | None = None) -> Skill:
    """The skill the dashboard follows: each file's good copy from the repository where one was read, else the
    shipped copy; the release where one was read, else "" (unknown: G12 never adds release triage). One query."""
    rows = SkillFile.objects.by_name() if rows is None else rows
    base = skill.shipped()
    labels, templates, release = rows.get(SkillFile.LABELS), rows.get(SkillFile.TEMPLATES), rows.get(SkillFile.RELEASE)
    return Skill(
        labels=tuple(labels.content) if labels and labels.content else base.labels,
        templates=dict(templates.content) if templates and templates.content else base.templates,
        labels_sha=labels.sha if labels and labels.content else "",
        templates_sha=templates.sha if templates and templates.content else "",
        release=(release.content or {}).get("tag", "") if release else "",
    )


def current_release() -> str:
    """The latest release's tag as last read ("" when unknown): what the engine compares versions with (G12)."""
    content = SkillFile.objects.filter(name=SkillFile.RELEASE).values_list("content", flat=True).first()
    return (content or {}).get("tag", "")


def replies() -> dict[str, dict]:
    """The standard replies in use by name (the skill's and the dashboard's own)."""
    return in_use().replies()


def apply_catalog(current: Skill) -> int:
    """Label.allowed_for_triage follows the catalog in use (G7's forbidden labels stay out); returns how many rows
    changed."""
    names = current.names()
    changed = Label.objects.filter(name__in=names, allowed_for_triage=False).update(allowed_for_triage=True)
    return changed + Label.objects.filter(allowed_for_triage=True).exclude(name__in=names).update(
        allowed_for_triage=False
    )


@dataclass(frozen=True)
class FileStatus:
    """One row as /rubric shows it."""

    name: str
    path: str
    sha: str
    read_at: datetime | None
    checked_at: datetime | None
    error: str
    from_repository: bool


@dataclass(frozen=True)
class SkillStatus:
    """The skill in use, each file's state, and what the repository's copy changed against the shipped one."""

    skill: Skill
    files: list[FileStatus]
    changes: Changes


def status() -> SkillStatus:
    """What /rubric shows of the skill: the version in use (the files' shas), errors, and the changes. One query."""
    rows = SkillFile.objects.by_name()
    current = in_use(rows)
    files = []
    for name, path in ((SkillFile.LABELS, skill.LABELS_PATH), (SkillFile.TEMPLATES, skill.TEMPLATES_PATH)):
        row = rows.get(name)
        files.append(
            FileStatus(
                name,
                row.path if row else path,
                row.sha if row and row.content else "",
                row.read_at if row else None,
                row.checked_at if row else None,
                row.error if row else "",
                bool(row and row.content),
            )
        )
    row = rows.get(SkillFile.RELEASE)
    files.append(
        FileStatus(
            SkillFile.RELEASE,
            RELEASE_PATH,
            current.release,
            row.read_at if row else None,
            row.checked_at if row else None,
            row.error if row else "",
            bool(current.release),
        )
    )
    return SkillStatus(current, files, current.changes(skill.shipped()))


# --- the reads (GitHub's contents and releases APIs) ---------------------------------------------------------


def repo_file(gh: github.Client, path: str, *, ref: str = "", etag: str = "") -> RepoFile:
    """One file of the repository (GET /repos/{repo}/contents/{path}), decoded as UTF-8; with `etag`, an unchanged
    file is answered 304 and not read again. PageGone when there is no such file; MalformedResponse when the answer
    is no file (a directory, a symlink) or its content does not decode."""
    answer, data = gh._read_json(
        f"/repos/{gh.repo}/contents/{quote(path)}", params={"ref": ref} if ref else None, etag=etag
    )
    if answer.status == 304:
        return RepoFile(path, etag=etag, not_modified=True)
    if not isinstance(data, dict) or data.get("type") != "file":
        raise MalformedResponse(f"{path} is not a file in {gh.repo}", answer.status)
    try:
        raw = data.get("content") or ""
        text = base64.b64decode(raw) if data.get("encoding") == "base64" else raw.encode()
        return RepoFile(path, text.decode("utf-8"), str(data.get("sha") or ""), answer.headers.get("etag", ""))
    except (ValueError, TypeError) as exc:  # binascii.Error and UnicodeDecodeError are ValueErrors
        why = f"{path}: its content does not decode ({exc.__class__.__name__})"
        raise MalformedResponse(why, answer.status) from None


def latest_release(gh: github.Client, *, etag: str = "") -> ReleaseData:
    """The repository's latest release (GET /repos/{repo}/releases/latest: neither a draft nor a prerelease); with
    `etag`, an unchanged one is answered 304. PageGone when the repository has none."""
    answer, data = gh._read_json(f"/repos/{gh.repo}/releases/latest", etag=etag)
    if answer.status == 304:
        return ReleaseData(etag=etag, not_modified=True)
    if not isinstance(data, dict) or not isinstance(data.get("tag_name"), str):
        raise MalformedResponse(f"the latest release of {gh.repo} has no tag", answer.status)
    try:
        published = parse_time(data.get("published_at"))
    except (TypeError, ValueError):
        published = None
    return ReleaseData(data["tag_name"], str(data.get("name") or ""), published, answer.headers.get("etag", ""))
