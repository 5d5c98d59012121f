"""The demo data set: the shipped label catalog and ~40 project-written PT2 issues.

Used by `manage.py load_demo`, which the run command calls when there is no
GITHUB_TOKEN, so the dashboard shows realistic issues with no GitHub access.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from django.db import transaction
from django.utils import timezone

# One source for the demo's file and label colours: the demo GitHub serves the same ones.
from rubric_app.demo.github_seeds import DEMO_FILE, colour_for
from rubric_app.models import Comment, Issue, Label
from rubric_app.rubric.reading.catalog import allowed_for_triage, load_catalog
from rubric_app.triage import followups
from rubric_app.vocabulary import TRIAGE_REVIEW


def load_catalog_labels() -> int:
    """Upsert the shipped triage catalog into Label; returns how many labels it holds."""
    catalog = load_catalog()
    for item in catalog:
        Label.objects.update_or_create(
            name=item["name"],
            defaults={
                "description": item["description"],
                "allowed_for_triage": allowed_for_triage(item["name"]),
                "in_catalog": True,
            },
            create_defaults={
                "description": item["description"],
                "allowed_for_triage": allowed_for_triage(item["name"]),
                "color": colour_for(item["name"]),
            },
        )
    return len(catalog)


def _when(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@transaction.atomic
def load_demo_issues(path: Path = DEMO_FILE, repo: str = "pytorch/pytorch") -> int:
    """Upsert the demo issues with their comments and labels; returns the number loaded.

    Labels the catalog lacks are created as not allowed for triage, as the sync does.
    """
    with open(path, encoding="utf-8") as fh:
        demo = json.load(fh)
    issues = demo["issues"]
    for name in demo.get("repo_labels", ()):  # on the demo repo, outside the catalog: never suggested
        Label.objects.update_or_create(
            name=name, defaults={"in_catalog": True}, create_defaults={"color": colour_for(name)}
        )
    labels = {label.name: label for label in Label.objects.all()}
    now = timezone.now()
    for data in issues:
        issue, _ = Issue.objects.update_or_create(
            number=data["number"],
            defaults={
                "repo": repo,
                "title": data["title"],
                "body": data["body"],
                "state": data.get("state", "open"),
                "author": data.get("author", ""),
                "html_url": f"https://github.com/{repo}/issues/{data['number']}",
                "created_at": _when(data["created_at"]),
                "updated_at": _when(data["updated_at"]),
                "comments_count": len(data.get("comments", [])),
                "in_queue": data.get("state", "open") == "open",
                # GitHub's close: why and when (a demo issue closed as completed when it was last updated).
                "state_reason": data.get("state_reason", "completed") if data.get("state") == "closed" else "",
                "closed_at": _when(data.get("closed_at") or data["updated_at"])
                if data.get("state") == "closed"
                else None,
                "last_synced_at": now,
                "comments_synced_at": now,
                "review_flagged_at": _when(data["updated_at"]) if TRIAGE_REVIEW in data["labels"] else None,
            },
        )
        for name in data["labels"]:
            if name not in labels:
                labels[name] = Label.objects.create(
                    name=name, color=colour_for(name), allowed_for_triage=False, in_catalog=False
                )
        issue.labels.set([labels[name] for name in data["labels"]])
        for comment in data.get("comments", []):
            Comment.objects.update_or_create(
                github_id=comment["id"],
                defaults={
                    "issue": issue,
                    "author": comment.get("author", ""),
                    "author_association": comment.get("author_association", "NONE"),
                    "body": comment["body"],
                    "created_at": _when(comment["created_at"]),
                    "updated_at": _when(comment["created_at"]),
                },
            )
    followups.issues_loaded(
        list(Issue.objects.filter(number__in=[d["number"] for d in issues]).values_list("pk", flat=True))
    )
    return len(issues)
