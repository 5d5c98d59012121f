from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from rubric_app.runs import build_checks


class Command(BaseCommand):
    help = (
        "Re-run, on the newest torch build a live worker hosts, the open queue's repros that an older build reproduced "
        "(what the beat sweep does every 5 minutes), within AUTO_BISECT_PER_HOUR; print what was queued and why not."
    )

    def handle(self, *args, **options):
        if settings.AUTO_BISECT == "off":
            raise CommandError("AUTO_BISECT is off: re-checks run untrusted code automatically, so they need it on")
        done = build_checks.queue_rechecks()
        for recheck in done:
            self.stdout.write(f"#{recheck.issue_number}: {recheck.reason}")
        queued = sum(r.reason == "queued" for r in done)
        self.stdout.write(f"{queued} re-checks queued, {len(done) - queued} not")
