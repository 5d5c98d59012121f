"""Score the neighbours of Similar issues on JSON-lines issues (tests/data/pt2_dev.jsonl, pt2_train.jsonl):
precision@5 of a shared component against a TF-IDF baseline computed in the same run."""

from __future__ import annotations

import json
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from rubric_app.rubric.likeness.neighbours import VOCABULARY_FILE, Vocabulary
from rubric_app.rubric.offline.duplicate_recall import PAIRS_FILE, evaluate_duplicates
from rubric_app.rubric.offline.evaluation import InputError, issue_from_record, read_jsonl
from rubric_app.rubric.offline.neighbour_precision import evaluate_similarity


class Command(BaseCommand):
    help = "precision@k of the similar-issues neighbours (shared component) vs TF-IDF, and the neighbours' vote."

    def add_arguments(self, parser):
        parser.add_argument("--input", nargs="+", required=True, help="JSON-lines files; the pool is all of them")
        parser.add_argument("-k", type=int, default=5)
        parser.add_argument(
            "--engine",
            action="store_true",
            help="also score the engine's components without and with the neighbours' vote",
        )
        parser.add_argument(
            "--duplicates",
            nargs="?",
            const=str(PAIRS_FILE),
            default=None,
            metavar="PAIRS",
            help=f"also score finding the originals of real duplicate pairs (default {PAIRS_FILE.name}) in the input",
        )
        parser.add_argument(
            "--write-vocabulary",
            action="store_true",
            help=f"rebuild the document frequencies from the input into {VOCABULARY_FILE.name}, then score",
        )

    def handle(self, *args, input, k, engine, write_vocabulary, duplicates=None, **options):
        slices = {}
        for path in input:
            try:
                with open(path, encoding="utf-8") as fh:
                    slices[Path(path).name] = list(read_jsonl(fh))
            except (OSError, InputError) as exc:
                raise CommandError(f"{path}: {exc}") from None
        if not any(slices.values()):
            raise CommandError("no issues in the input")
        if k < 1:
            raise CommandError("-k needs 1 or more")
        if write_vocabulary:
            vocabulary = Vocabulary.build(issue_from_record(r, use_labels=False) for rs in slices.values() for r in rs)
            VOCABULARY_FILE.write_text(json.dumps(vocabulary.to_json(), separators=(",", ":")) + "\n", encoding="utf-8")
            self.stdout.write(f"wrote {VOCABULARY_FILE} ({len(vocabulary.df)} terms of {vocabulary.documents} issues)")
        report = evaluate_similarity(slices, k=k, engine=engine)
        self.stdout.write(
            f"issues with a failure signature: {report.signatures}; sharing a specific one with another: "
            f"{report.shared_signatures}"
        )
        self.stdout.write(
            f"precision@{k}: share of the {k} most similar issues (among those with a component) "
            "that share one of its components"
        )
        for name in ["all", *slices]:
            ours, base = report.ours.get(name), report.baseline.get(name)
            if ours is None:
                continue
            ratio = f"{ours.value / base.value:.2f}x" if base.value else "n/a"
            self.stdout.write(
                f"  {name:>20}: {ours.queries:4} issues  similar issues {ours.value:.3f}  "
                f"TF-IDF baseline {base.value:.3f}  ratio {ratio}"
            )
        self.stdout.write("neighbours' vote (leave-one-out; what the engine is given as a finding):")
        for name in ["all", *slices]:
            vote = report.vote.get(name)
            if vote is None:
                continue
            self.stdout.write(
                f"  {name:>20}: precision {vote.value:.3f} of {vote.shown} labels suggested, "
                f"on {report.vote_issues[name]} of {vote.queries} issues"
            )
        for (name, with_vote), counts in sorted(report.engine.items()):
            self.stdout.write(
                f"engine components {name:>8} {'with' if with_vote else 'without':>7} the vote: "
                f"P {counts.precision:.3f} R {counts.recall:.3f} F1 {counts.f1:.3f}"
            )
        if duplicates:
            self._duplicates(Path(duplicates), [r for rs in slices.values() for r in rs])

    def _duplicates(self, path: Path, records: list) -> None:
        try:
            report = evaluate_duplicates(records, path)
        except (OSError, ValueError, KeyError) as exc:
            raise CommandError(f"{path}: {exc}") from None
        w = report.weights
        self.stdout.write(
            f"possible duplicates: the originals of real pairs ({report.pairs['development']} development, "
            f"{report.pairs['held-out']} held-out: split by a hash of the original's number, fixed before any tuning) "
            f"in a pool of {report.pool} PT2 issues; each method's mark at its threshold (calibrated on the "
            f"development pairs: ours {report.calibrated['ours']:.4f}, shipped {report.thresholds['ours']:.2f}; TF-IDF "
            f"{report.calibrated['TF-IDF']:.4f}), on the pairs' duplicates and on the other {report.negatives} "
            "issues asked as they arrived (strict precision: those all count wrong)"
        )
        self.stdout.write(
            f"  weights chosen on the development pairs: title {w.title}, name {w.name}, margin {w.margin}; "
            "development (CV): each pair ranked with the weights the other pairs chose (leave-one-out), each fold "
            "marked at the threshold the other folds calibrated"
        )
        for part in ("development (CV)", "development", "held-out"):
            for method in ("ours", "TF-IDF"):
                f = report.figures[(method, part)]
                self.stdout.write(
                    f"  {part:>16} {method:>6}: {f.queries:2} pairs  top-1 {f.top(1):2}  top-5 {f.top(5):2}  "
                    f"marked {f.pair_marks} ({f.marked_right} right)  other issues marked {f.other_marks}  "
                    f"strict precision {f.precision:.3f}"
                )
