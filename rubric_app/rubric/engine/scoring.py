"""How the engine scores a finding: the calibrated probability that its label is right (pure Python).

With a learned labeler (model.py), a rule's finding is scored on the calibration curve of its group (core
components, symptoms, visibility and feature labels, routes, flags), or of its own label once it has enough
findings; a label the labeler predicts is scored on the labeler's probability. A bisection verdict, a backend
result read in the thread and the thread's conclusion settle a label (decisive, concluded): they are what a label
is shown with. Without a model, a finding's weight is its score.
"""

from __future__ import annotations

from collections.abc import Callable

from rubric_app.rubric.engine.model import VISIBILITY_LABELS, LabelModel, feature_name
from rubric_app.rubric.reading.catalog import GOVERNING_RULE
from rubric_app.rubric.reading.facts import Finding
from rubric_app.rubric.rules.general import CONCLUDED_BY_OTHERS
from rubric_app.vocabulary import (
    COMPILE_TIME,
    COMPILE_UX,
    CORE_COMPONENTS,
    DETERMINISM,
    MEMORY_USAGE,
    NUMERICAL_STABILITY,
    PERFORMANCE,
    TRIAGE_REVIEW,
    Kind,
    is_oncall,
)

# Holistic labels name a symptom: they yield to a core component (a UX complaint only to one shown
# with at least HOLISTIC_YIELDS_TO).
HOLISTIC = (PERFORMANCE, MEMORY_USAGE, COMPILE_TIME, COMPILE_UX)


# What the report suffers from rather than what it touches (R7.2, R7.3's holistic labels): triagers apply
# these far less often than the words appear, so they are calibrated apart from the visibility labels
# (R7.1, R7.3's named features), which a DTensor or flex-attention report gets almost every time.
SYMPTOMS = frozenset({*HOLISTIC, DETERMINISM, NUMERICAL_STABILITY, "compile-cache"})


# An AVOID beats an ADD unless the ADD rests on a backend comparison or a bisection (decisive()).
OVERRIDES_AVOID = 0.9


# The rules whose strong findings are backend results: R1.1's dynamic=False probe, R2's comparisons.
BACKEND_RULES = ("R1.1", "R2")


def model_findings(
    model: LabelModel,
    feats: dict[str, tuple[str, str]],
    predictions: dict[str, tuple[float, list[str]]],
    findings: list[Finding],
) -> list[Finding]:
    """The learned labeler's view as ADD findings, citing the rule that governs each label.

    Only labels whose calibrated probability reaches their kind's threshold are offered (`first` for a
    component, `visibility`, `route`, `review`); the engine then weighs them with the rules' findings by
    calibrated probability (scorer).
    """
    out = []
    supported = {x.label for x in findings if x.origin == "rule" and x.kind in (Kind.ADD, Kind.ROUTE, Kind.FLAG)}
    for label, (p, top) in predictions.items():
        key = model_key(label, label in supported)
        calibrated = model.calibrated(key if key in model.calibration else label, p)
        if label in VISIBILITY_LABELS:
            kind, bar = Kind.ADD, "visibility"
        elif is_oncall(label):
            kind, bar = Kind.ROUTE, "route"
        elif label == TRIAGE_REVIEW:
            kind, bar = Kind.FLAG, "review"
        else:
            kind, bar = Kind.ADD, "first"
        if calibrated < model.thresholds[bar] or not top:
            continue
        evidence, source = feats[top[0]]
        names = ", ".join(feature_name(f) for f in top)
        out.append(
            Finding(
                GOVERNING_RULE[label],
                kind,
                label,
                round(calibrated, 2),
                evidence,
                source,
                f"learned from {model.trained_on} triaged issues (p={calibrated:.2f}; top features: {names})",
                origin="model",
            )
        )
    return out


# Which calibration curve scores a rule's finding (model.LabelModel.calibration): the learned labels use
# the model's own probability; the rest are grouped by what they are.
def calibration_key(x: Finding) -> str:
    if x.kind == Kind.ROUTE:
        return "route"
    if x.kind == Kind.FLAG:
        return "review" if x.label == TRIAGE_REVIEW else "flag"
    if x.label in CORE_COMPONENTS:
        return "decisive" if decisive(x) else "core"
    return "symptom" if x.label in SYMPTOMS else "extra"


# The groups whose labels get a calibration curve of their own once they have enough findings.
OWN_CURVES = ("extra", "symptom")


def rule_curve(learned: LabelModel, x: Finding) -> str:
    """The calibration curve of a rule's finding: a label outside the core with enough findings of its own
    has its own (a DTensor report nearly always gets `module: dtensor`, an FSDP one often goes without
    `module: fsdp`), else its group's."""
    key = calibration_key(x)
    own = f"{key}:{x.label}"
    return own if key in OWN_CURVES and own in learned.calibration else key


def has_own_curve(learned: LabelModel | None, label: str) -> bool:
    """A label outside the core was calibrated on findings of its own (rule_curve), not only on its group's."""
    return learned is not None and any(f"{key}:{label}" in learned.calibration for key in OWN_CURVES)


def decisive(x: Finding) -> bool:
    """A bisection verdict, or a backend result read in the thread (R1.1, R2): evidence of the root cause
    itself, which neither a keyword's AVOID nor the learned labeler outvotes (G8). A keyword finding is
    never decisive however strong its weight."""
    return x.source.startswith("bisection") or (
        x.origin == "rule" and x.weight >= OVERRIDES_AVOID and x.rule_id.startswith(BACKEND_RULES)
    )


def concluded(x: Finding) -> bool:
    """The thread's conclusion by someone other than the reporter (rules.r2_thread_conclusion): it names
    the component the engine ranks first, whatever the keywords or the learned labeler say (R2, G8)."""
    return x.origin == "rule" and x.rule_id == "R2" and x.kind == Kind.ADD and x.weight >= CONCLUDED_BY_OTHERS


def model_key(label: str, supported: bool) -> str:
    """The calibration curve of a learned label: apart for predictions a rule also makes (they are surer)."""
    return f"{label}|rule" if supported else label


def scorer(
    learned: LabelModel | None, predictions: dict[str, tuple[float, list[str]]], findings: list[Finding] = ()
) -> Callable[[Finding], float]:
    """score(finding) -> P(the label is right): the calibrated probability with a model, the rule's weight without.

    A bisection verdict stays decisive (R2); so does a backend comparison in the thread, whatever the words say.
    A label the thread settles more than one way (a backend result and a maintainer's conclusion) scores the
    best of them: each is calibrated on its own, and the weaker one does not lower the stronger.
    """
    supported = {x.label for x in findings if x.origin == "rule" and x.kind in (Kind.ADD, Kind.ROUTE, Kind.FLAG)}

    def score(x: Finding) -> float:
        own = scored(x)
        return max(own, settled.get(x.label, own)) if x.kind == Kind.ADD else own

    def scored(x: Finding) -> float:
        if x.source.startswith("bisection"):
            return 1.0
        if learned is None:
            return x.weight
        rule_p = learned.calibrated(rule_curve(learned, x), x.weight)
        # An uncalibrated model (trained without fit_model) does not outvote the rules' own findings.
        if x.label in predictions and (x.origin == "model" or x.label in learned.calibration):
            key = model_key(x.label, x.label in supported)
            p = learned.calibrated(key if key in learned.calibration else x.label, predictions[x.label][0])
            if x.origin == "similar":  # the neighbours' vote: its weight is its measured precision already
                return max(p, x.weight)
            return max(p, rule_p) if settles(x) else p
        return x.weight if x.origin == "similar" else rule_p

    settled: dict[str, float] = {}
    for x in findings:
        if x.kind == Kind.ADD and settles(x):
            settled[x.label] = max(settled.get(x.label, 0.0), scored(x))
    return score


def strongest(findings: list[Finding], kind: str, first: Callable[[Finding], bool] | None = None) -> dict[str, Finding]:
    """The strongest finding per label of one kind; with `first`, one it holds for outranks any it does not."""

    def rank(x: Finding) -> tuple[bool, float]:
        return (first is not None and first(x), x.weight)

    best: dict[str, Finding] = {}
    for x in findings:
        if x.kind == kind and (x.label not in best or rank(x) > rank(best[x.label])):
            best[x.label] = x
    return best


def settles(x: Finding) -> bool:
    """A backend result, a bisection verdict or the thread's conclusion: the finding a label is shown with,
    even where the learned labeler is surer of the label (its score takes the better of the two: scorer).
    The triager then reads the root cause as the evidence, not "learned from N issues" (G8)."""
    return decisive(x) or concluded(x)
