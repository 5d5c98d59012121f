"""Index every mirrored issue for Similar issues (failure signature and term vector), e.g. after upgrading."""

from __future__ import annotations

import time

from django.core.management.base import BaseCommand

from rubric_app.models import Issue
from rubric_app.triage import followups, similar
from rubric_app.triage.suggestions import refresh as refresh_suggestions


class Command(BaseCommand):
    help = (
        "Recompute every issue's failure signature and similarity vector and the open queue's possible-duplicate marks "
        "(the sync keeps them current from then on); "
        "--suggestions then refreshes the open queue's suggestions, whose neighbours' vote reads the whole index."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--suggestions", action="store_true", help="also refresh the open queue issues' suggestions"
        )

    def handle(self, *args, suggestions, **options):
        start = time.monotonic()
        count = similar.reindex(Issue.objects.all())
        self.stdout.write(
            f"indexed {count} issues in {time.monotonic() - start:.1f} s; "
            f"{Issue.objects.exclude(signature='').count()} have a failure signature to group by"
        )
        marked, queued = followups.queue_reindexed()
        self.stdout.write(f"{marked} of the {queued} open queue issues carry a possible-duplicate mark")
        if suggestions:
            start = time.monotonic()
            count = refresh_suggestions(Issue.objects.in_queue())
            self.stdout.write(
                f"refreshed the suggestions of {count} open queue issues in {time.monotonic() - start:.1f} s"
            )
