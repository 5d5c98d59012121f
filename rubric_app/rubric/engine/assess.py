"""The rubric engine: run every rule (rules/general.py, rules/domain.py), weigh the findings, enforce the invariants.

Invariants that always hold on the returned Assessment (tests/rubric/test_invariants.py):
- a PT2 issue that is not handed off or skipped ends with at least one `module:` label (G4);
- nothing forbidden by G7 or outside the catalog is in `add` (R7.4 shows it in `avoid`);
- never `high priority` (R11); no `module:` labels on a handoff (G5);
- `triage review` never together with `triaged` (R11, G6).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache

from rubric_app.rubric.engine.checklist import (
    component_checks,
    crowded_checks,
    route_and_status,
    skill_checks,
    weak_checks,
)
from rubric_app.rubric.engine.components import RULE_LIMITS, STRONG, choose, in_company, without_weak_company
from rubric_app.rubric.engine.model import LabelModel, features
from rubric_app.rubric.engine.preselection import Status, calibrate_status, concludes_route, pending, preselect
from rubric_app.rubric.engine.scoring import model_findings, scorer, settles, strongest
from rubric_app.rubric.engine.weighing import binding_review, weigh
from rubric_app.rubric.likeness.neighbours import similar_findings
from rubric_app.rubric.reading.catalog import catalog_names, is_forbidden
from rubric_app.rubric.reading.facts import RULES, Facts, Finding
from rubric_app.rubric.reading.flow import ends_with_component
from rubric_app.rubric.reading.text import code_blocks, read_code, read_sources
from rubric_app.rubric.reading.types import Assessment, Avoided, ChecklistItem, IssueText, Suggested

# Importing the rules' modules registers their rules (facts.RULES).
from rubric_app.rubric.rules import agents, domain, general, review, skill_additions
from rubric_app.rubric.rules.general import thread_facts
from rubric_app.rubric.rules.skill_additions import (
    BISECTION_NEED,
    G9_REASON,
    Layer,
    dispatcher_layer,
    never_applied,
    release_gate,
)
from rubric_app.vocabulary import (
    COMPILE_UX,
    CORE_COMPONENTS,
    CPU_INDUCTOR_ONCALL,
    DISPATCHER_LAYERS,
    DYNAMIC_SHAPES,
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

# R2.4 routes an Inductor problem; a [CPU] tag in the title (R10, this weight) routes whatever the component.
CPU_TAG = 0.9


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
            learned = [x for x in self.findings if x.learned and not x.rule_id.startswith(NOT_LEARNED)]
            self._features = features(self.facts.sources, learned, thread_facts(self.facts))
        return self._features


# What PyTorch's triage skill added about labels the learned labeler does not predict (a reproduction nobody can run
# without a script, edge cases, commonly missed labels, the release flag, the bot's lane): shown to the triager, not
# features of the labeler. Learned from, they took 0.006 off the out-of-fold component precision and 0.009 off the
# pre-selected components' (docs/engine.md, "Figures before each change"). G9.1 is learned, as its G1 was.
# The rules' modules in the rubric's order (G and R1-R5, what the automation found, R6-R10, R11 and R12, what the
# triage skill added): their rules run in this order whichever module Python happened to load first.
RULE_MODULES = tuple(module.__name__ for module in (general, agents, domain, review, skill_additions))


def _in_rubric_order() -> list:
    return sorted(RULES, key=lambda registered: RULE_MODULES.index(registered[1].__module__))


NOT_LEARNED = ("G9.2", "G10", "G11", "G12", "G13")


def read(issue: IssueText) -> Reading:
    """What every rule finds in `issue` (G0 first: an issue in another queue is not read further)."""
    facts = facts_of(issue)
    lane = general.g0_other_oncall(facts)
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
        findings += model_findings(learned, feats, predictions, findings)
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
    return [x for rule_id, fn in _in_rubric_order() if rule_id != "G0" for x in fn(facts)]


def facts_of(issue: IssueText) -> Facts:
    """What the rules read: capped sources, repro-code facts, current labels."""
    sources, environment = read_sources(issue)
    return Facts(issue, sources, read_code(code_blocks(sources)), frozenset(issue.labels), environment=environment)


def _bisection(issue: IssueText) -> list[Finding]:
    """Verdicts of finished bisection runs: the strongest evidence there is (R2)."""
    found = []
    for verdict in issue.bisection:
        source = f"bisection:{verdict.run_id}" if verdict.run_id is not None else "bisection"
        flag = verdict.label in (TRIAGE_REVIEW, NEEDS_REPRODUCTION)
        kind = Kind.ROUTE if is_oncall(verdict.label) else Kind.FLAG if flag else Kind.ADD
        # G9: a repro the bisection could not run as posted; the reason says so in G9's words (rules_skill.g9_need).
        reason = G9_REASON.format(BISECTION_NEED) if verdict.label == NEEDS_REPRODUCTION else "bisection verdict"
        found.append(Finding(verdict.rule_id, kind, verdict.label, 1.0, verdict.evidence, source, reason))
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


@dataclass
class Weighed:
    """Every finding of one issue by kind, with the score and the bars that weigh them: what _assess's steps read."""

    facts: Facts
    findings: list[Finding]
    score: Callable[[Finding], float]
    limits: dict[str, float]
    learned: LabelModel | None

    def __post_init__(self) -> None:
        self.avoided = strongest(self.findings, Kind.AVOID)
        self.adds = strongest(self.findings, Kind.ADD, first=settles)
        # A route the rules conclude (concludes_route) is the one shown: its evidence, not "learned from N issues".
        self.routes = strongest(self.findings, Kind.ROUTE, first=concludes_route)
        self.flags = strongest(self.findings, Kind.FLAG)
        self.checks = [x for x in self.findings if x.kind == Kind.CHECK]
        # The rules' own evidence per label, the learned labeler's aside.
        self.rule_adds = strongest([x for x in self.findings if x.origin == "rule"], Kind.ADD)
        self.labelled = ends_with_component(self.facts.labels)  # the issue carries a `module:` label already


def _assess(
    facts: Facts,
    findings: list[Finding],
    allowed: frozenset[str],
    cpu_lane: bool,
    min_confidence: float = 0.0,
    learned: LabelModel | None = None,
    predictions: dict[str, tuple[float, list[str]]] | None = None,
) -> Assessment:
    """The engine's answer in four named steps: the route, the components, the flags and status, the checklist;
    then the invariants (the catalog, G7) and what `a` ticks (preselection.py)."""
    limits = learned.thresholds if learned is not None else RULE_LIMITS
    w = Weighed(facts, findings, scorer(learned, predictions or {}, findings), limits, learned)
    out = Assessment()
    picked = choose(w.adds, w.avoided, w.score, limits, w.rule_adds)
    chosen, crowded = without_weak_company(picked, w.score, learned, limits)
    unsure = [x for x in chosen if w.score(x) < min_confidence]
    chosen = _route(out, w, [x for x in chosen if w.score(x) >= min_confidence], cpu_lane)
    layer = _components(out, w, chosen)
    status = _flags(out, w)
    out.avoid.extend(
        Avoided(x.label, x.rule_id, x.reason, x.evidence, x.source)
        for x in w.avoided.values()
        if x.label not in {s.label for s in out.add}
    )
    _enforce_catalog(out, allowed, labelled=w.labelled)
    calibrate_status(out, learned)
    preselect(out, limits, status, w.labelled, findings, w.rule_adds, learned=learned)
    _layer_follows_umbrella(out)
    out.checklist = _checklist(out, w, status, layer, crowded, unsure)
    return out


def _route(out: Assessment, w: Weighed, chosen: list[Finding], cpu_lane: bool) -> list[Finding]:
    """The route step: a hand-off to another oncall (G5: no module labels), PT2's CPU Inductor lane (R2.4, R10: the
    lane is Inductor), or oncall: pt2 (G3). Sets out.route and out.queue, suggests the route's label; returns the
    components that go with the route."""
    score, findings = w.score, w.findings
    # Without a model, weights against the rules' own bars; with one, calibrated probabilities against fitted ones.
    route_bar = w.limits.get("route", STRONG)
    handoff = next(
        (x for l, x in w.routes.items() if l != CPU_INDUCTOR_ONCALL and x.rule_id != "G2" and score(x) >= route_bar),
        None,
    )
    cpu = w.routes.get(CPU_INDUCTOR_ONCALL)
    if cpu and w.learned is not None and score(cpu) < route_bar:
        cpu = None
    if cpu and not _cpu_only_shown(findings, w.checks):
        cpu = None  # R2.4: CUDA was never tried (a +cpu build, a repro without a device): the checklist asks instead
    core = {x.label for x in chosen if x.label in CORE_COMPONENTS}
    if handoff:
        out.route, out.queue = Route.HANDOFF, handoff.label
        out.add.append(_suggest(handoff, score(handoff)))
        out.avoid.extend(
            Avoided(x.label, "G5", "handed off to another oncall: no module labels", x.evidence, x.source)
            for x in chosen
            if is_module(x.label)
        )
        return [x for x in chosen if not (is_module(x.label) or is_oncall(x.label))]
    if cpu_lane or (cpu and (INDUCTOR in core or score(cpu) >= (CPU_TAG if w.learned is None else route_bar))):
        out.route, out.queue = Route.CPU, CPU_INDUCTOR_ONCALL
        if cpu:
            out.add.append(_suggest(cpu, score(cpu)))
        if INDUCTOR not in {x.label for x in chosen}:
            evidence = cpu or Finding("R2.4", Kind.ADD, evidence=CPU_INDUCTOR_ONCALL, source="")
            lane = "the CPU Inductor lane is Inductor"
            chosen.insert(0, Finding("R2.4", Kind.ADD, INDUCTOR, 0.7, evidence.evidence, evidence.source, lane))
        return [x for x in chosen if x.label not in (DYNAMIC_SHAPES, PT2_DISPATCHER) or x.weight >= STRONG]
    if PT2_ONCALL not in w.facts.labels:
        out.add.append(Suggested(PT2_ONCALL, "G3", 0.9, reason="a PT2 issue stays in oncall: pt2 through labelling"))
    return chosen


def _components(out: Assessment, w: Weighed, chosen: list[Finding]) -> Layer | None:
    """The components step: the chosen components and visibility labels, each scored where it stands (a core
    component next to another one on its company curve), R5.1's dispatcher layer, G4's fallback. Returns the
    layer R5.1 found, if any."""
    out.add.extend(in_company(w.learned, _suggest(x, w.score(x)), x, chosen) for x in chosen)
    layer = _dispatcher_layer(out, w.facts, w.findings)
    has_module = any(is_module(s.label) for s in out.add) or w.labelled
    if out.route != Route.HANDOFF and not has_module:
        # G4: the catalog check drops it again if this catalog lacks the fallback label.
        out.add.append(Suggested(COMPILE_UX, "G4", 0.3, reason="nothing specific fits: the fallback module label"))
    return layer


def _flags(out: Assessment, w: Weighed) -> Status:
    """The flags and the status: R11's review flag (binding, or offered where only judgement says so), R12.5's low
    priority, G9's request for a reproduction, G6's `triaged` (held while a rule still needs a human: status.
    pending), G12's release triage. A hand-off gets none of them (G5)."""
    facts, score = w.facts, w.score
    binding = binding_review(w.findings)
    review = binding or w.flags.get(TRIAGE_REVIEW)
    if review and not binding and score(review) < w.limits.get("review", 0.0):
        review = None
    repro = w.flags.get(NEEDS_REPRODUCTION)
    status = Status(
        review=review,
        binding=binding is not None,
        question=any(x.rule_id == "G1" for x in w.checks),
        repro=repro if repro is not None and NEEDS_REPRODUCTION not in facts.labels else None,
        pending=pending(facts, w.checks, review if binding is None else None, repro),
    )
    if out.route == Route.HANDOFF:
        return status
    if review:
        out.add.append(_suggest(review, score(review)))
        why = "high priority is decided by the weekly meeting"
        out.avoid.append(Avoided(HIGH_PRIORITY, "R11", why, review.evidence, review.source))
        if TRIAGED in facts.labels:
            out.avoid.append(
                Avoided(TRIAGED, "R11", "flagged for triage review: not triaged until the meeting decides")
            )
    if LOW_PRIORITY in w.flags:
        out.add.append(_suggest(w.flags[LOW_PRIORITY]))
    if status.repro:
        out.add.append(_suggest(status.repro))
    # Never beside a flag or a request for a reproduction it would contradict (R11, G9): where those are only offered,
    # the G6 checklist item (and the apply form's hold) says what the triager must decide.
    if not status.review and not status.question and not status.repro:
        held = f" · held: {status.pending[0].text}" if status.pending else ""
        out.add.append(Suggested(TRIAGED, "G6", 0.6, reason=f"labelled, not redirected, not flagged for review{held}"))
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
    return status


def _checklist(
    out: Assessment, w: Weighed, status: Status, layer: Layer | None, crowded: list[Finding], unsure: list[Finding]
) -> list[ChecklistItem]:
    """The checklist step (checklist.py): the rules' checks, the route and status, the components' questions, the
    skill's items, the second components left out, the weak guesses."""
    # G11: a commonly missed label the issue already carries is checked.
    checks = [
        replace(x, state="satisfied", reason=f"{x.reason.removesuffix('?')}: on the issue.")
        if x.rule_id == "G11" and x.label in w.facts.labels
        else x
        for x in w.checks
    ]
    return (
        route_and_status(out, checks, status, w.labelled)
        + component_checks(out, w.findings, w.facts.issue.bisected)
        + skill_checks(out, w.facts, w.flags, layer)
        + crowded_checks(crowded)
        + weak_checks(out, {**w.adds, **w.rule_adds}, unsure, asked=frozenset(x.label for x in crowded))
    )


def _dispatcher_layer(out: Assessment, facts: Facts, findings: list[Finding]) -> Layer | None:
    """R5.1: next to a suggested `module: pt2-dispatcher`, the label of the layer the evidence names
    (rules/skill_additions.py dispatcher_layer), at the umbrella's confidence; and the umbrella next to a layer label
    the issue already carries. Returns the layer found (None: none named, or no umbrella to go with)."""
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


def _cpu_only_shown(findings: list[Finding], checks: list[Finding]) -> bool:
    """Whether the text leaves a CPU route open: a rule routes it (a [CPU] tag, MKLDNN, "only on CPU": R10,
    R2.4), or nothing says CUDA was never tried. Where R2.4 asks whether it passes on CUDA (a +cpu build, a
    repro whose tensors get no device), a learned route (the labeler's, the neighbours' vote) is no answer to
    that question: humans routed such reports 4 times in 48 in the training pool."""
    if any(x.kind == Kind.ROUTE and x.label == CPU_INDUCTOR_ONCALL and x.origin == "rule" for x in findings):
        return True
    return not any(x.rule_id == "R2.4" for x in checks)


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
