from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from rubric_app.models import Issue
from rubric_app.runs import auto_bisect


class Command(BaseCommand):
    help = (
        "Queue automatic bisections of the open queue's repros (or of the issues named), within AUTO_BISECT's "
        "budgets: what the sync and webhooks do for each repro that arrives, for issues already here."
    )

    def add_arguments(self, parser):
        parser.add_argument("numbers", nargs="*", type=int, help="issue numbers (default: the open queue)")

    def handle(self, *args, numbers, **options):
        if settings.AUTO_BISECT == "off":
            raise CommandError("AUTO_BISECT is off: set AUTO_BISECT=cpu (or all) to bisect repros automatically")
        issues = Issue.objects.filter(number__in=numbers) if numbers else Issue.objects.in_queue()
        # An operator's pass over the queue: outside the hourly budget, which bounds arrivals (queue_for_issue).
        outcomes = auto_bisect.queue_for_issues(
            list(issues.values_list("pk", flat=True)), cause="backlog", backlog=True
        )
        queued = sum(o.reason == "queued" for o in outcomes)
        self.stdout.write(f"{queued} automatic bisections queued, {len(outcomes) - queued} not (no repro, or bounded)")
