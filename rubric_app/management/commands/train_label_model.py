"""Train the learned labeler (rubric/model.py) from issues humans triaged: a JSON-lines file or the synced database."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from rubric_app.rubric.evaluation import InputError, read_jsonl, training_examples
from rubric_app.rubric.model import MODEL_FILE, train


class Command(BaseCommand):
    help = "Fit the explainable per-label logistic regression and save it where the engine loads it."

    def add_arguments(self, parser):
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--input", help="JSON lines with the labels triagers applied")
        source.add_argument("--from-db", action="store_true", help="the synced issues that carry `triaged`")
        parser.add_argument("--output", default=str(MODEL_FILE), help=f"where to save the model (default {MODEL_FILE})")

    def handle(self, *args, input, from_db, output, **options):
        records = self._from_db() if from_db else self._from_file(input)
        if len(records) < 20:
            raise CommandError(f"only {len(records)} labelled issues: too few to learn from (need 20)")
        model = train(training_examples(records))
        model.save(Path(output))
        self.stdout.write(f"Trained on {len(records)} issues; saved to {output}.")
        for label, weights in model.weights.items():
            top = sorted(weights.items(), key=lambda kv: -kv[1])[:8]
            self.stdout.write(f"  {label}: " + ", ".join(f"{f} {w:+.2f}" for f, w in top))

    def _from_file(self, path):
        try:
            with open(path, encoding="utf-8") as fh:
                return list(read_jsonl(fh))
        except (OSError, InputError) as exc:
            raise CommandError(f"{path}: {exc}") from None

    def _from_db(self):
        from rubric_app.models import Issue

        issues = Issue.objects.filter(labels__name="triaged").prefetch_related("labels", "comments").distinct()
        return [
            {"number": i.number, "title": i.title, "body": i.body, "comments": [c.body for c in i.comments.all()],
             "labels": i.label_names(), "labels_truncated": False}
            for i in issues
        ]
