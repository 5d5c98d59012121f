"""PyTorch's triage skill as the dashboard follows it: its label catalog (labels.json), its standard replies
(templates.json) and the repository's latest release, checked and compared with the copies shipped here.

The skill lives in pytorch/pytorch (`.agents/skills/triaging-issues/`) and changes; the sync reads it
(rubric_app/github/skill_files.py). The copies in rubric_app/data/ are the offline default. Pure Python: a file that
does not parse, a template with keys nobody knows, a tag that is no version each raise SkillFileError with the
reason, so the caller keeps its last good copy and says why.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache

from rubric_app.rubric.reading.catalog import OWN_REPLIES, REPLIES_FILE, is_forbidden, load_catalog
from rubric_app.rubric.rules.skill_additions import parse_release
from rubric_app.vocabulary import HUMAN_ONLY

# The paths of the skill's files in the repository, and what the sync calls each.
SKILL_DIR = ".agents/skills/triaging-issues"
LABELS_PATH = f"{SKILL_DIR}/labels.json"
TEMPLATES_PATH = f"{SKILL_DIR}/templates.json"
# Replies of the dashboard's own that the shipped file keeps beside PyTorch's (a duplicate's comment): they stay,
# whatever the repository's templates.json says.
DASHBOARD_REPLIES = ("duplicate",)
# What a template may say: anything else (a `close` flag, say) is a meaning the dashboard would not follow.
TEMPLATE_KEYS = frozenset({"action", "use_when", "comment"})


class SkillFileError(ValueError):
    """A skill file or release the dashboard cannot follow; str() says why, for the page."""


def parse_labels(text: str) -> tuple[dict, ...]:
    """labels.json's catalog as ({"name", "description"}, ...), in the file's order; SkillFileError when it is not
    JSON, has no `labels` list, or a label without a name."""
    data = _json(text, "labels.json")
    labels = data.get("labels") if isinstance(data, dict) else None
    if not isinstance(labels, list) or not labels:
        raise SkillFileError("labels.json has no list of labels")
    out: list[dict] = []
    seen: set[str] = set()
    for i, item in enumerate(labels):
        name = item.get("name") if isinstance(item, dict) else None
        if not isinstance(name, str) or not name.strip():
            raise SkillFileError(f"labels.json: label {i + 1} has no name")
        description = item.get("description") or ""
        if not isinstance(description, str):
            raise SkillFileError(f"labels.json: the description of {name!r} is not text")
        if name not in seen:
            seen.add(name)
            out.append({"name": name, "description": description})
    return tuple(out)


def parse_templates(text: str) -> dict[str, dict]:
    """templates.json's replies by name ({"action", "use_when", "comment"}); SkillFileError when it is not JSON,
    has no `templates`, a template without a comment, or one with a key nobody knows (TEMPLATE_KEYS)."""
    data = _json(text, "templates.json")
    templates = data.get("templates") if isinstance(data, dict) else None
    if not isinstance(templates, dict) or not templates:
        raise SkillFileError("templates.json has no templates")
    out: dict[str, dict] = {}
    for name, template in templates.items():
        if not isinstance(template, dict):
            raise SkillFileError(f"templates.json: {name!r} is not a template")
        unknown = sorted(set(template) - TEMPLATE_KEYS)
        if unknown:
            raise SkillFileError(f"templates.json: {name!r} has keys the dashboard does not know: {', '.join(unknown)}")
        if not isinstance(template.get("comment"), str) or not template["comment"].strip():
            raise SkillFileError(f"templates.json: {name!r} has no comment to post")
        if not all(isinstance(template.get(key, ""), str) for key in TEMPLATE_KEYS):
            raise SkillFileError(f"templates.json: {name!r} has a field that is not text")
        out[name] = {key: template.get(key, "") for key in ("action", "use_when", "comment")}
    return out


def parse_release_tag(tag: str) -> str:
    """The latest release's tag ("v2.13.0") when it is a released version; SkillFileError otherwise (G12 never
    compares with a guess)."""
    if not isinstance(tag, str) or parse_release(tag) is None:
        raise SkillFileError(f"the latest release's tag {str(tag)[:40]!r} is not a released version")
    return tag


def _json(text: str, name: str):
    try:
        return json.loads(text)
    except (ValueError, TypeError) as exc:
        raise SkillFileError(f"{name} is not JSON ({exc.__class__.__name__})") from None


@dataclass(frozen=True)
class Skill:
    """The skill the dashboard follows: labels, replies and release, with the files' shas ("" for a shipped copy)."""

    labels: tuple[dict, ...]
    templates: dict[str, dict] = field(default_factory=dict)
    labels_sha: str = ""
    templates_sha: str = ""
    release: str = ""  # "" when unknown (G12 then never adds release triage)

    def names(self) -> frozenset[str]:
        """The labels the dashboard may suggest and apply: the skill's catalog, and the labels only humans add
        (G13: the skill's bot may not, a triager may), minus what G7 forbids."""
        names = {item["name"] for item in self.labels} | set(HUMAN_ONLY)
        return frozenset(name for name in names if not is_forbidden(name))

    def descriptions(self) -> dict[str, str]:
        """{label: what it is for}, the skill's words first, then the shipped copy's (the human-only labels)."""
        shipped = {item["name"]: item["description"] for item in load_catalog()}
        return {**{n: shipped.get(n, "") for n in HUMAN_ONLY}, **{i["name"]: i["description"] for i in self.labels}}

    def replies(self) -> dict[str, dict]:
        """The standard replies by name: the skill's, and the dashboard's own (DASHBOARD_REPLIES, OWN_REPLIES)."""
        return {**self.templates, **own_replies()}

    def changes(self, base: Skill) -> Changes:
        """What this skill changed against `base` (the shipped copy)."""
        mine, theirs = {i["name"] for i in self.labels}, {i["name"] for i in base.labels}
        return Changes(
            labels_added=tuple(sorted(mine - theirs)),
            labels_removed=tuple(sorted(theirs - mine)),
            replies_added=tuple(sorted(set(self.templates) - set(base.templates))),
            replies_changed=tuple(
                sorted(n for n in set(self.templates) & set(base.templates) if self.templates[n] != base.templates[n])
            ),
            replies_removed=tuple(sorted(set(base.templates) - set(self.templates))),
        )


@dataclass(frozen=True)
class Changes:
    """A skill's differences from another, by name."""

    labels_added: tuple[str, ...] = ()
    labels_removed: tuple[str, ...] = ()
    replies_added: tuple[str, ...] = ()
    replies_changed: tuple[str, ...] = ()
    replies_removed: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return any(
            (self.labels_added, self.labels_removed, self.replies_added, self.replies_changed, self.replies_removed)
        )


@cache
def _shipped_replies() -> dict[str, dict]:
    with open(REPLIES_FILE, encoding="utf-8") as fh:
        return json.load(fh)["templates"]


def own_replies() -> dict[str, dict]:
    """The dashboard's own replies: the shipped file's DASHBOARD_REPLIES and catalog.OWN_REPLIES."""
    return {**{n: _shipped_replies()[n] for n in DASHBOARD_REPLIES}, **OWN_REPLIES}


@cache
def shipped() -> Skill:
    """The copies shipped in rubric_app/data/: the offline default, and what /rubric compares the repository's with.
    The dashboard's own replies are not the skill's: they stay out of it."""
    templates = {n: t for n, t in _shipped_replies().items() if n not in DASHBOARD_REPLIES and n not in OWN_REPLIES}
    labels = tuple({"name": i["name"], "description": i.get("description", "")} for i in load_catalog())
    return Skill(labels=labels, templates=templates)
