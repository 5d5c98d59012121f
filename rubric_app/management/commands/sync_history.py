"""Backfill the repository's history (every issue that carried a queue label, open or closed), or keep it current."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime

from django.core.management.base import BaseCommand, CommandError

from rubric_app.github import client as github
from rubric_app.github import history
from rubric_app.triage import followups


def _date(value: str) -> datetime:
    """A date (2025-01-31) or an ISO date and time; UTC unless it says otherwise."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is no date: give one as 2025-01-31") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class Command(BaseCommand):
    help = (
        "Mirror every issue that carried a queue label, open or closed, with its comments (github/history.py): "
        "resumes a backfill under way at its cursor, starts one when none was done, else fetches what changed since "
        "the last run."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--since", type=_date, help="only issues updated since this date (GitHub's since): a backfill of them"
        )
        parser.add_argument("--restart", action="store_true", help="drop the saved cursor: back to the first page")

    def handle(self, *args, since, restart, **options):
        try:
            report = history.sync_history(
                since=since, restart=restart, out=self.stdout.write, on_changed=followups.issues_changed
            )
        except github.GitHubError as exc:
            raise CommandError(f"{exc.message} (what was stored stays; run again to resume)") from None
        if report.skipped:
            raise CommandError("another history sync holds the claim; it resumes where it stops")
