"""Train the learned labeler (rubric/model.py) from issues humans triaged: a JSON-lines file or the synced database."""

from __future__ import annotations

from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from rubric_app.rubric.model import MODEL_FILE, MODEL_LABELS, SHIPPED_MODEL_FILE
from rubric_app.rubric.offline.evaluation import (
    ALIASES,
    COMPONENTS,
    InputError,
    read_jsonl,
    split_held_out,
    training_examples,
)
from rubric_app.rubric.offline.fitting import fit_model
from rubric_app.vocabulary import TRIAGED


class Command(BaseCommand):
    help = "Fit the explainable per-label logistic regression and save it where the engine loads it."

    def add_arguments(self, parser):
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--input", nargs="+", help="JSON-lines files with the labels triagers applied")
        source.add_argument("--from-db", action="store_true", help="the synced issues that carry `triaged`")
        parser.add_argument(
            "--output",
            default=str(MODEL_FILE),
            help=f"where to save the model (default {MODEL_FILE}; the shipped one is {SHIPPED_MODEL_FILE})",
        )
        parser.add_argument(
            "--keep-held-out",
            action="store_true",
            help="leave the held-out slice (one issue in five by a hash of its number) out of training, "
            "so evaluate_suggestions can report figures on issues the model never saw",
        )
        parser.add_argument(
            "--folds", type=int, default=5, help="cross-validation folds for the calibration (default 5)"
        )

    def handle(self, *args, input, from_db, output, keep_held_out, folds, **options):
        paths = [input] if isinstance(input, str) else input or []  # call_command may pass one path as a str
        records = self._from_db() if from_db else [r for path in paths for r in self._from_file(path)]
        decisions = decision_examples() if from_db else []
        if decisions:
            self.stdout.write(
                f"Learning from {len(decisions)} triagers' decisions too (what they added, removed or unticked)."
            )
        if keep_held_out:
            records, held = split_held_out(records)
            self.stdout.write(f"Keeping {len(held)} held-out issues out of training.")
        if len(records) < 20:
            raise CommandError(f"only {len(records)} labelled issues: too few to learn from (need 20)")
        if folds < 2:
            raise CommandError("--folds needs at least 2")
        model = fit_model(records, folds=folds, decisions=decisions)
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

    def _from_file(self, path):
        try:
            with open(path, encoding="utf-8") as fh:
                return list(read_jsonl(fh))
        except (OSError, InputError) as exc:
            raise CommandError(f"{path}: {exc}") from None

    def _from_db(self):
        from rubric_app.models import Issue

        issues = Issue.objects.filter(labels__name=TRIAGED).prefetch_related("labels", "comments").distinct()
        return [issue_record(i) for i in issues]


def issue_record(issue) -> dict:
    """One synced issue as a training record (its current labels are the answers)."""
    return {
        "number": issue.number,
        "title": issue.title,
        "body": issue.body,
        "author": issue.author,
        "comments": [{"body": c.body, "author": c.author} for c in issue.comments.all()],
        "labels": issue.label_names(),
        "labels_truncated": False,
    }


def decision_examples() -> list:
    """Triagers' applied decisions as extra training examples, on top of the issues' labels.

    A learned label the triager added is a positive; one they removed, or one the page showed them that they
    left unticked (shown, neither added nor already on the issue), is an explicit negative. "Shown" is what
    the decision recorded (suggestions_shown), not what the engine suggests now: suggestions are recomputed
    once a decision's labels land, so today's would misread what the triager saw. An issue's newest decision
    speaks for a label first; meeting decisions settle the review, not the labels, and are left out (as on
    the rubric health page). Labels no decision speaks to stay unknown (None) for that example.
    """
    from rubric_app.models import Issue, TriageDecision

    decided = (
        TriageDecision.objects.filter(status=TriageDecision.Status.APPLIED, meeting_decision="")
        .order_by("-created_at", "-pk")
        .values_list("issue_id", "labels_seen", "labels_added", "labels_removed", "suggestions_shown")
    )
    by_issue: dict[int, dict[str, bool]] = {}
    for issue_id, seen, added, removed, shown in decided.iterator(chunk_size=2000):
        seen, added, removed = set(seen or []), set(added or []), set(removed or [])
        unticked = {item.get("label", "") for item in shown or []} - added - seen
        # As for the training files (evaluation.answer): an issue left without a component (a hand-off, a
        # question closed) was not labelled "none of these", so its components stay unknown.
        with_component = any(ALIASES.get(l, l) in COMPONENTS for l in (seen - removed) | added)
        answers = by_issue.setdefault(issue_id, {})
        for labels, answer in ((added, True), (removed, False), (unticked, False)):
            for label in (ALIASES.get(l, l) for l in labels):
                if label in MODEL_LABELS and (answer or with_component or label not in COMPONENTS):
                    answers.setdefault(label, answer)
    by_issue = {issue_id: answers for issue_id, answers in by_issue.items() if answers}
    examples = []
    for issue in Issue.objects.filter(pk__in=by_issue).prefetch_related("labels", "comments").order_by("pk"):
        ((feats, _answers),) = training_examples([issue_record(issue)])
        examples.append((feats, {label: by_issue[issue.pk].get(label) for label in MODEL_LABELS}))
    return examples
