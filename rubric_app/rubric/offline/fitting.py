"""Fitting the labeler's thresholds and calibration out of fold, its learning curve, and how far its figures can be
trusted: offline work that train_label_model and evaluate_suggestions run, never a page."""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from rubric_app.rubric.engine.assess import Reading, decide, evaluate, read
from rubric_app.rubric.engine.model import COMPONENT_LABELS, MODEL_LABELS, LabelModel, isotonic, train
from rubric_app.rubric.engine.scoring import OWN_CURVES, calibration_key, model_key, strongest
from rubric_app.rubric.offline.evaluation import (
    COMPONENTS,
    Counts,
    answer,
    has_component,
    issue_from_record,
    preselected_verdict,
    review_truth,
    route_labels,
    score,
    training_examples,
    truth,
)
from rubric_app.rubric.reading.types import Assessment
from rubric_app.vocabulary import PT2_ONCALL, TRIAGE_REVIEW, Kind, is_oncall

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
    return any(f"rl:{kind}:{label}" in feats for kind in (Kind.ADD, Kind.ROUTE, Kind.FLAG))


# A label outside the core gets a calibration curve of its own from this many findings (scoring.rule_curve):
# only then can it be pre-selected (preselection.preselect).
OWN_CURVE_MIN = 5


def _rule_calibration(records: list[dict[str, Any]], readings: list[Reading]) -> dict[str, list[list[float]]]:
    """Isotonic curves of rule weight -> observed precision, per group of findings (scoring.calibration_key),
    and the observed rates of the fixed-weight labels (G4's fallback, G6's triaged, flags)."""
    points: dict[str, list[tuple[float, bool]]] = {}
    for record, reading in zip(records, readings):
        by_rules = [x for x in reading.findings if x.origin == "rule" and x.label and x.learned]
        best = [
            (label, x) for kind in (Kind.ADD, Kind.ROUTE, Kind.FLAG) for label, x in strongest(by_rules, kind).items()
        ]
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
    # A core component next to another one (components.company) is scored on what such labels scored here (the
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
            actual = review_truth(record) if s.label == TRIAGE_REVIEW else truth(record, s.label)
            if actual is None or s.rule_id == "G4" or s.source == "bisection":
                continue
            if not s.preselected:
                continue  # not ticked even at a zero bar (preselection.preselect): no part of the bar
            if s.label in COMPONENTS and i in labelled_set:
                modules.append((s.confidence, actual))
            elif is_oncall(s.label) and s.label != PT2_ONCALL:
                routes.append((s.confidence, actual))
            elif s.label == TRIAGE_REVIEW:
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


# A company curve (components.company) from this many labels: fewer say nothing a label alone did not.
COMPANY_MIN = 20


def company_calibration(records: list[dict[str, Any]], assessments: list[Assessment]) -> dict[str, list[list[float]]]:
    """Isotonic curves of confidence -> observed precision for core components suggested next to another
    component, from out-of-fold assessments of issues humans gave a component: one per kind of company
    (components.company), and one per label in it from OWN_CURVE_MIN labels, smoothed towards its kind's rate
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
        out.flagged += TRIAGE_REVIEW in verdict
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
        if TRIAGE_REVIEW in confidence and actual is not None:
            out.points.append((confidence[TRIAGE_REVIEW], actual))
        if actual is not None:
            out.review_points.append((confidence.get(TRIAGE_REVIEW, 0.0), actual))
    return out


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
