"""`python manage.py sync_queue [--full]`: sync the oncall: pt2 queue from GitHub now."""

from django.core.management.base import BaseCommand, CommandError

from rubric_app.github import client as github
from rubric_app.github.sync import sync_queue
from rubric_app.triage import followups


class Command(BaseCommand):
    help = "Sync the oncall: pt2 queue from GitHub (incremental; --full lists every page)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--full", action="store_true", help="List every page instead of what changed since the last sync."
        )

    def handle(self, *args, full: bool = False, **options):
        try:
            report = sync_queue(full=full, on_changed=followups.issues_changed)
        except github.GitHubError as exc:
            raise CommandError(f"Sync stopped: {exc.message} (the next run resumes where it stopped).") from None
        self.stdout.write(report.summary())
