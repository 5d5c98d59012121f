"""Offline runs of the engine over JSON-lines issues, and its score against the labels humans applied.

Input lines: {"number", "title", "body", "comments": [str], "labels": [str], "labels_truncated": bool}.
`labels_truncated: true` means only the first five labels, in sorted order, are shown: a label that
sorts after the fifth is unknown and counts as neither a hit nor a miss.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rubric_app.rubric.engine import OWN_CURVES, Reading, calibration_key, decide, evaluate, model_key, read, strongest
from rubric_app.rubric.facts import COMPILE_UX, CPU_ONCALL, DISPATCHER, PT2_ONCALL, REVIEW
from rubric_app.rubric.model import COMPONENT_LABELS, MODEL_LABELS, LabelModel, isotonic, train
from rubric_app.rubric.text import split_thread_authored
from rubric_app.rubric.types import Assessment, BisectionEvidence, CommentText, IssueText
from rubric_app.vocabulary import HIGH_PRIORITY, is_module, is_oncall

# The component labels scored by micro-F1: every `module:` label RUBRIC.md governs (R1-R9, R7.3).
# Other `module:` labels triagers use (e.g. `module: correctness (silent)`, `module: higher order
# operators`) are outside the rubric, so the engine neither predicts nor is scored on them.
COMPONENTS = (
    "module: dynamo",
    "module: inductor",
    "module: dynamic shapes",
    "module: pt2-dispatcher",
    "module: decompositions",
    "module: fx",
    "module: functorch",
    "module: helion",
    "module: cuda graphs",
    "module: flex attention",
    "module: dtensor",
    "module: fsdp",
    "module: ddp",
    "module: determinism",
    "module: compile-time",
    "module: numerical-stability",
    "module: memory usage",
    "module: performance",
    "module: compile ux",
)
# Older names triagers applied for the same thing: `module: aotdispatch` is the AOTAutograd label the
# catalog folds into pt2-dispatcher; `module: cpu inductor` was the CPU Inductor lane before the oncall.
ALIASES = {"module: aotdispatch": DISPATCHER, "module: cpu inductor": CPU_ONCALL}
# Review flag: R11 sends what used to get `high priority` straight away through `triage review`.
REVIEW_TRUTH = (REVIEW, HIGH_PRIORITY)


# Reference points scored on the same data: what a keyword labeler does, one regex per label.
KEYWORD_BASELINE = {
    "module: dynamo": re.compile(r"dynamo|graph break", re.I),
    "module: inductor": re.compile(r"inductor|triton", re.I),
    "module: dynamic shapes": re.compile(r"dynamic|symint", re.I),
    "module: pt2-dispatcher": re.compile(r"aot_?autograd|functionaliz|fake ?tensor", re.I),
}


def keyword_baseline(issue: IssueText) -> list[str]:
    """The labels whose keyword appears in the title or body."""
    text = issue.title + "\n" + issue.body
    return [label for label, pattern in KEYWORD_BASELINE.items() if pattern.search(text)]


class InputError(ValueError):
    """A line of the input file is not a usable issue; the message names the line."""


def read_jsonl(lines: Iterable[str]) -> Iterator[dict[str, Any]]:
    """Yield each record; raise InputError naming the first bad line (nothing is silently skipped)."""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"line {n}: not JSON ({exc.msg})") from None
        if (
            not isinstance(record, dict)
            or not isinstance(record.get("title", ""), str)
            or not isinstance(record.get("body", ""), str)
        ):
            raise InputError(f"line {n}: expected an object with string title and body")
        if not isinstance(record.get("comments", []), list) or not isinstance(record.get("labels", []), list):
            raise InputError(f"line {n}: comments and labels must be lists")
        if "number" not in record:
            raise InputError(f"line {n}: missing number")
        yield record


def issue_from_record(record: dict[str, Any], use_labels: bool = True) -> IssueText:
    """The engine's input for one record; a harvested thread's inline comments become comments.

    use_labels=False hides the record's labels: they are the answers when scoring.
    """
    title = record.get("title") or ""
    body = without_title_heading(record.get("body") or "", title).replace(HARVEST_CUT, "")
    description, reporter, thread_comments = split_thread_authored(body)
    comments = [
        (str(c.get("author", "")), str(c.get("body", "")).replace(HARVEST_CUT, ""))
        if isinstance(c, dict)
        else ("", str(c).replace(HARVEST_CUT, ""))
        for c in record.get("comments", [])
    ]
    return IssueText(
        number=int(record["number"]),
        title=title,
        body=description,
        comments=tuple(CommentText(body=body, author=author) for author, body in [*thread_comments, *comments]),
        labels=tuple(str(l) for l in record.get("labels", [])) if use_labels else (),
        author=str(record.get("author") or reporter),
        # A cached bisection verdict (evaluate_suggestions --bisections): evidence, not an answer.
        bisection=tuple(
            BisectionEvidence(label=str(b["label"]), rule_id=str(b["rule_id"]), evidence=str(b["evidence"]))
            for b in record.get("bisection", [])
        ),
    )


# Where the harvester cut a long text: its words ("truncated", "harvester") were features learned from 402 of the
# 717 files' issues that no synced issue carries.
HARVEST_CUT = "⟨…truncated by harvester⟩"


def without_title_heading(body: str, title: str) -> str:
    """The body without the "# <title>" line a harvested thread starts with. GitHub's own body has no such
    line, so the engine must not learn from it: read twice, the title's words counted as body words too,
    for a model (and rules reading the text) that then meets bodies without them once synced."""
    heading = f"# {title}"
    if title and body.startswith(heading) and body[len(heading) : len(heading) + 1] in ("", "\n"):
        return body[len(heading) :].lstrip("\n")
    return body


def output_line(number: int, assessment: Assessment) -> dict[str, Any]:
    """The suggest_labels output for one issue."""
    return {
        "number": number,
        "route": assessment.route,
        "labels": assessment.verdict(),
        "avoid": [{"label": a.label, "rule_id": a.rule_id, "reason": a.reason} for a in assessment.avoid],
        "preselected": preselected_verdict(assessment),
        "confidence": assessment.confidence(),
        "evidence": {
            s.label: {
                "rule_id": s.rule_id,
                "confidence": s.confidence,
                "evidence": s.evidence,
                "evidence_source": s.evidence_source,
                "reason": s.reason,
                "preselected": s.preselected,
            }
            for s in assessment.add
        },
        "checklist": [{"rule_id": c.rule_id, "state": c.state, "text": c.text} for c in assessment.checklist],
    }


def preselected_verdict(assessment: Assessment) -> list[str]:
    """The subset of verdict() that "accept" applies: the pre-selected labels, plus the queue's own
    oncall: label when the issue is already there (G0, the CPU lane)."""
    ticked = set(assessment.preselected())
    labels = assessment.labels()
    return [l for l in assessment.verdict() if l in ticked or (l == assessment.queue and l not in labels)]


def truth(record: dict[str, Any], label: str, strict: bool = False) -> bool | None:
    """Did the humans apply `label`? None when truncation hides the answer.

    Truncation-aware (the default): a truncated record shows its first five labels in sorted order,
    so a label sorting after the fifth could be there unseen: neither a hit nor a miss. strict=True
    reads the shown labels as the whole truth (a hidden label counts as absent): a floor for precision.
    """
    shown = {ALIASES.get(l, l) for l in record.get("labels", [])}
    if label in shown:
        return True
    if strict or not record.get("labels_truncated"):
        return False
    names = sorted(record.get("labels", []))
    hidden_after = names[-1] if names else ""
    aliases = [a for a, target in ALIASES.items() if target == label]
    # Every name that would count for `label` must sort at or before the last shown label to be known absent.
    return False if all(name <= hidden_after for name in [label, *aliases]) else None


def review_truth(record: dict[str, Any], strict: bool = False) -> bool | None:
    answers = [truth(record, label, strict) for label in REVIEW_TRUTH]
    if any(answers):
        return True
    return None if None in answers else False


@dataclass
class Counts:
    tp: int = 0
    fp: int = 0
    fn: int = 0

    def add(self, predicted: bool, actual: bool | None) -> None:
        if actual is None:
            return
        self.tp += predicted and actual
        self.fp += predicted and not actual
        self.fn += actual and not predicted

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


@dataclass
class Score:
    per_label: dict[str, Counts] = field(default_factory=dict)
    components: Counts = field(default_factory=Counts)
    routing: Counts = field(default_factory=Counts)
    review: Counts = field(default_factory=Counts)
    issues: int = 0


def route_labels(records: list[dict[str, Any]]) -> list[str]:
    """The redirect labels scored as routing: every non-pt2 `oncall:` label in the data, plus the ones the
    engine emits."""
    seen = {ALIASES.get(l, l) for r in records for l in r.get("labels", [])}
    return sorted(
        {l for l in seen if is_oncall(l) and l != PT2_ONCALL} | {CPU_ONCALL, "oncall: export", "oncall: distributed"}
    )


def score(records: list[dict[str, Any]], predictions: list[list[str]], strict: bool = False) -> Score:
    """Per-label counts, component micro-F1, routing micro-F1 over the redirect labels, review flag."""
    result = Score(issues=len(records))
    routes = route_labels(records)
    for record, predicted in zip(records, predictions):
        predicted_set = set(predicted)
        for label in (*COMPONENTS, *routes):
            actual = truth(record, label, strict)
            counts = result.per_label.setdefault(label, Counts())
            counts.add(label in predicted_set, actual)
            (result.components if label in COMPONENTS else result.routing).add(label in predicted_set, actual)
        result.review.add(REVIEW in predicted_set, review_truth(record, strict))
    return result


def predict(
    records: list[dict[str, Any]], model: LabelModel | None = None, use_model: bool = True, min_confidence: float = 0.0
) -> list[list[str]]:
    """The engine's labels for each record, with the record's own labels hidden.

    model: the learned labeler to use (default: the shipped one); use_model=False: rules alone;
    min_confidence: the engine's threshold for component labels.
    """
    return [
        evaluate(
            issue_from_record(r, use_labels=False), model=model, use_model=use_model, min_confidence=min_confidence
        ).verdict()
        for r in records
    ]


def split_by_number(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(development half, held-out half): the older half by issue number, then the newer half.

    Rules are designed on the development half only; the held-out half stands in for issues the
    engine has never seen, so its figures are the honest ones.
    """
    ordered = sorted(records, key=lambda r: int(r["number"]))
    return ordered[: len(ordered) // 2], ordered[len(ordered) // 2 :]


HELD_OUT_EVERY = 5


def is_held_out(record: dict[str, Any]) -> bool:
    """The untouched slice: one issue in HELD_OUT_EVERY, by a hash of its number (fixed once, never
    tuned): its figures are reported, its individual errors are never read, nothing trains on it."""
    return int(hashlib.sha256(str(int(record["number"])).encode()).hexdigest(), 16) % HELD_OUT_EVERY == 0


def split_held_out(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(training pool, held-out slice) by is_held_out."""
    return [r for r in records if not is_held_out(r)], [r for r in records if is_held_out(r)]


def g4_ceiling(records: list[dict[str, Any]]) -> list[list[str]]:
    """The best any engine that keeps G4 can score: the humans' own component labels, and G4's
    fallback on a PT2 issue where they applied none.

    Handoffs (G5) and the CPU Inductor lane (R2.4, R10: routed instead of oncall: pt2) are spared the
    fallback, so this is the most generous reading. Its precision is a ceiling for precision: every
    issue humans left without a component costs any G4-keeping engine one false positive.
    """
    predictions = []
    for record in records:
        shown = {ALIASES.get(l, l) for l in record.get("labels", [])}
        components = [l for l in COMPONENTS if l in shown]
        routed = any(is_oncall(l) and l != PT2_ONCALL for l in shown)
        predictions.append(components or ([] if routed else [COMPILE_UX]))
    return predictions


# Component-label thresholds the precision/recall curve is reported at.
CURVE = (0.0, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)


def without_fallback(labels: list[str]) -> list[str]:
    """The labels minus a lone `module: compile ux`, which is what G4's fallback produces."""
    modules = [l for l in labels if is_module(l)]
    return [l for l in labels if l != COMPILE_UX] if modules == [COMPILE_UX] else labels


def precision_recall_curve(
    records: list[dict[str, Any]],
    thresholds: Iterable[float] = CURVE,
    model: LabelModel | None = None,
    use_model: bool = False,
) -> list[tuple[float, Counts, Counts]]:
    """(threshold, component micro counts, the same without G4's fallback) at each min_confidence.

    Rules alone unless a model is given. The fallback replaces every label the threshold drops, so
    only the second figure shows what the threshold itself trades.
    """
    curve = []
    for t in thresholds:
        predicted = predict(records, model=model, use_model=use_model, min_confidence=t)
        curve.append(
            (
                t,
                score(records, predicted).components,
                score(records, [without_fallback(p) for p in predicted]).components,
            )
        )
    return curve


def has_component(record: dict[str, Any]) -> bool:
    """Humans applied at least one component label (G4 wants one on every PT2 issue)."""
    return any(truth(record, label, strict=True) for label in COMPONENTS)


def answer(record: dict[str, Any], label: str) -> bool | None:
    """What the humans' labels say about `label` as a training or calibration target; None when unknown.

    Unknown: hidden by truncation (truth), and any component on an issue humans gave none. G4 says
    every PT2 issue ends with a `module:` label, so such an issue was not labelled "none of these":
    it was left unlabelled. Counting its silence as five negatives taught the model that a clear
    Inductor report is a coin toss, and calibrated every confidence low (the trust figures score
    components on issues with a human component, for the same reason).
    """
    if label == REVIEW:
        return review_truth(record)
    if label in COMPONENTS and not has_component(record):
        return None
    return truth(record, label)


def training_examples(
    records: list[dict[str, Any]], readings: list[Reading] | None = None
) -> list[tuple[set[str], dict[str, bool | None]]]:
    """(features, answers) per record for model.train; answers are None where unknown (answer())."""
    readings = readings or [read(issue_from_record(r, use_labels=False)) for r in records]
    return [
        (set(reading.features()), {label: answer(record, label) for label in MODEL_LABELS})
        for record, reading in zip(records, readings)
    ]


def cross_validated(records: list[dict[str, Any]], folds: int = 5) -> list[Assessment]:
    """Out-of-fold assessments: each record is assessed by a model fitted, calibrated and thresholded
    (fit_model, its own inner cross-validation) on the other folds only."""
    assessments: list[Assessment | None] = [None] * len(records)
    for fold in range(folds):
        model = fit_model([r for i, r in enumerate(records) if i % folds != fold], folds=min(folds, 5))
        for i, record in enumerate(records):
            if i % folds == fold:
                assessments[i] = evaluate(issue_from_record(record, use_labels=False), model=model)
    return assessments


def cross_validate(records: list[dict[str, Any]], folds: int = 5) -> list[list[str]]:
    """Held-out predictions: each record is labelled by a model fitted (and calibrated) on the other folds only."""
    return [a.verdict() for a in cross_validated(records, folds)]


# Pre-selection: precision 0.90 (the target) by the one-sided 95% lower bound of the out-of-fold precision
# (z = 1.645): the margin is wide where few labels are seen (routes) and narrow where many are (components).
# One standard error (z = 1) let the outer out-of-fold precision dip to 0.88-0.90 across training seeds.
PRESELECT_PRECISION = 0.90
PRESELECT_Z = 1.645
# Suggested components: the target's precision (0.80) with a margin, then the most F1.
COMPONENT_PRECISION = 0.82
GRID_FIRST = (0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5)
GRID_SECOND = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
GRID_EXTRA = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
GRID_ROUTE = (0.3, 0.4, 0.5, 0.6, 0.7)
# A visibility oncall: label (R6.4) leaves the labels and the lane alone, so it may be offered lower than a handoff.
GRID_VISIBILITY = (0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
GRID_COMPANY = (0.0, 0.3, 0.4, 0.5, 0.6)
GRID_REVIEW = (0.2, 0.3, 0.4, 0.5, 0.6)
REVIEW_PRECISION = 0.62
REVIEW_RECALL = 0.75


def fit_model(
    records: list[dict[str, Any]], folds: int = 5, decisions: list[tuple[set[str], dict[str, bool | None]]] = ()
) -> LabelModel:
    """Train the learned labeler on `records` and calibrate it by cross-validation on the same records.

    1. k models, each trained without one fold, score that fold: out-of-fold probabilities;
    2. an isotonic curve per learned label maps them to observed precision, and one per group of rule
       findings (route, review, extra, ...) maps a rule's weight likewise;
    3. the engine's thresholds (first/second component, extras) are those with the best out-of-fold
       component F1, and each `preselect*` the lowest confidence whose out-of-fold precision reaches
       PRESELECT_PRECISION (by its lower bound: preselect_threshold);
    4. the shipped model is trained on all records with those curves and thresholds.
    Each issue is read once (engine.read); the threshold search re-runs only the decision (engine.decide).
    decisions: extra (features, answers) examples from triagers' own decisions (train_label_model --from-db).
    """
    readings = [read(issue_from_record(r, use_labels=False)) for r in records]
    examples = training_examples(records, readings)
    folds = max(2, min(folds, len(records)))
    fold_models = [
        train([e for i, e in enumerate(examples) if i % folds != fold] + list(decisions)) for fold in range(folds)
    ]
    predictions = [fold_models[i % folds].predict(reading.features()) for i, reading in enumerate(readings)]

    calibration: dict[str, list[list[float]]] = {}
    for label in MODEL_LABELS:
        known = [
            (predictions[i][label][0], bool(a[label]), _rule_supports(feats, label))
            for i, (feats, a) in enumerate(examples)
            if a.get(label) is not None and label in predictions[i]
        ]
        # A prediction some rule also makes is calibrated apart from one the model makes alone.
        for supported in (False, True):
            points = [(p, y) for p, y, s in known if s == supported]
            if len(points) >= 20:
                calibration[model_key(label, supported)] = list(isotonic(points))
        calibration.setdefault(label, list(isotonic([(p, y) for p, y, _s in known])))
    calibration.update(_rule_calibration(records, readings))
    for model in fold_models:
        model.calibration = calibration
    thresholds, figures = _choose_thresholds(records, readings, fold_models, predictions, folds)
    final = train(examples + list(decisions))
    final.calibration, final.thresholds, final.cross_validated = calibration, thresholds, figures
    return final


def _rule_supports(feats: set[str], label: str) -> bool:
    """A rule's ADD, ROUTE or FLAG for `label` is among the features (model.features names them so)."""
    return any(f"rl:{kind}:{label}" in feats for kind in ("add", "route", "flag"))


# A label outside the core gets a calibration curve of its own from this many findings (engine.rule_curve):
# only then can it be pre-selected (engine._preselect).
OWN_CURVE_MIN = 5


def _rule_calibration(records: list[dict[str, Any]], readings: list[Reading]) -> dict[str, list[list[float]]]:
    """Isotonic curves of rule weight -> observed precision, per group of findings (engine.calibration_key),
    and the observed rates of the fixed-weight labels (G4's fallback, G6's triaged, flags)."""
    points: dict[str, list[tuple[float, bool]]] = {}
    for record, reading in zip(records, readings):
        by_rules = [x for x in reading.findings if x.origin == "rule" and x.label]
        best = [(label, x) for kind in ("add", "route", "flag") for label, x in strongest(by_rules, kind).items()]
        for label, x in best:
            actual = answer(record, label)
            if actual is not None:
                key = calibration_key(x)
                points.setdefault(key, []).append((x.weight, actual))
                if key in OWN_CURVES:
                    points.setdefault(f"{key}:{label}", []).append((x.weight, actual))
        for s in decide(reading, use_model=False).add:
            key = {"G4": "fallback", "G6": "triaged", "R12.5": "flag", "G9.1": "flag", "G9.2": "flag"}.get(s.rule_id)
            actual = truth(record, s.label)
            if key and actual is not None:
                points.setdefault(key, []).append((s.confidence, actual))
    curves = {}
    for key, values in points.items():
        group = key.split(":", 1)[0]
        if ":" not in key or group not in OWN_CURVES:
            curves[key] = list(isotonic(values))
        elif len(values) >= OWN_CURVE_MIN:
            curves[key] = own_curve(values, points[group])
    return curves


def own_curve(values: list[tuple[float, bool]], group: list[tuple[float, bool]]) -> list[list[float]]:
    """One label's isotonic curve within its group, smoothed towards the group's rate: a handful of
    findings proves no 0 or 1."""
    return list(isotonic(values, prior=sum(y for _, y in group) / len(group)))


def _choose_thresholds(
    records: list[dict[str, Any]],
    readings: list[Reading],
    fold_models: list[LabelModel],
    predictions: list[dict[str, tuple[float, list[str]]]],
    folds: int,
) -> tuple[dict[str, float], dict[str, float]]:
    """The thresholds with the best out-of-fold component F1 on issues humans gave a component, then the
    pre-selection threshold from the same out-of-fold suggestions."""
    labelled = [i for i, r in enumerate(records) if has_component(r)]
    labelled_set = set(labelled)

    def run(limits: dict[str, float]) -> list[Assessment]:
        out = []
        for i, reading in enumerate(readings):
            model = fold_models[i % folds]
            model.thresholds = limits
            out.append(decide(reading, model=model, predictions=predictions[i]))
        return out

    def component_fit(limits: dict[str, float]) -> tuple[bool, float]:
        """(precision reaches COMPONENT_PRECISION, F1): the best F1 among settings precise enough, else the best F1."""
        runs = run(limits)
        c = score([records[i] for i in labelled], [runs[i].verdict() for i in labelled]).components
        return c.precision >= COMPONENT_PRECISION, c.f1

    best: tuple[tuple[bool, float], dict[str, float]] = ((False, -1.0), {})
    base = dict(fold_models[0].thresholds)
    for first in GRID_FIRST:
        for second in GRID_SECOND:
            limits = {**base, "first": first, "second": second}
            best = max(best, (component_fit(limits), limits), key=lambda b: b[0])
    for key in ("extra", "symptom"):
        for bar in GRID_EXTRA:
            limits = {**best[1], key: bar}
            best = max(best, (component_fit(limits), limits), key=lambda b: b[0])
    limits = dict(best[1])
    # Routing: the bars with the best out-of-fold routing F1 (redirects, then visibility oncall: labels).
    for key in ("route", "visibility"):
        grid = GRID_VISIBILITY if key == "visibility" else GRID_ROUTE
        scored = [
            (score(records, [a.verdict() for a in run({**limits, key: bar})]).routing.f1, -bar, bar) for bar in grid
        ]
        limits[key] = max(scored)[2]
    # The review flag: the most recall at precision REVIEW_PRECISION (the target's 0.60 and a margin) when
    # that recall reaches REVIEW_RECALL; otherwise the best F1 (a flag right 62% of the time on one issue
    # in ten helps no meeting).
    reviewed = []
    for bar in GRID_REVIEW:
        c = score(records, [a.verdict() for a in run({**limits, "review": bar})]).review
        reviewed.append(
            (
                c.precision >= REVIEW_PRECISION and c.recall >= REVIEW_RECALL,
                c.recall if c.precision >= REVIEW_PRECISION else 0.0,
                c.f1,
                -bar,
                bar,
            )
        )
    meets = [r for r in reviewed if r[0]]
    limits["review"] = max(meets)[4] if meets else max(reviewed, key=lambda r: (r[2], r[3]))[4]
    # A core component next to another one (engine.company) is scored on what such labels scored here (the
    # curves join the calibration every fold model and the final one share: fit_model), and dropped below
    # the bar with the best F1 at the precision wanted.
    everything = run(limits)
    fold_models[0].calibration.update(
        company_calibration([records[i] for i in labelled], [everything[i] for i in labelled])
    )
    fits = [(component_fit({**limits, "company": bar}), -bar, bar) for bar in GRID_COMPANY]
    limits["company"] = max(fits)[2]
    runs = run({**limits, "preselect": 0.0, "preselect_route": 0.0, "preselect_review": 0.0})
    modules, routes, review = [], [], []
    for i, (record, a) in enumerate(zip(records, runs)):
        for s in a.add:
            actual = review_truth(record) if s.label == REVIEW else truth(record, s.label)
            if actual is None or s.rule_id == "G4" or s.source == "bisection":
                continue
            if not s.preselected:
                continue  # not ticked even at a zero bar (engine._preselect): no part of the bar
            if s.label in COMPONENTS and i in labelled_set:
                modules.append((s.confidence, actual))
            elif is_oncall(s.label) and s.label != PT2_ONCALL:
                routes.append((s.confidence, actual))
            elif s.label == REVIEW:
                review.append((s.confidence, actual))
    limits["preselect"] = preselect_threshold(modules, PRESELECT_PRECISION)
    limits["preselect_route"] = preselect_threshold(routes, PRESELECT_PRECISION)
    limits["preselect_review"] = preselect_threshold(review, PRESELECT_PRECISION)
    t = trust(records, run(limits))
    figures = {
        "issues": t.issues,
        "component_precision": t.components.precision,
        "component_recall": t.components.recall,
        "component_f1": t.components.f1,
        "preselected_precision": t.preselected.precision,
        "coverage": t.coverage,
        "routing_f1": t.routing.f1,
        "review_precision": t.review.precision,
        "review_recall": t.review.recall,
    }
    return limits, {k: round(v, 3) for k, v in figures.items()}


# A company curve (engine.company) from this many labels: fewer say nothing a label alone did not.
COMPANY_MIN = 20


def company_calibration(records: list[dict[str, Any]], assessments: list[Assessment]) -> dict[str, list[list[float]]]:
    """Isotonic curves of confidence -> observed precision for core components suggested next to another
    component, from out-of-fold assessments of issues humans gave a component: one per kind of company
    (engine.company), and one per label in it from OWN_CURVE_MIN labels, smoothed towards its kind's rate
    (module: dynamo beside a domain label is rarely right, module: inductor beside one usually is)."""
    kinds: dict[str, list[tuple[float, bool]]] = {}
    labels: dict[tuple[str, str], list[tuple[float, bool]]] = {}
    for record, a in zip(records, assessments):
        for s in a.add:
            actual = truth(record, s.label)
            if s.company and actual is not None:
                kinds.setdefault(s.company, []).append((s.confidence, actual))
                labels.setdefault((s.company, s.label), []).append((s.confidence, actual))
    fitted = {kind: values for kind, values in kinds.items() if len(values) >= COMPANY_MIN}
    curves = {kind: list(isotonic(values)) for kind, values in fitted.items()}
    curves.update(
        {
            f"{kind}:{label}": own_curve(values, fitted[kind])
            for (kind, label), values in labels.items()
            if kind in fitted and len(values) >= OWN_CURVE_MIN
        }
    )
    return curves


def learning_curve(
    records: list[dict[str, Any]],
    fractions: Iterable[float] = (0.25, 0.5, 0.75, 1.0),
    seeds: Iterable[int] = (0, 1, 2),
    folds: int = 5,
) -> list[tuple[float, int, float, float, float]]:
    """(fraction, issues trained on, mean, min, max micro-F1) of the learned labeler alone on the core components,
    out of fold, trained on `fraction` of the other folds (a random subset per seed): does more data help?

    The decision is the plainest one: the likeliest component from `first`, another from `second`, at the
    pair of CURVE_GRID with the best F1 (the same grid for every size, so the sizes compare).
    """
    readings = [read(issue_from_record(r, use_labels=False)) for r in records]
    examples = training_examples(records, readings)
    rows = []
    for fraction in fractions:
        scores, size = [], 0
        for seed in seeds:
            rng = random.Random(seed)
            predictions: list[dict[str, tuple[float, list[str]]]] = [{}] * len(examples)
            for fold in range(folds):
                others = [e for i, e in enumerate(examples) if i % folds != fold]
                rng.shuffle(others)
                size = max(1, int(len(others) * fraction))
                fold_model = train(others[:size], seed=seed)
                for i in range(fold, len(examples), folds):
                    predictions[i] = fold_model.predict(readings[i].features())
            scores.append(max(_core_f1(examples, predictions, first, second) for first, second in CURVE_GRID))
        rows.append((fraction, size, sum(scores) / len(scores), min(scores), max(scores)))
    return rows


CURVE_GRID = [(first, second) for first in (0.1, 0.2, 0.3, 0.4, 0.5) for second in (0.3, 0.4, 0.5, 0.6, 0.7)]


def _core_f1(
    examples: list[tuple[set[str], dict[str, bool | None]]],
    predictions: list[dict[str, tuple[float, list[str]]]],
    first: float,
    second: float,
) -> float:
    c = Counts()
    for (_feats, answers), predicted in zip(examples, predictions):
        if not any(answers.get(l) for l in COMPONENT_LABELS):
            continue
        ranked = sorted(((predicted[l][0], l) for l in COMPONENT_LABELS), reverse=True)
        chosen = {l for i, (p, l) in enumerate(ranked) if p >= (first if i == 0 else second)}
        for label in COMPONENT_LABELS:
            c.add(label in chosen, answers.get(label))
    return c.f1


def wilson_lower(hits: int, total: int, z: float = PRESELECT_Z) -> float:
    """A lower confidence bound of the precision hits/total (Wilson score interval, one-sided)."""
    if not total:
        return 0.0
    p = hits / total
    centre = p + z * z / (2 * total)
    spread = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total))
    return (centre - spread) / (1 + z * z / total)


def preselect_threshold(points: list[tuple[float, bool]], precision: float) -> float:
    """The lowest confidence t such that the labels at or above t are right at least `precision` of the
    time, by the lower bound of their observed precision (wilson_lower), so a threshold resting on a few
    labels must clear a wider margin; 1.01 (nothing pre-selected) when no t reaches it."""
    ordered = sorted(points, key=lambda p: -p[0])
    hits = total = 0
    threshold = 1.01
    for i, (conf, right) in enumerate(ordered):
        hits += right
        total += 1
        last_of_tie = i + 1 == len(ordered) or ordered[i + 1][0] < conf
        if last_of_tie and wilson_lower(hits, total) >= precision:
            threshold = conf
    return round(threshold, 3) if threshold <= 1.0 else 1.01


def calibration_table(
    points: list[tuple[float, bool]], edges: tuple[float, ...] = (0.0, 0.3, 0.5, 0.6, 0.7, 0.8, 0.9, 1.01)
) -> list[tuple[float, float, int, float]]:
    """(low, high, labels shown in [low, high), observed precision) per confidence bucket."""
    rows = []
    for low, high in zip(edges, edges[1:]):
        inside = [right for conf, right in points if low <= conf < high]
        rows.append((low, min(high, 1.0), len(inside), sum(inside) / len(inside) if inside else 0.0))
    return rows


@dataclass
class Trust:
    """What a triager pressing `a` gets: the figures evaluate_suggestions prints per slice."""

    issues: int = 0
    labelled: int = 0  # issues humans gave a component (G4)
    components: Counts = field(default_factory=Counts)  # all suggested components, on labelled issues
    preselected: Counts = field(default_factory=Counts)  # pre-selected components, on labelled issues
    covered: int = 0  # issues with at least one pre-selected component
    routing: Counts = field(default_factory=Counts)
    preselected_routes: Counts = field(default_factory=Counts)  # pre-selected oncall: labels, on all issues
    review: Counts = field(default_factory=Counts)
    points: list[tuple[float, bool]] = field(default_factory=list)  # (confidence, right) of every scored suggestion
    flagged: int = 0  # issues the engine flags `triage review`
    # Operating curves: (confidence, right) of suggested components on labelled issues; each issue's most
    # confident component (0.0: none); each issue's review confidence (0.0: not suggested) and its truth.
    component_points: list[tuple[float, bool]] = field(default_factory=list)
    top_component: list[float] = field(default_factory=list)
    review_points: list[tuple[float, bool]] = field(default_factory=list)

    @property
    def coverage(self) -> float:
        return self.covered / self.issues if self.issues else 0.0

    @property
    def flagged_share(self) -> float:
        return self.flagged / self.issues if self.issues else 0.0

    def precision_at_coverage(self, share: float) -> tuple[float, float]:
        """(threshold, precision): pre-selecting every component at or above the confidence that gives `share` of
        the issues one, how often those components are right (on issues with a human component)."""
        ranked = sorted(self.top_component, reverse=True)
        if not ranked:
            return 1.01, 0.0
        threshold = ranked[min(len(ranked) - 1, max(0, round(share * len(ranked)) - 1))]
        above = [right for conf, right in self.component_points if conf >= threshold and threshold > 0]
        return threshold, (sum(above) / len(above) if above else 0.0)

    def review_recall_at_share(self, share: float) -> float:
        """The recall of escalated issues if the `share` of issues with the highest review confidence were flagged."""
        ranked = sorted(self.review_points, key=lambda p: -p[0])
        escalated = sum(right for _, right in ranked)
        top = ranked[: round(share * len(ranked))]
        return sum(right for conf, right in top if conf > 0) / escalated if escalated else 0.0


def trust(records: list[dict[str, Any]], assessments: list[Assessment], strict: bool = False) -> Trust:
    """Component P/R/F1 and pre-selected precision on issues with a human component, coverage of the
    pre-selection on all issues, routing and review figures, and (confidence, right) pairs for the
    calibration table (components on labelled issues, routes and the review flag on all).

    strict: score labels that truncation may hide as absent (truth)."""
    out = Trust(issues=len(records))
    verdicts = [a.verdict() for a in assessments]
    whole = score(records, verdicts, strict)
    out.routing, out.review = whole.routing, whole.review
    routes = route_labels(records)
    for record, a, verdict in zip(records, assessments, verdicts):
        ticked = set(preselected_verdict(a))
        if any(l in COMPONENTS for l in ticked):
            out.covered += 1
        labelled = has_component(record)
        out.labelled += labelled
        confidence = a.confidence()
        out.flagged += REVIEW in verdict
        out.top_component.append(max((c for label, c in confidence.items() if label in COMPONENTS), default=0.0))
        for label in (*COMPONENTS, *routes):
            actual = truth(record, label, strict)
            if label in COMPONENTS and not labelled:
                continue
            if label in COMPONENTS:
                out.components.add(label in verdict, actual)
                out.preselected.add(label in ticked, actual)
                if label in confidence and actual is not None:
                    out.component_points.append((confidence[label], actual))
            elif label in confidence:  # the queue's own label (G0, the CPU lane) is no suggestion
                out.preselected_routes.add(label in ticked, actual)
            if label in confidence and actual is not None:
                out.points.append((confidence[label], actual))
        actual = review_truth(record, strict)
        if REVIEW in confidence and actual is not None:
            out.points.append((confidence[REVIEW], actual))
        if actual is not None:
            out.review_points.append((confidence.get(REVIEW, 0.0), actual))
    return out
