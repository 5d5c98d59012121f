"""Score the rubric engine against the labels humans applied (JSON lines, e.g. tests/data/pt2_dev.jsonl)."""

from __future__ import annotations

import json

from django.core.management.base import BaseCommand, CommandError

from rubric_app.bisection import verdict
from rubric_app.rubric.engine.assess import evaluate, shipped_model
from rubric_app.rubric.engine.model import train
from rubric_app.rubric.offline.evaluation import (
    COMPONENTS,
    REVIEW_TRUTH,
    InputError,
    binding,
    g4_ceiling,
    has_component,
    is_held_out,
    issue_from_record,
    keyword_baseline,
    precision_recall_curve,
    predict,
    read_jsonl,
    score,
    split_by_number,
    training_examples,
    without_fallback,
)
from rubric_app.rubric.offline.fitting import (
    Trust,
    calibration_table,
    cross_validate,
    cross_validated,
    learning_curve,
    trust,
)
from rubric_app.rubric.reading import automation
from rubric_app.rubric.reading.text import sources_of

TARGETS = (
    "targets (issue #29, on issues the engine never saw): component micro-F1 >= 0.80 at precision >= 0.80 on issues "
    "with a human component, pre-selected component precision >= 0.90 with a pre-selection on >= 75% of issues, "
    "review recall of escalated issues >= 0.80 with at most 20% of issues flagged, routing F1 >= 0.80"
)


def targets_met(t: Trust) -> list[tuple[str, bool]]:
    """Each target of issue #29 and whether these figures meet it."""
    c, p, r, v = t.components, t.preselected, t.routing, t.review
    return [
        (f"component F1 {c.f1:.2f} >= 0.80 at precision {c.precision:.2f} >= 0.80", c.f1 >= 0.8 and c.precision >= 0.8),
        (f"pre-selected precision {p.precision:.2f} >= 0.90", p.precision >= 0.9),
        (f"pre-selection coverage {t.coverage:.0%} >= 75%", t.coverage >= 0.75),
        (
            f"review recall of escalated issues {v.recall:.2f} >= 0.80 with {t.flagged_share:.0%} <= 20% flagged",
            v.recall >= 0.8 and t.flagged_share <= 0.2,
        ),
        (f"routing F1 {r.f1:.2f} >= 0.80", r.f1 >= 0.8),
    ]


def carries_automation(record: dict) -> bool:
    """Whether the record's thread holds a Repro Agent comment or a bisector's result (what the engine reads)."""
    facts = automation.read_automation(sources_of(issue_from_record(record, use_labels=False)), ())
    return bool(facts.agent or facts.bisections)


def with_verdicts(records: list[dict], cache: str) -> list[dict]:
    """records, each one bisect_pool ran carrying its verdict's labels (decided by today's verdict rules)."""
    try:
        with open(cache, encoding="utf-8") as fh:
            runs = {run["number"]: run["results"] for run in map(json.loads, filter(str.strip, fh))}
    except (OSError, ValueError, KeyError) as exc:
        raise CommandError(f"{cache}: {exc}") from None
    return [
        {**r, "bisection": verdict.decide(runs[r["number"]], "cpu").labels} if r["number"] in runs else r
        for r in records
    ]


class Command(BaseCommand):
    help = "Per-label precision/recall/F1, component micro-F1, routing F1 and review-flag figures."

    def add_arguments(self, parser):
        parser.add_argument(
            "--input", required=True, nargs="+", help="JSON-lines files with the labels triagers applied"
        )
        parser.add_argument(
            "--halves", action="store_true", help="also score the older and newer half (by issue number) apart"
        )
        parser.add_argument(
            "--kfold",
            type=int,
            default=0,
            metavar="K",
            help="also score the learned labeler held out: K models, each trained without the fold it labels",
        )
        parser.add_argument(
            "--split",
            action="store_true",
            help="development half (older issues) vs held-out half (newer): the held-out figures are the honest ones; "
            "a model is trained on the development half only; prints the precision/recall curve on the held-out half",
        )
        parser.add_argument(
            "--learning-curve",
            action="store_true",
            help="also print the learned labeler's out-of-fold core-component F1 on the training pool, "
            "trained on 25-100%% of the other folds",
        )
        parser.add_argument(
            "--without-automation",
            action="store_true",
            help="read no Repro Agent, bisector or other agents' comment (measures what they add)",
        )
        parser.add_argument(
            "--bisections",
            metavar="CACHE",
            help="bisect_pool's cache: each cached issue is scored with its bisection verdict as evidence (R2)",
        )
        parser.add_argument(
            "--min-confidence",
            type=float,
            default=0.0,
            metavar="T",
            help="suggest component labels only from this confidence up (the rest become checklist items)",
        )

    def handle(
        self, *args, input, halves, kfold, split, min_confidence, learning_curve=False, bisections=None, **options
    ):
        paths = [input] if isinstance(input, str) else input  # call_command may pass one path as a str
        records = []
        for path in paths:
            try:
                with open(path, encoding="utf-8") as fh:
                    records += list(read_jsonl(fh))
            except (OSError, InputError) as exc:
                raise CommandError(f"{path}: {exc}") from None
        if not records:
            raise CommandError(f"{', '.join(paths)}: no issues")
        if bisections:
            records = with_verdicts(records, bisections)
        if options.get("without_automation"):
            automation.READ_AUTOMATION = False
        if len({int(r["number"]) for r in records}) < len(records):
            raise CommandError(f"{', '.join(paths)}: an issue number appears twice (each issue is scored once)")
        if kfold == 1 or kfold < 0 or kfold > len(records):
            raise CommandError("--kfold needs 2 to the number of issues")
        if not 0.0 <= min_confidence <= 1.0:
            raise CommandError("--min-confidence needs a value from 0 to 1")
        if split:
            return self._split(records, kfold, min_confidence)
        model = shipped_model()
        rules_only = predict(records, use_model=False, min_confidence=min_confidence)
        self._report("rules alone", records, rules_only, per_label=model is None)
        if model is not None:
            self.stdout.write(
                f"(the shipped model was trained on {model.trained_on} issues: when that includes this file, "
                "the next figures are in-sample; the trust figures below keep the held-out slice apart)"
            )
            assessments = [evaluate(issue_from_record(r, use_labels=False), model=model) for r in records]
            self._report("rules + shipped model", records, [a.verdict() for a in assessments], per_label=True)
            self._trust_report(records, assessments, kfold)
        elif kfold:
            self._report(
                f"rules + model, {kfold}-fold held out", records, cross_validate(records, kfold), per_label=False
            )
        blind = [issue_from_record(r, use_labels=False) for r in records]
        for name, predicted in (
            ("baseline: every issue module: dynamo", [["module: dynamo"]] * len(records)),
            ("baseline: keyword regex labeler", [keyword_baseline(i) for i in blind]),
        ):
            c = score(records, predicted).components
            labelled = [i for i, r in enumerate(records) if has_component(r)]
            on = score([records[i] for i in labelled], [predicted[i] for i in labelled]).components
            self.stdout.write(
                f"{name:38} component micro precision {c.precision:.3f}  recall {c.recall:.3f}  F1 {c.f1:.3f}"
                f"  | on issues with a human component F1 {on.f1:.3f}"
            )
        if learning_curve:
            self._learning_curve([r for r in records if not is_held_out(r)])
        if halves:
            order = sorted(range(len(records)), key=lambda i: records[i]["number"])
            for name, part in (
                ("rules alone, older half", order[: len(order) // 2]),
                ("rules alone, newer half", order[len(order) // 2 :]),
            ):
                self._report(name, [records[i] for i in part], [rules_only[i] for i in part], per_label=False)
        self.stdout.write(TARGETS)

    def _split(self, records, kfold, min_confidence):
        """Development half, held-out half, whole set; the learned labeler only ever trained on the development half."""
        dev, held = split_by_number(records)
        if len(dev) < 2:
            raise CommandError("--split needs at least 4 issues")
        span = lambda part: f"#{part[0]['number']}-#{part[-1]['number']}"
        for name, part in (
            (f"rules alone, development half {span(dev)}", dev),
            (f"rules alone, HELD-OUT half {span(held)}", held),
            ("rules alone, whole set", records),
        ):
            self._report(name, part, predict(part, use_model=False, min_confidence=min_confidence), per_label=False)
        if kfold:
            if kfold > len(dev):
                raise CommandError("--kfold needs 2 to the number of issues in the development half")
            self._report(
                f"rules + model, {kfold}-fold within the development half",
                dev,
                cross_validate(dev, kfold),
                per_label=False,
            )
            model = train(training_examples(dev))
            self._report(
                "rules + model trained on the development half, HELD-OUT half",
                held,
                predict(held, model=model, min_confidence=min_confidence),
                per_label=False,
            )
        self.stdout.write(
            "== precision/recall of component labels on the HELD-OUT half, rules alone, by --min-confidence"
        )
        self.stdout.write(
            "  (dropped labels are replaced by G4's fallback, so the right-hand figures leave a lone fallback out)"
        )
        for threshold, c, bare in precision_recall_curve(held):
            self.stdout.write(
                f"  min confidence {threshold:4.2f}  precision {c.precision:.3f}  recall {c.recall:.3f}  F1 {c.f1:.3f}"
                f"  | w/o G4 fallback precision {bare.precision:.3f}  recall {bare.recall:.3f}  F1 {bare.f1:.3f}"
            )
        self.stdout.write(TARGETS)

    def _trust_report(self, records, assessments, kfold):
        """What `a` would apply: on the training pool (out of fold with --kfold, else in-sample) and on the
        held-out slice apart (evaluation.is_held_out: one issue in five by a hash of its number; the
        shipped model never trained on it), each scored truncation-aware and strict."""
        pool = [i for i, r in enumerate(records) if not is_held_out(r)]
        held = [i for i, r in enumerate(records) if is_held_out(r)]
        slices = []
        if pool and kfold:
            part = [records[i] for i in pool]
            slices.append(
                (
                    f"training pool, OUT OF FOLD ({kfold} models, "
                    "each trained, calibrated and thresholded without the fold it scores)",
                    part,
                    cross_validated(part, kfold),
                )
            )
        elif pool:
            slices.append(
                (
                    "training pool (in-sample: the shipped model trained on it; --kfold K for out-of-fold)",
                    [records[i] for i in pool],
                    [assessments[i] for i in pool],
                )
            )
        if held:
            slices.append(
                ("HELD-OUT slice (never trained on)", [records[i] for i in held], [assessments[i] for i in held])
            )
        if pool and kfold:
            # The same out-of-fold answers, on the issues whose thread holds what the automation said.
            part, judged = slices[0][1], slices[0][2]
            carrying = [i for i, r in enumerate(part) if carries_automation(r)]
            if carrying:
                slices.insert(
                    1,
                    (
                        f"OUT OF FOLD, the {len(carrying)} pool issues with a Repro Agent or bisector result",
                        [part[i] for i in carrying],
                        [judged[i] for i in carrying],
                    ),
                )
        for name, part, judged in slices:
            self._trust_block(name, part, judged)

    def _learning_curve(self, pool):
        """Would more triaged issues help? The learned labeler alone, out of fold on the training pool."""
        self.stdout.write(
            f"== learning curve: the learned labeler alone, core components, out of fold on the training pool "
            f"({len(pool)} issues), 3 seeds"
        )
        for fraction, size, mean, low, high in learning_curve(pool):
            self.stdout.write(
                f"  trained on {fraction:4.0%} of the other folds ({size:4} issues): "
                f"micro-F1 {mean:.3f} ({low:.3f}-{high:.3f})"
            )

    def _trust_block(self, name, records, assessments):
        out = self.stdout.write
        aware, strict = trust(records, assessments), trust(records, assessments, strict=True)
        out(f"== trust figures, {name}: {aware.issues} issues, {aware.labelled} with a human component")
        out(f"  {'':22} {'truncation-aware':34} | strict (labels truncation may hide count as absent)")
        line = lambda c: f"P {c.precision:.3f} R {c.recall:.3f} F1 {c.f1:.3f} ({c.tp}/{c.fp}/{c.fn})"
        for title, a, s in (
            ("component", aware.components, strict.components),
            ("routing", aware.routing, strict.routing),
            ("review flag", aware.review, strict.review),
        ):
            out(f"  {title:22} {line(a):34} | {line(s)}")
        for title, a, s in (
            ("pre-selected component", aware.preselected, strict.preselected),
            ("pre-selected route", aware.preselected_routes, strict.preselected_routes),
        ):
            out(
                f"  {title:22} precision {a.precision:.3f} ({a.tp} right, {a.fp} wrong){'':8} | "
                f"precision {s.precision:.3f} ({s.tp}/{s.fp})"
            )
        out(
            f"  pre-selection coverage: {aware.covered} of {aware.issues} issues ({aware.coverage:.0%}) "
            "get a pre-selected component"
        )
        threshold, precision = aware.precision_at_coverage(0.75)
        out(
            f"  operating points: pre-selecting down to confidence {threshold:.2f} would cover 75% of issues at "
            f"component precision {precision:.3f}; flagged: {aware.flagged} of {aware.issues} issues "
            f"({aware.flagged_share:.0%}); flagging the 20% most likely would reach "
            f"{aware.review_recall_at_share(0.2):.2f} of the escalated issues"
        )
        out(
            "  calibration (suggested components on issues with a human component, routes, review flag; "
            "truncation-aware):"
        )
        for low, high, n, observed in calibration_table(aware.points):
            if n:
                out(f"    confidence {low:.1f}-{high:.1f}: {n:4} labels, observed precision {observed:.2f}")
        out("  targets: " + "; ".join(f"{what}: {'met' if ok else 'NOT met'}" for what, ok in targets_met(aware)))
        self._binding_block(records, assessments)

    def _binding_block(self, records, assessments):
        """What `a` does on the slice (issue 43): triaged, flagged, routed, held; R11's recall by kind; the labels
        outside the scored components that `a` pre-selects, against the humans' labels."""
        b, out = binding(records, assessments), self.stdout.write
        share = lambda n: f"{n} ({n / b.issues:.0%})" if b.issues else "0"
        out(
            f"  `a` pre-selects: triaged on {share(b.triaged)}, triage review on {share(b.flagged)}, a route on "
            f"{share(b.routed)}; it holds triaged for a human on {share(b.held)} of {b.issues} issues"
        )
        out(
            "  R11 by what the humans' labels say the issue is (R11 binds: pre-selected; offered: suggested, unticked):"
        )
        for kind, (n, bound, offered) in b.r11.items():
            if n:
                out(f"    {kind:20} {n:4} issues: R11 binds on {bound} ({bound / n:.2f}), flag shown on {offered}")
        out("  pre-selected labels outside the scored components, against the humans' labels (truncation-aware):")
        for label, c in b.other.items():
            out(
                f"    {label:24} {c.tp} right, {c.fp} wrong (precision {c.precision:.2f}); humans applied it "
                f"{c.tp + c.fn}x"
            )

    def _report(self, name, records, predictions, per_label):
        result = score(records, predictions)
        out = self.stdout.write
        out(
            f"== {name}: {result.issues} issues "
            "(labels hidden from the engine; truncated label lists scored per the issue)"
        )
        if per_label:
            out(f"{'label':34} {'tp':>4} {'fp':>4} {'fn':>4} {'prec':>6} {'rec':>6} {'f1':>6}")
            for label, c in result.per_label.items():
                if c.tp + c.fp + c.fn:
                    out(f"{label:34} {c.tp:4} {c.fp:4} {c.fn:4} {c.precision:6.3f} {c.recall:6.3f} {c.f1:6.3f}")
            out("components = the module: labels RUBRIC.md governs: " + ", ".join(COMPONENTS))
            out(
                "  (aliases counted as the same label: module: aotdispatch -> module: pt2-dispatcher, "
                "module: cpu inductor -> oncall: cpu inductor)"
            )
            out("routing = the redirect oncall: labels (oncall: pt2 itself is excluded: every issue here has it)")
            out(f"review flag = the engine's triage review vs humans' {' or '.join(REVIEW_TRUTH)} (R11)")
            out(
                "G4-labelled = the issues to which humans applied at least one component label "
                "(G4 wants one on every issue)"
            )
            out(
                "G4 ceiling = a perfect engine that keeps G4: the humans' own labels, "
                "G4's fallback where they applied none"
            )
        # G4's fallback is a placeholder the triager is asked to replace: show the figure without it too.
        placeholder = score(records, [without_fallback(p) for p in predictions]).components
        # G4: every PT2 issue should end with a module label; humans left some without any. Scored apart:
        labelled = [i for i, r in enumerate(records) if has_component(r)]
        on_labelled = score([records[i] for i in labelled], [predictions[i] for i in labelled]).components
        # What a perfect engine would score here while keeping G4: the ceiling for precision.
        ceiling = score(records, g4_ceiling(records)).components
        rows = (
            ("component micro", result.components),
            ("  w/o G4 fallback", placeholder),
            (f"  on {len(labelled)} G4-labelled", on_labelled),
            ("  G4 ceiling", ceiling),
            ("routing micro", result.routing),
            ("review flag", result.review),
        )
        for title, c in rows:
            out(
                f"{title:16} precision {c.precision:.3f}  recall {c.recall:.3f}  F1 {c.f1:.3f}  "
                f"(tp {c.tp}, fp {c.fp}, fn {c.fn})"
            )
