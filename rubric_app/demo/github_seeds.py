"""What the demo GitHub serves: the demo issues and the label catalog, the triage skill's files and a release, the
harvested issues as a repository's history, and the demo's people (an org, its teams, an OAuth app)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from rubric_app.demo.github_server import BOT_LOGIN, FakeGitHub, _parse_iso
from rubric_app.vocabulary import BOT_TRIAGED, HIGH_PRIORITY, PT2_ONCALL, QUEUE_LABELS, TRIAGE_REVIEW, TRIAGED

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
    from rubric_app.rubric.reading.catalog import load_catalog

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


# A harvested thread's marks ("login · comment · 2024-05-01"), as rubric/reading/text.py reads them.
THREAD_MARK = re.compile(r"^([^\s·]{1,60}) · (description|comment) · (\d{4}-\d{2}-\d{2})[^\n]{0,40}$", re.M)


def seed_history(fake: FakeGitHub, records: list[dict]) -> int:
    """Serve harvested issues (the JSON-lines records of tests/data: number, title, body, labels, state) as the
    repository's history: each body's thread becomes the issue's description and its
    comments (authors and dates from the thread's marks), a record without a queue label gets `oncall: pt2` (every
    harvested issue was a PT2 one; its label was handed off or cut by the harvest), dates follow the numbers where
    the thread has none, closed issues are closed as completed a day after their last post. Returns how many."""
    from rubric_app.rubric.reading.text import split_thread_authored  # pure Python, like this module

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
