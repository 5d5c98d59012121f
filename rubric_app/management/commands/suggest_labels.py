"""Run the rubric engine offline over a JSON-lines file of issues (no database rows, network or token needed)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from rubric_app.rubric.engine.assess import evaluate
from rubric_app.rubric.offline.evaluation import InputError, issue_from_record, output_line, read_jsonl


class Command(BaseCommand):
    help = "Suggest labels for each issue of a JSON-lines file; write one JSON line per issue."

    def add_arguments(self, parser):
        parser.add_argument("--input", required=True, help="JSON lines: number, title, body, comments, labels")
        parser.add_argument("--output", required=True, help="where to write the suggestions (JSON lines)")
        parser.add_argument(
            "--ignore-labels",
            action="store_true",
            help="treat every issue as unlabelled (when the file's labels are the answers, as in an eval set)",
        )

    def handle(self, *args, input, output, ignore_labels, **options):
        try:
            with open(input, encoding="utf-8") as fh:
                records = list(read_jsonl(fh))
        except (OSError, InputError) as exc:
            raise CommandError(f"{input}: {exc}") from None
        # Everything is computed before the output file is opened: a bad input never truncates it.
        lines = [
            json.dumps(output_line(r["number"], evaluate(issue_from_record(r, use_labels=not ignore_labels))))
            for r in records
        ]
        with open(output, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + ("\n" if lines else ""))
        self.stdout.write(f"Wrote suggestions for {len(lines)} issues to {output}.")
