"""The rubric engine: run every rule (rules.py, rules_domain.py), weigh the findings, enforce the invariants.

Invariants that always hold on the returned Assessment (tests/test_rubric_invariants.py):
- a PT2 issue that is not handed off or skipped ends with at least one `module:` label (G4);
- nothing forbidden by G7 or outside the catalog is in `add` (R7.4 shows it in `avoid`);
- never `high priority` (R11); no `module:` labels on a handoff (G5);
- `triage review` never together with `triaged` (R11, G6).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache

from rubric_app.vocabulary import (
    COMPILE_UX,
    CORE_COMPONENTS,
    CPU_INDUCTOR_ONCALL,
    DECOMPOSITIONS,
    DISPATCHER_LAYERS,
    DYNAMIC_SHAPES,
    DYNAMO,
    HIGH_PRIORITY,
    INDUCTOR,
    LOW_PRIORITY,
    NEEDS_REPRODUCTION,
    PT2_DISPATCHER,
    PT2_ONCALL,
    RELEASE_TRIAGE,
    TRIAGE_REVIEW,
    TRIAGED,
    Kind,
    Route,
    is_module,
    is_oncall,
)

from . import rules, rules_automation, rules_domain, rules_skill  # noqa: F401  (importing them registers their rules)
from .catalog import catalog_names, is_forbidden
from .facts import RULES, WEAK, Facts, Finding
from .flow import ends_with_component
from .model import GOVERNING_RULE, VISIBILITY_LABELS, LabelModel, feature_name, features
from .rules import CONCLUDED_BY_OTHERS, DEFAULT_BACKEND_GUESS, thread_facts
from .rules_skill import Layer, dispatcher_layer, never_applied, release_gate
from .similarity import similar_findings
from .text import code_blocks, read_code, read_sources
from .types import Assessment, Avoided, ChecklistItem, IssueText, Suggested
from .weighing import HOLD, binding_review, r11_item, weigh

# Holistic labels name a symptom: they yield to a core component (a UX complaint only to one shown
# with at least HOLISTIC_YIELDS_TO).
HOLISTIC = ("module: performance", "module: memory usage", "module: compile-time", COMPILE_UX)
HOLISTIC_YIELDS_TO = 0.6
# ...unless the symptom is the report's subject (a slow compile, a throughput regression, a bad error
# message named in the title): triagers label the symptom next to the component then.
SYMPTOM_SUBJECT = 0.8
# What the report suffers from rather than what it touches (R7.2, R7.3's holistic labels): triagers apply
# these far less often than the words appear, so they are calibrated apart from the visibility labels
# (R7.1, R7.3's named features), which a DTensor or flex-attention report gets almost every time.
SYMPTOMS = frozenset({*HOLISTIC, "module: determinism", "module: numerical-stability", "compile-cache"})
# A label a rule finds with at least this weight (the title names it, or a rule as specific as R4.3 or
# R9.1) is offered whatever triagers' history says of it; it is still ticked only above the bar.
OFFERED_OUTRIGHT = 0.8
# A component is suggested from this weight up; a second core component needs STRONG.
MIN_WEIGHT = 0.45
STRONG = 0.8
# R1: a second core component (typically module: dynamo next to the right one) needs more than a
# name in the title or an error class: evidence of its own.
SECOND_CORE = 0.85
# A rule's finding from this weight up shows a component, so the default-backend guess yields to it (R2).
SHOWN = 0.6
# Domain and feature labels are visibility extras: only when shown clearly.
MIN_EXTRA_WEIGHT = 0.6
# The learned labeler's probability must reach MODEL_MIN_P; its weight is MODEL_WEIGHT * p.
MODEL_MIN_P = 0.5
MODEL_WEIGHT = 0.9
MODEL_FALLBACK_P = 0.3
# R2.4 routes an Inductor problem; a [CPU] tag in the title (R10, this weight) routes whatever the component.
CPU_TAG = 0.9
# Avoids that only warn when nothing else supports the label (R1.5: "it uses torch.compile").
SOFT_AVOIDS = frozenset({"R1.5"})
# An AVOID beats an ADD unless the ADD rests on a backend comparison or a bisection (decisive()).
OVERRIDES_AVOID = 0.9
# The rules whose strong findings are backend results: R1.1's dynamic=False probe, R2's comparisons.
BACKEND_RULES = ("R1.1", "R2")
# A failure already on the backend that names a component rules out the stages after it (RUBRIC
# "The backends"): tracing fails with backend='eager' (R2.3), aot_eager fails (R2.1), or
# aot_eager_decomp_partition fails while aot_eager passes (R2.5).
DOWNSTREAM = {
    DYNAMO: (PT2_DISPATCHER, DECOMPOSITIONS, INDUCTOR),
    PT2_DISPATCHER: (DECOMPOSITIONS, INDUCTOR),
    DECOMPOSITIONS: (INDUCTOR,),
}


@lru_cache(maxsize=1)
def shipped_catalog() -> frozenset[str]:
    return catalog_names()


@lru_cache(maxsize=1)
def shipped_model() -> LabelModel | None:
    return LabelModel.load()


@dataclass
class Reading:
    """An issue read once: the rules' and the bisection's findings, and the learned labeler's features.

    decide() can be run on it again with other thresholds (fitting.fit_model does, many times).
    """

    facts: Facts
    lane: list[Finding]  # G0: the oncall queue the issue already sits in, if any
    findings: list[Finding]
    _features: dict[str, tuple[str, str]] | None = None

    def features(self) -> dict[str, tuple[str, str]]:
        if self._features is None:
            learned = [x for x in self.findings if not x.rule_id.startswith(NOT_LEARNED)]
            self._features = features(self.facts.sources, learned, thread_facts(self.facts))
        return self._features


# What PyTorch's triage skill added about labels the learned labeler does not predict (a reproduction nobody can run
# without a script, edge cases, commonly missed labels, the release flag, the bot's lane): shown to the triager, not
# features of the labeler. Learned from, they took 0.006 off the out-of-fold component precision and 0.009 off the
# pre-selected components' (docs/engine.md, "Figures before each change"). G9.1 is learned, as its G1 was.
NOT_LEARNED = ("G9.2", "G10", "G11", "G12", "G13")


def read(issue: IssueText) -> Reading:
    """What every rule finds in `issue` (G0 first: an issue in another queue is not read further)."""
    facts = facts_of(issue)
    lane = rules.g0_other_oncall(facts)
    if lane and lane[0].label != CPU_INDUCTOR_ONCALL:
        return Reading(facts, lane, [])
    return Reading(facts, lane, rule_findings(facts) + _bisection(issue))


def evaluate(
    issue: IssueText,
    catalog: frozenset[str] | None = None,
    model: LabelModel | None = None,
    use_model: bool = True,
    min_confidence: float = 0.0,
) -> Assessment:
    """Return what a careful PT2 triager would do with `issue`, each item citing its rule.

    catalog: the label names that may be suggested (G7); None or empty means the
    shipped catalog (an empty set only means the catalog has not been synced yet).
    model: the learned labeler to weigh in (default: the trained one shipped in data/, if any);
    use_model=False runs the rules alone. min_confidence: component and domain labels below it are not
    suggested but listed in the checklist as "needs a human" (precision for recall; the G4 fallback
    still applies). No I/O beyond loading those files once, no Django.
    """
    return decide(read(issue), catalog, model, use_model, min_confidence)


def decide(
    reading: Reading,
    catalog: frozenset[str] | None = None,
    model: LabelModel | None = None,
    use_model: bool = True,
    min_confidence: float = 0.0,
    predictions: dict[str, tuple[float, list[str]]] | None = None,
) -> Assessment:
    """evaluate() on an issue already read. predictions: the model's, when the caller has them already."""
    allowed = catalog or shipped_catalog()
    facts, lane = reading.facts, reading.lane
    if lane and lane[0].label != CPU_INDUCTOR_ONCALL:
        return Assessment(
            route=Route.SKIP,
            queue=lane[0].label,
            checklist=[
                ChecklistItem(
                    "G0",
                    f"Already in the {lane[0].label} queue: no module labels, no triaged.",
                    "satisfied",
                    lane[0].label,
                )
            ],
        )
    findings = list(reading.findings)
    transfer = next((x for x in findings if x.kind == Kind.ROUTE and x.rule_id == "G2"), None)
    if transfer and not any(x.source.startswith("bisection") for x in findings):
        return _transfer(transfer, findings)
    learned = (model or shipped_model()) if use_model else None
    if learned is None:
        predictions = {}
    else:
        feats = reading.features()
        if predictions is None:
            predictions = learned.predict(feats)
        findings += _model_findings(learned, feats, predictions, findings)
    # After the model's features: its neighbours' labels are no feature the model learned from.
    findings += similar_findings(facts.issue)
    # R11's text evidence, verdicts weighed against the thread, the issues sharing the failure (weighing.py).
    findings = weigh(facts, findings)
    return _assess(
        facts,
        findings,
        allowed,
        cpu_lane=bool(lane),
        min_confidence=min_confidence,
        learned=learned,
        predictions=predictions,
    )


def _transfer(x: Finding, findings: list[Finding]) -> Assessment:
    """G2: the fix belongs in another repository: transfer and stop (no labels, no triaged, no review)."""
    out = Assessment(
        route=Route.TRANSFER,
        checklist=[
            ChecklistItem(
                "G2", f"Transfer to {x.label}, then stop: no module labels, no triaged.", "satisfied", x.evidence
            )
        ],
    )
    out.avoid = [
        Avoided(l, "G2", f"the fix belongs in {x.label}: transfer instead", x.evidence, x.source)
        for l in dict.fromkeys(y.label for y in findings if y.kind == Kind.ADD and is_module(y.label))
    ]
    return out


def rule_findings(facts: Facts) -> list[Finding]:
    """Every finding of every text rule (G0 aside: evaluate() handles it first)."""
    return [x for rule_id, fn in RULES if rule_id != "G0" for x in fn(facts)]


def _model_findings(
    model: LabelModel,
    feats: dict[str, tuple[str, str]],
    predictions: dict[str, tuple[float, list[str]]],
    findings: list[Finding],
) -> list[Finding]:
    """The learned labeler's view as ADD findings, citing the rule that governs each label.

    Only labels whose calibrated probability reaches their kind's threshold are offered (`first` for a
    component, `visibility`, `route`, `review`); the engine then weighs them with the rules' findings by
    calibrated probability (_scorer).
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


def _scorer(
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


def facts_of(issue: IssueText) -> Facts:
    """What the rules read: capped sources, repro-code facts, current labels."""
    sources, environment = read_sources(issue)
    return Facts(issue, sources, read_code(code_blocks(sources)), frozenset(issue.labels), environment=environment)


def _bisection(issue: IssueText) -> list[Finding]:
    """Verdicts of finished bisection runs: the strongest evidence there is (R2)."""
    found = []
    for verdict in issue.bisection:
        source = f"bisection:{verdict.run_id}" if verdict.run_id is not None else "bisection"
        kind = Kind.ROUTE if is_oncall(verdict.label) else Kind.FLAG if verdict.label == TRIAGE_REVIEW else Kind.ADD
        found.append(Finding(verdict.rule_id, kind, verdict.label, 1.0, verdict.evidence, source, "bisection verdict"))
    return found


def _suggest(x: Finding, confidence: float | None = None) -> Suggested:
    return Suggested(
        x.label,
        x.rule_id,
        round(confidence if confidence is not None else x.weight, 2),
        x.evidence,
        x.source,
        source="bisection" if x.source.startswith("bisection") else x.origin,
        reason=x.reason,
    )


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
    even where the learned labeler is surer of the label (its score takes the better of the two: _scorer).
    The triager then reads the root cause as the evidence, not "learned from N issues" (G8)."""
    return decisive(x) or concluded(x)


def _components(
    adds: dict[str, Finding],
    avoided: dict[str, Finding],
    score: Callable[[Finding], float],
    limits: dict[str, float],
    shown: dict[str, Finding] | None = None,
) -> list[Finding]:
    """Pick the core component(s) and the visibility labels.

    One core component normally (the likeliest); a second only when likely on its own (limits["second"])
    and shown by evidence of its own (R1: a rule's finding of at least SECOND_CORE, not a name in the
    title). shown: the rules' own strongest finding per label (default: adds).
    Bisection verdicts replace the text's guesses (R2); R1.1 leaves dynamic shapes alone; a failing backend
    rules out the stages after it; the thread's conclusion ranks first (concluded).
    """
    shown = adds if shown is None else shown
    candidates = {
        label: x
        for label, x in adds.items()
        if label not in avoided or avoided[label].rule_id in SOFT_AVOIDS or decisive(x)
    }
    core = sorted(
        (x for l, x in candidates.items() if l in CORE_COMPONENTS),
        key=lambda x: (-score(x), CORE_COMPONENTS.index(x.label)),
    )
    bisected = [x for x in core if x.source.startswith("bisection")]
    if bisected:
        core = bisected
    elif any(x.rule_id == "R1.1" for x in core):
        core = [x for x in core if x.label == DYNAMIC_SHAPES]
    else:
        # A backend that already fails ("fails on aot_eager too") rules out what runs after it (R2, G8).
        ruled_out = {l for x in core if decisive(x) for l in DOWNSTREAM.get(x.label, ())}
        core = [x for x in core if x.label not in ruled_out or decisive(x)]
        if not any(decisive(x) for x in core):
            # The thread's conclusion comes first; anything else must be shown on its own, as a second. The
            # default-backend guess for wrong results is for when the text shows no component (R2): it yields
            # to one a rule shows (a `[functionalization]` tag, a graph break, a side effect Dynamo missed).
            def guess(label: str) -> bool:
                return label in shown and shown[label].reason == DEFAULT_BACKEND_GUESS

            shown_elsewhere = any(
                x.label in shown and not guess(x.label) and shown[x.label].weight >= SHOWN for x in core
            )
            core.sort(key=lambda x: (not concluded(x), shown_elsewhere and guess(x.label)))
    chosen = [
        x
        for i, x in enumerate(core)
        if score(x) >= limits["first" if i == 0 else "second"]
        and (i == 0 or decisive(x) or (x.label in shown and shown[x.label].weight >= SECOND_CORE))
    ]
    # Holistic labels name a symptom; G8: only when no core component explains it. A UX complaint
    # (R7.2) is the subject itself unless a component is shown with real evidence. A label a rule finds
    # outright (OFFERED_OUTRIGHT: a slow compile in the title, R4.3's make_fx divergence, R9.1's functorch
    # transform) is offered even where triagers' history calibrates it low: the rubric names it, the
    # triager decides.
    explained = any(x.weight >= HOLISTIC_YIELDS_TO for x in chosen)
    extras = [
        x
        for l, x in candidates.items()
        if l not in CORE_COMPONENTS
        and (score(x) >= _extra_bar(l, limits) or (x.origin == "rule" and x.weight >= OFFERED_OUTRIGHT))
        and not (l in HOLISTIC and (explained if l == COMPILE_UX else chosen) and x.weight < SYMPTOM_SUBJECT)
    ]
    return chosen + extras


def company(x: Finding, chosen: list[Finding]) -> str | None:
    """The calibration curve of a core component suggested next to another component, or None when it
    stands alone (or rests on a backend result, decisive()): `company:domain` next to a domain label
    (module: dynamo beside module: dtensor), `company:core` next to another core one (R1's over-tagging).
    Symptom labels keep no company: they ride along with any component."""
    if x.label not in CORE_COMPONENTS or decisive(x):
        return None
    others = [y.label for y in chosen if y.label != x.label and is_module(y.label) and y.label not in SYMPTOMS]
    if any(label not in CORE_COMPONENTS for label in others):
        return "company:domain"
    return "company:core" if others else None


def company_curve(learned: LabelModel | None, key: str | None, label: str) -> str | None:
    """The fitted curve that scores `label` in company `key` (company()): its own next to that company once
    it has one, else its company's (fitting.company_calibration); None when it stands alone or nothing
    was fitted."""
    if learned is None or key is None:
        return None
    own = f"{key}:{label}"
    return own if own in learned.calibration else key if key in learned.calibration else None


def _without_weak_company(
    chosen: list[Finding], score: Callable[[Finding], float], learned: LabelModel | None, limits: dict[str, float]
) -> tuple[list[Finding], list[Finding]]:
    """(kept, dropped): R1's over-tagging. A core component next to another component stays only when its
    company curve says it is likely there (limits["company"], fitted by fitting.fit_model); the least
    likely goes first, and the component it stood next to always stays. A dropped one becomes a question
    on the checklist (_crowded_checks)."""
    bar = limits.get("company", 0.0)
    dropped: list[Finding] = []
    while bar and learned is not None:
        weak = [
            (learned.calibrated(curve, score(x)), i)
            for i, x in enumerate(chosen)
            if (curve := company_curve(learned, company(x, chosen), x.label))
        ]
        if not weak or min(weak)[0] >= bar:
            break
        dropped.append(chosen.pop(min(weak)[1]))
    return chosen, dropped


def _in_company(learned: LabelModel | None, s: Suggested, x: Finding, chosen: list[Finding]) -> Suggested:
    """A core component's confidence where it stands (company): its probability alone overstates how often
    a label next to another one is right, so it is re-calibrated on what such labels scored out of fold
    (fitting.fit_model) once that curve exists. The company is recorded either way: fit_model fits on it."""
    key = company(x, chosen)
    curve = company_curve(learned, key, x.label)
    if key is None:
        return s
    if curve is None:
        return replace(s, company=key)
    return replace(
        s,
        company=key,
        confidence=learned.calibrated(curve, s.confidence),
        reason=f"{s.reason} · scored as a label next to another component",
    )


def _extra_bar(label: str, limits: dict[str, float]) -> float:
    """The bar a label outside the core components must reach: visibility oncall: labels, symptoms, the rest."""
    if is_oncall(label):
        return limits.get("visibility", limits["extra"])
    return limits.get("symptom", limits["extra"]) if label in SYMPTOMS else limits["extra"]


# The rules' own thresholds (no model): weights, not probabilities.
RULE_LIMITS = {
    "first": MIN_WEIGHT,
    "second": SECOND_CORE,
    "extra": MIN_EXTRA_WEIGHT,
    "preselect": 0.85,
    "route": STRONG,
    "review": 0.0,
    "visibility": MIN_EXTRA_WEIGHT,
}


def _assess(
    facts: Facts,
    findings: list[Finding],
    allowed: frozenset[str],
    cpu_lane: bool,
    min_confidence: float = 0.0,
    learned: LabelModel | None = None,
    predictions: dict[str, tuple[float, list[str]]] | None = None,
) -> Assessment:
    avoided = strongest(findings, Kind.AVOID)
    adds = strongest(findings, Kind.ADD, first=settles)
    routes = strongest(findings, Kind.ROUTE)
    flags = strongest(findings, Kind.FLAG)
    checks = [x for x in findings if x.kind == Kind.CHECK]
    out = Assessment()

    score = _scorer(learned, predictions or {}, findings)
    limits = learned.thresholds if learned is not None else RULE_LIMITS
    rule_adds = strongest([x for x in findings if x.origin == "rule"], Kind.ADD)  # the rules' own evidence, model aside
    labelled = ends_with_component(facts.labels)
    chosen, crowded = _without_weak_company(
        _components(adds, avoided, score, limits, rule_adds), score, learned, limits
    )
    unsure = [x for x in chosen if score(x) < min_confidence]
    chosen = [x for x in chosen if score(x) >= min_confidence]
    core = [x for x in chosen if x.label in CORE_COMPONENTS]
    # Without a model, weights against the rules' own bars; with one, calibrated probabilities against fitted ones.
    route_bar = limits.get("route", STRONG)
    handoff = next(
        (x for l, x in routes.items() if l != CPU_INDUCTOR_ONCALL and x.rule_id != "G2" and score(x) >= route_bar), None
    )
    cpu = routes.get(CPU_INDUCTOR_ONCALL)
    if cpu and learned is not None and score(cpu) < route_bar:
        cpu = None
    if cpu and not _cpu_only_shown(findings, checks):
        cpu = None  # R2.4: CUDA was never tried (a +cpu build, a repro without a device): the checklist asks instead
    if handoff:
        out.route, out.queue = Route.HANDOFF, handoff.label
        out.add.append(_suggest(handoff, score(handoff)))
        for x in chosen:
            if is_module(x.label):
                out.avoid.append(
                    Avoided(x.label, "G5", "handed off to another oncall: no module labels", x.evidence, x.source)
                )
        chosen = [x for x in chosen if not (is_module(x.label) or is_oncall(x.label))]
    elif cpu_lane or (
        cpu and (INDUCTOR in {x.label for x in core} or score(cpu) >= (CPU_TAG if learned is None else route_bar))
    ):
        out.route, out.queue = Route.CPU, CPU_INDUCTOR_ONCALL
        if cpu:
            out.add.append(_suggest(cpu, score(cpu)))
        if INDUCTOR not in {x.label for x in chosen}:
            evidence = cpu or Finding("R2.4", Kind.ADD, evidence=CPU_INDUCTOR_ONCALL, source="")
            chosen.insert(
                0,
                Finding(
                    "R2.4",
                    Kind.ADD,
                    INDUCTOR,
                    0.7,
                    evidence.evidence,
                    evidence.source,
                    "the CPU Inductor lane is Inductor",
                ),
            )
        chosen = [x for x in chosen if x.label not in (DYNAMIC_SHAPES, PT2_DISPATCHER) or x.weight >= STRONG]
    elif PT2_ONCALL not in facts.labels:
        out.add.append(Suggested(PT2_ONCALL, "G3", 0.9, reason="a PT2 issue stays in oncall: pt2 through labelling"))

    out.add.extend(_in_company(learned, _suggest(x, score(x)), x, chosen) for x in chosen)
    layer = _dispatcher_layer(out, facts, findings)
    has_module = any(is_module(s.label) for s in out.add) or any(is_module(l) for l in facts.labels)
    if out.route != Route.HANDOFF and not has_module:
        # G4: the catalog check below drops it again if this catalog lacks the fallback label.
        out.add.append(Suggested(COMPILE_UX, "G4", 0.3, reason="nothing specific fits: the fallback module label"))

    question = any(x.rule_id == "G1" for x in checks)
    crash = _crash(findings)
    review = crash or flags.get(TRIAGE_REVIEW)
    if review and not crash and score(review) < limits.get("review", 0.0):
        review = None
    if out.route != Route.HANDOFF:
        if review:
            out.add.append(_suggest(review, score(review)))
            out.avoid.append(
                Avoided(
                    HIGH_PRIORITY,
                    "R11",
                    "high priority is decided by the weekly meeting",
                    review.evidence,
                    review.source,
                )
            )
            if TRIAGED in facts.labels:
                out.avoid.append(
                    Avoided(TRIAGED, "R11", "flagged for triage review: not triaged until the meeting decides")
                )
        if LOW_PRIORITY in flags:
            out.add.append(_suggest(flags[LOW_PRIORITY]))
        repro = flags.get(NEEDS_REPRODUCTION)  # G9: ask for a self-contained reproduction, and do not mark it triaged
        if repro and NEEDS_REPRODUCTION not in facts.labels:
            out.add.append(_suggest(repro))
        if not review and not question and not repro:
            out.add.append(Suggested(TRIAGED, "G6", 0.6, reason="labelled, not redirected, not flagged for review"))
        gate = release_gate(facts)
        if gate.gate and RELEASE_TRIAGE not in facts.labels:
            out.add.append(
                Suggested(
                    RELEASE_TRIAGE,
                    gate.gate,
                    0.9 if gate.gate == "G12.2" else 0.85,
                    gate.evidence,
                    gate.source,
                    reason="the release manager's short list, a flag of its own beside triage review (G12)",
                )
            )

    out.avoid.extend(
        Avoided(x.label, x.rule_id, x.reason, x.evidence, x.source)
        for x in avoided.values()
        if x.label not in {s.label for s in out.add}
    )
    _enforce_catalog(out, allowed, labelled=labelled)
    _calibrate_status(out, learned)
    _preselect(out, limits, question, labelled, findings, rule_adds, crashed=crash is not None, learned=learned)
    _layer_follows_umbrella(out)
    # G11: a commonly missed label the issue already carries is checked.
    checks = [
        replace(x, state="satisfied", reason=f"{x.reason.removesuffix('?')}: on the issue.")
        if x.rule_id == "G11" and x.label in facts.labels
        else x
        for x in checks
    ]
    out.checklist = (
        _checklist(out, checks, review, question, labelled)
        + _component_checks(out, findings)
        + _skill_checks(out, facts, flags, layer)
        + _crowded_checks(crowded)
        + _weak_checks(out, {**adds, **rule_adds}, unsure, asked=frozenset(x.label for x in crowded))
    )
    return out


def _dispatcher_layer(out: Assessment, facts: Facts, findings: list[Finding]) -> Layer | None:
    """R5.1: next to a suggested `module: pt2-dispatcher`, the label of the layer the evidence names (rules_skill.
    dispatcher_layer), at the umbrella's confidence; and the umbrella next to a layer label the issue already
    carries. Returns the layer found (None: none named, or no umbrella to go with)."""
    umbrella = next((s for s in out.add if s.label == PT2_DISPATCHER), None)
    carried = [l for l in DISPATCHER_LAYERS if l in facts.labels]
    if umbrella is None:
        if carried and PT2_DISPATCHER not in facts.labels and out.route != Route.HANDOFF:
            out.add.append(
                Suggested(
                    PT2_DISPATCHER,
                    "R5.1",
                    0.9,
                    carried[0],
                    "labels",
                    reason="the owners filter on the umbrella: the layer label alone is not enough (R5.1)",
                )
            )
        return None
    if carried:
        return None
    layer = dispatcher_layer(facts, findings)
    if layer is not None:
        out.add.append(
            Suggested(
                layer.label,
                "R5.1",
                umbrella.confidence,
                layer.evidence,
                layer.source,
                source=umbrella.source,
                reason=f"the layer of module: pt2-dispatcher, from {layer.how}: both go on the issue (R5.1)",
            )
        )
    return layer


def _layer_follows_umbrella(out: Assessment) -> None:
    """R5.1's layer label is ticked exactly when its umbrella is: one decision, two labels."""
    umbrella = next((s for s in out.add if s.label == PT2_DISPATCHER), None)
    if umbrella is None:
        return
    out.add = [
        replace(s, preselected=umbrella.preselected) if s.rule_id == "R5.1" and s.label in DISPATCHER_LAYERS else s
        for s in out.add
    ]


def _skill_checks(out: Assessment, facts: Facts, flags: dict[str, Finding], layer: Layer | None) -> list[ChecklistItem]:
    """The checklist items of what PyTorch's triage skill added: R5.1's layer next to the dispatcher umbrella, G9's
    request for a self-contained reproduction, G12's release gate."""
    if out.route == Route.HANDOFF:
        return []
    items: list[ChecklistItem] = []
    if any(s.label == PT2_DISPATCHER for s in out.add) or PT2_DISPATCHER in facts.labels:
        carried = next((l for l in DISPATCHER_LAYERS if l in facts.labels), "")
        if carried or layer is not None:
            items.append(
                ChecklistItem(
                    "R5.1",
                    f"The dispatcher's layer goes next to the umbrella: {carried or layer.label}"
                    + (f", from {layer.how}." if layer is not None else ", on the issue already."),
                    "satisfied",
                    layer.evidence if layer is not None else carried,
                )
            )
        else:
            items.append(
                ChecklistItem(
                    "R5.1",
                    "Which layer? Add module: aotdispatch, module: functionalization, module: fakeTensor or "
                    "module: custom-operators next to module: pt2-dispatcher: both go on the issue.",
                    "needs_human",
                )
            )
    repro = flags.get(NEEDS_REPRODUCTION)
    if repro is not None:
        items.append(
            ChecklistItem(
                repro.rule_id,
                f"No self-contained reproduction ({repro.reason.split(':')[0].removeprefix('reproducing needs ')}): "
                "ask for one with the standard reply, and do not mark it triaged (G9).",
                "needs_human",
                repro.evidence,
            )
        )
    gate = release_gate(facts)
    items.append(
        ChecklistItem(
            "G12",
            f"release triage {'through ' + gate.gate if gate.gate else 'left off'}: {gate.evidence} (it needs the "
            "latest released minor stated, G12.1, or high priority from a human, G12.2; when unsure, leave it off).",
            "satisfied" if gate.gate or RELEASE_TRIAGE in facts.labels else "not_applicable",
            gate.evidence,
        )
    )
    return items


def _cpu_only_shown(findings: list[Finding], checks: list[Finding]) -> bool:
    """Whether the text leaves a CPU route open: a rule routes it (a [CPU] tag, MKLDNN, "only on CPU": R10,
    R2.4), or nothing says CUDA was never tried. Where R2.4 asks whether it passes on CUDA (a +cpu build, a
    repro whose tensors get no device), a learned route (the labeler's, the neighbours' vote) is no answer to
    that question: humans routed such reports 4 times in 48 in the training pool."""
    if any(x.kind == Kind.ROUTE and x.label == CPU_INDUCTOR_ONCALL and x.origin == "rule" for x in findings):
        return True
    return not any(x.rule_id == "R2.4" for x in checks)


def _crash(findings: list[Finding]) -> Finding | None:
    """R11's flag where the rubric leaves no judgement (weighing.binds), or None: a crash it names outright
    (segfault, SIGSEGV, illegal memory access, device-side assert, core dumped), a silently wrong result, a
    regression or a flaky test read in the text, or one a verdict shows. It is suggested and pre-selected
    whatever the learned review curve says (the humans' labels are a poor proxy for the flag: meetings remove
    it once they decide), so `a` never marks such an issue `triaged`. A loose "crashes" in a title is not one."""
    return binding_review(findings)


def _calibrate_status(out: Assessment, learned: LabelModel | None) -> None:
    """The fixed-weight labels (G3's oncall: pt2, G4's fallback, G6's triaged, R12.5, needs reproduction)
    get their observed rates as confidence, where a model's calibration has them."""
    if learned is None:
        return
    keys = {"G4": "fallback", "G6": "triaged", "R12.5": "flag", "G9.1": "flag", "G9.2": "flag"}
    out.add = [
        replace(s, confidence=learned.calibrated(keys[s.rule_id], s.confidence)) if s.rule_id in keys else s
        for s in out.add
    ]


def _preselect(
    out: Assessment,
    limits: dict[str, float],
    question: bool,
    labelled: bool,
    findings: list[Finding],
    rule_adds: dict[str, Finding],
    crashed: bool = False,
    learned: LabelModel | None = None,
) -> None:
    """Tick what "accept" applies: the labels whose calibrated confidence clears their kind's threshold.
    labelled: the issue already carries a `module:` label; rule_adds: the rules' own strongest ADD per label;
    crashed: R11 names a crash outright (_crash).

    `module:` labels and flags: limits["preselect"]; `oncall:` labels: limits["preselect_route"]; the review
    flag: limits["preselect_review"] (each chosen out of fold for precision, fitting.fit_model). Bisection
    verdicts always. Never G4's fallback (a placeholder to replace), nothing on a usage question (G1), no
    CPU route read off the text once a bisection ran without showing the bug CPU-only (R2.4). With a model,
    a `module:` label outside the core only once it has a calibration curve of its own (has_own_curve): a
    label seen a handful of times has no measured precision, only its group's. Never a component whose best
    rule evidence is the default-backend guess for wrong results: R2 bisects those first, whatever the
    learned labeler makes of the words. `triaged` only when the issue will carry a `module:` label (ticked,
    or there already: G4) and nothing is flagged (G6).
    """
    bar = limits.get("preselect", 1.01)
    bars = {"oncall": limits.get("preselect_route", bar), TRIAGE_REVIEW: limits.get("preselect_review", bar)}
    bisected = [x for x in findings if x.source.startswith("bisection")]
    cpu_shown = any(x.label == CPU_INDUCTOR_ONCALL for x in bisected)
    guessed = {l for l, x in rule_adds.items() if x.reason == DEFAULT_BACKEND_GUESS and not bisected}
    held = {x.label: x.reason for x in findings if x.kind == HOLD}  # weighing: the thread contradicts it
    ticked, held_back = [], {}
    for s in out.add:
        threshold = bars["oncall"] if is_oncall(s.label) else bars.get(s.label, bar)
        pick = s.confidence >= threshold and s.rule_id != "G4"
        if s.label == CPU_INDUCTOR_ONCALL and bisected and not cpu_shown:
            pick = False
        # Sure enough by confidence, held back for a reason the triager is told (in the suggestion's reason).
        unmeasured = (
            learned is not None
            and is_module(s.label)
            and s.label not in CORE_COMPONENTS
            and not has_own_curve(learned, s.label)
        )
        if pick and (unmeasured or s.label in guessed):
            pick = False
            held_back[s.label] = BISECT_FIRST if s.label in guessed else UNMEASURED
        if pick and s.label in held:
            pick, held_back[s.label] = False, held[s.label]
        if s.label == PT2_ONCALL or s.source == "bisection" or (s.label == TRIAGE_REVIEW and crashed):
            pick = True
        if question and is_module(s.label):
            pick = False
        ticked.append(pick)
    modules = labelled or ends_with_component(s.label for s, t in zip(out.add, ticked) if t)
    flagged = any(t and s.label == TRIAGE_REVIEW for s, t in zip(out.add, ticked))
    out.add = [
        replace(
            s,
            preselected=(modules and not flagged and not question) if s.label == TRIAGED else t,
            reason=f"{s.reason} · {held_back[s.label]}" if s.label in held_back else s.reason,
        )
        for s, t in zip(out.add, ticked)
    ]


UNMEASURED = "held back: too few past triage decisions to measure how often it is right"
BISECT_FIRST = "held back: wrong results are bisected before a component is applied (R2)"


def _enforce_catalog(out: Assessment, allowed: frozenset[str], labelled: bool) -> None:
    """G7 and R7.4: drop forbidden or unknown labels from `add`, showing each in `avoid` with the reason."""
    kept: list[Suggested] = []
    seen: set[str] = set()
    for s in out.add:
        if s.label in seen:
            continue
        seen.add(s.label)
        if s.label == HIGH_PRIORITY:
            out.avoid.append(
                Avoided(HIGH_PRIORITY, "R11", "never suggested: high priority goes through the weekly meeting")
            )
        elif is_forbidden(s.label):
            out.avoid.append(Avoided(s.label, "G7", "forbidden label (G7)", s.evidence, s.evidence_source))
        elif why := never_applied(s.label):
            out.avoid.append(Avoided(s.label, "G13", why, s.evidence, s.evidence_source))
        elif s.label not in allowed:
            out.avoid.append(
                Avoided(
                    s.label,
                    "R7.4",
                    f"{s.rule_id} names it, but it is not in the catalog: add by hand if it exists",
                    s.evidence,
                    s.evidence_source,
                )
            )
        else:
            kept.append(s)
    out.add = kept
    fallback_ok = COMPILE_UX in allowed
    if fallback_ok and not labelled and out.route in Route.LANES and not ends_with_component(s.label for s in kept):
        out.add.append(Suggested(COMPILE_UX, "G4", 0.3, reason="nothing specific fits: the fallback module label"))


def _checklist(
    out: Assessment, checks: list[Finding], review: Finding | None, question: bool, labelled: bool = False
) -> list[ChecklistItem]:
    """Every rubric item relevant to this issue, with its state. labelled: the issue already carries a module: label."""
    modules = [s.label for s in out.add if is_module(s.label)]
    items = [ChecklistItem(x.rule_id, x.reason, x.state, x.evidence) for x in checks]
    if out.route == Route.HANDOFF:
        oncall = next((s.label for s in out.add if is_oncall(s.label)), "")
        if oncall:
            items.append(
                ChecklistItem(
                    "G5",
                    f"Hand off to {oncall}: exactly one oncall label, no module labels, no triaged.",
                    "satisfied",
                    oncall,
                )
            )
        else:
            # The hand-off's label is not in this repository's catalog (R7.4 dropped it): a finding on this issue,
            # for a human to settle, never an error that stops the refresh of every other issue.
            items.append(
                ChecklistItem(
                    "G5",
                    f"Hand off to {out.queue}: that label is not in the repository's label catalog (R7.4); hand it "
                    "off by hand, or sync the labels if it was added.",
                    "needs_human",
                    out.queue,
                )
            )
    else:
        items.append(ChecklistItem("G3", "oncall: pt2 is not a redirect: continue labelling.", "satisfied"))
        fallback = any(s.rule_id == "G4" for s in out.add)
        # What `a` applies must carry the component: a suggestion left unticked does not satisfy G4.
        ticked = [s.label for s in out.add if is_module(s.label) and s.preselected]
        note = (
            " (fallback: try to be precise first)"
            if fallback
            else ": none in this catalog, pick one by hand"
            if not modules
            else ""
            if ticked or labelled
            else ": none sure enough to pre-select, tick one before applying"
        )
        items.append(
            ChecklistItem(
                "G4",
                "At least one module: label" + note,
                "satisfied" if (ticked or labelled) and modules and not fallback else "needs_human",
                ", ".join(ticked or modules),
            )
        )
        items.append(r11_item(review))
        items.append(
            ChecklistItem(
                "G6",
                "Not redirected and not flagged: triaged.",
                "not_applicable" if (review or question) else "satisfied",
            )
        )
    return items


def _component_checks(out: Assessment, findings: list[Finding]) -> list[ChecklistItem]:
    """The questions that would confirm or change the suggested components (R1.1, R2, R5)."""
    if out.route == Route.HANDOFF:
        return []
    labels = {s.label for s in out.add}
    items = []
    backend = next((x for x in findings if decisive(x)), None)
    if backend:
        items.append(ChecklistItem("R2", "Backend results decide the component.", "satisfied", backend.evidence))
    elif labels & {INDUCTOR, PT2_DISPATCHER, DYNAMO} or TRIAGE_REVIEW in labels:
        items.append(
            ChecklistItem(
                "R2",
                "No backend results yet: run the bisection (eager, aot_eager, "
                "aot_eager_decomp_partition, inductor) to find the component.",
                "needs_human",
            )
        )
    # A bisection verdict replaces the text's backend results (_components): where they disagree, say so.
    bisected = {x.label for x in findings if x.source.startswith("bisection") and x.label in CORE_COMPONENTS}
    told = next(
        (
            x
            for x in findings
            if decisive(x)
            and not x.source.startswith("bisection")
            and x.label in CORE_COMPONENTS
            and x.label not in bisected
        ),
        None,
    )
    if bisected and told:
        items.append(
            ChecklistItem(
                "R2",
                f"The bisection points at {', '.join(sorted(bisected))}, but the thread reports a backend "
                f"result that points at {told.label}: same device, dtype and version? Rerun with the "
                "thread's setup before applying.",
                "needs_human",
                told.evidence,
            )
        )
    if labels & {DYNAMO, DYNAMIC_SHAPES} and not any(x.rule_id == "R1.1" for x in findings):
        items.append(
            ChecklistItem(
                "R1.1", "Does it pass with dynamic=False? Then dynamic shapes only, not Dynamo.", "needs_human"
            )
        )
    if PT2_DISPATCHER in labels:
        items.append(
            ChecklistItem(
                "R5",
                "Is the bug in AOTAutograd, functionalization, FakeTensor or custom-op dispatch, "
                "not merely in the stack trace?",
                "needs_human",
            )
        )
    return items


def _crowded_checks(crowded: list[Finding]) -> list[ChecklistItem]:
    """A core component left out next to another one (_without_weak_company), as a question: R1 says do not
    over-tag, the triager knows whether it is a second cause."""
    return [
        ChecklistItem(
            x.rule_id,
            f"{x.label}: left out next to another component, where such a second label is "
            f"rarely right ({x.reason}): is it a cause of its own? (R1)",
            "needs_human",
            x.evidence,
        )
        for x in crowded
    ]


def _weak_checks(
    out: Assessment, adds: dict[str, Finding], unsure: list[Finding], asked: frozenset[str] = frozenset()
) -> list[ChecklistItem]:
    """Weak or below-threshold signals as questions for a human instead of suggestions (G8).

    One item per label that had some evidence but is not suggested, or is suggested only as a weak
    guess (not pre-selected, and no rule found more than a keyword for it): the keyword says where it
    failed, a human decides whether that is why. asked: labels the checklist already asks about (_crowded_checks).
    """
    if out.route == Route.HANDOFF:
        return []
    suggested = {s.label: s for s in out.add}
    dropped = {x.label for x in unsure}  # by label: the rule's finding here may not be the one that was chosen
    items = []
    for label, x in adds.items():
        if not is_module(label) or label == COMPILE_UX or label in asked:
            continue
        shown = suggested.get(label)
        weak = x.weight <= WEAK if x.origin == "rule" else shown is not None and shown.confidence <= WEAK
        if label in dropped or (shown is None and weak) or (shown is not None and not shown.preselected and weak):
            what = "suggested as a weak guess" if shown else "not suggested"
            items.append(
                ChecklistItem(
                    x.rule_id,
                    f"{label}: {what} on weak evidence ({x.reason}): is this why it fails, or only where? (G8)",
                    "needs_human",
                    x.evidence,
                )
            )
    return items
