"""Train the learned labeler (rubric/engine/model.py) from issues humans triaged: JSON-lines files, or the history in
the database behind the promotion gate (triage/model_store.py)."""

from __future__ import annotations

import getpass
import socket
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from rubric_app.rubric.engine.model import MODEL_FILE, SHIPPED_MODEL_FILE
from rubric_app.rubric.offline.evaluation import InputError, read_jsonl, split_held_out
from rubric_app.rubric.offline.fitting import fit_model
from rubric_app.triage import model_store


class Command(BaseCommand):
    help = (
        "Fit the explainable per-label logistic regression: from files, saved where the engine loads it; or from the "
        "history in the database, stored there and promoted only when the gate finds it at least as good as the "
        "model in use on the newest triaged issues (--force promotes anyway)."
    )

    def add_arguments(self, parser):
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--input", nargs="+", help="JSON-lines files with the labels triagers applied")
        source.add_argument(
            "--from-db",
            action="store_true",
            help="the triaged history and the triagers' decisions: a candidate in the database, behind the gate",
        )
        parser.add_argument(
            "--output",
            default=str(MODEL_FILE),
            help=f"with --input: where to save it (default {MODEL_FILE}; the shipped one is {SHIPPED_MODEL_FILE})",
        )
        parser.add_argument(
            "--keep-held-out",
            action="store_true",
            help="with --input: leave the held-out slice (one issue in five by a hash of its number) out of training, "
            "so evaluate_suggestions can report figures on issues the model never saw",
        )
        parser.add_argument("--force", action="store_true", help="with --from-db: promote whatever the gate says")
        parser.add_argument(
            "--folds", type=int, default=5, help="cross-validation folds for the calibration (default 5)"
        )

    def handle(self, *args, input, from_db, output, keep_held_out, force, folds, **options):
        if folds < 2:
            raise CommandError("--folds needs at least 2")
        if from_db:
            return self._from_history(force, folds)
        paths = [input] if isinstance(input, str) else input or []  # call_command may pass one path as a str
        records = [r for path in paths for r in self._from_file(path)]
        if keep_held_out:
            records, held = split_held_out(records)
            self.stdout.write(f"Keeping {len(held)} held-out issues out of training.")
        if len(records) < 20:
            raise CommandError(f"only {len(records)} labelled issues: too few to learn from (need 20)")
        model = fit_model(records, folds=folds)
        model.save(Path(output))
        self.stdout.write(f"Trained on {len(records)} issues; saved to {output}.")
        self.stdout.write(
            "  thresholds (calibrated probability): "
            + ", ".join(f"{k} {v:.2f}" for k, v in sorted(model.thresholds.items()))
        )
        self.stdout.write(
            "  out-of-fold figures on these issues: " + ", ".join(f"{k} {v}" for k, v in model.cross_validated.items())
        )
        for label, weights in model.weights.items():
            top = sorted(weights.items(), key=lambda kv: -kv[1])[:8]
            self.stdout.write(f"  {label}: " + ", ".join(f"{f} {w:+.2f}" for f, w in top))

    def _from_history(self, force: bool, folds: int) -> None:
        who = f"manage.py train_label_model{' --force' if force else ''} ({getpass.getuser()}@{socket.gethostname()})"
        try:
            model_store.train_from_history(force=force, trained_by=who, out=self.stdout.write, folds=folds)
        except model_store.TooLittleHistory as exc:
            raise CommandError(str(exc)) from None

    def _from_file(self, path):
        try:
            with open(path, encoding="utf-8") as fh:
                return list(read_jsonl(fh))
        except (OSError, InputError) as exc:
            raise CommandError(f"{path}: {exc}") from None
