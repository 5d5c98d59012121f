"""What `a` ticks: the pre-selection of labels, routes and the status (G6), and what a human must still decide.

The engine's answer carries, per suggestion, whether it is pre-selected; triage/accepting.py turns exactly that into
the apply form's values, so what the page shows ticked is what `a` applies. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rubric_app.rubric.engine.components import STRONG, named_outright
from rubric_app.rubric.engine.model import LabelModel
from rubric_app.rubric.engine.scoring import has_own_curve
from rubric_app.rubric.engine.weighing import r11_question
from rubric_app.rubric.reading.facts import Facts, Finding
from rubric_app.rubric.reading.flow import ends_with_component
from rubric_app.rubric.reading.types import Assessment, ChecklistItem
from rubric_app.rubric.rules.general import DEFAULT_BACKEND_GUESS
from rubric_app.rubric.rules.skill_additions import g9_need
from rubric_app.vocabulary import (
    CORE_COMPONENTS,
    CPU_INDUCTOR_ONCALL,
    NEEDS_REPRODUCTION,
    PT2_ONCALL,
    TRIAGE_REVIEW,
    TRIAGED,
    Kind,
    Route,
    is_module,
    is_oncall,
)


@dataclass(frozen=True)
class Status:
    """What the flags say about `triaged` (G6), from engine._flags."""

    review: Finding | None  # R11's flag, binding or offered (None: no flag)
    binding: bool  # R11 binds: pre-selected whatever the learned score (weighing.binds)
    question: bool  # G1: a usage question; nothing is pre-selected
    repro: Finding | None  # G9's request for a self-contained reproduction, where the issue lacks the label
    pending: tuple[ChecklistItem, ...] = ()  # what a human must decide before `triaged` (pending())


def concludes(x: Finding) -> bool:
    """A G9 finding that leaves no judgement: reproducing needs a file to download (G9.1), so nobody can run the
    repro as posted. G9.2's reasons (a GPU named without a script, a private model, an upgrade, a cluster) are a
    judgement: offered, and `triaged` waits for the triager. A bisection that could not run the posted repro (a
    package the runner lacks, a snippet with an undefined name) concludes as G9.1 does: nobody ran it as posted."""
    return x.rule_id == "G9.1" or (x.source.startswith("bisection") and x.label == NEEDS_REPRODUCTION)


def concludes_route(x: Finding) -> bool:
    """A route the rubric concludes: a bisection verdict's, or a rule's from STRONG up (R10's [CPU] or MKLDNN tag,
    R2.4's CPU backend, R6.3's export-only or DTensor-only problem without compile); never the learned labeler's or
    the neighbours' vote alone. Where the engine routes the issue there, the route is pre-selected
    (docs/engine.md, "Routes pre-selected", for its precision)."""
    if x.kind != Kind.ROUTE or x.rule_id == "G0":
        return False
    return x.source.startswith("bisection") or (x.origin == "rule" and x.weight >= STRONG)


def pending(
    facts: Facts, checks: list[Finding], offered: Finding | None, repro: Finding | None
) -> tuple[ChecklistItem, ...]:
    """What a rule still needs a human to decide before `triaged` (G6), each as the checklist says it: R11's flag
    where only judgement raises it (offered: a performance regression, an important user, the learned score), a
    reproduction G9.2 may need or that `needs reproduction` already waits for, a fuzzer report whose criteria fail
    (R12.1-R12.3)."""
    items = []
    if offered is not None:
        items.append(ChecklistItem("R11", r11_question(offered), "needs_human", offered.evidence))
    if NEEDS_REPRODUCTION in facts.labels:
        items.append(
            ChecklistItem(
                "G9",
                "It waits for a self-contained reproduction (needs reproduction): mark it triaged once one has "
                "arrived, and needs reproduction goes.",
                "needs_human",
            )
        )
    elif repro is not None and not concludes(repro):
        items.append(
            ChecklistItem(
                repro.rule_id,
                f"Reproducing it may need {g9_need(repro)}: ask for a self-contained reproduction (G9), or mark it "
                "triaged if it runs as posted.",
                "needs_human",
                repro.evidence,
            )
        )
    failed = [x for x in checks if x.rule_id in FUZZER_CRITERIA and x.state == "violated"]
    if failed:
        items.append(
            ChecklistItem(
                "R12",
                f"The fuzzer's criteria fail ({'; '.join(x.reason for x in failed)}): re-check, then triage it "
                "normally if it is common or easy (R12.4), or add low priority (R12.5).",
                "needs_human",
                failed[0].evidence,
            )
        )
    return tuple(items)


# R12.1-R12.3: the criteria a fuzzer's report meets before it is triaged normally (R12.4).
FUZZER_CRITERIA = ("R12.1", "R12.2", "R12.3")


def calibrate_status(out: Assessment, learned: LabelModel | None) -> None:
    """The fixed-weight labels (G3's oncall: pt2, G4's fallback, G6's triaged, R12.5, G9.2's needs reproduction)
    get their observed rates as confidence, where a model's calibration has them. G9.1 is a gate (concludes), shown
    at its rule's weight as G12's is: humans' history of `needs reproduction` predates the skill's G9."""
    if learned is None:
        return
    keys = {"G4": "fallback", "G6": "triaged", "R12.5": "flag", "G9.2": "flag"}
    out.add = [
        replace(s, confidence=learned.calibrated(keys[s.rule_id], s.confidence)) if s.rule_id in keys else s
        for s in out.add
    ]


def preselect(
    out: Assessment,
    limits: dict[str, float],
    status: Status,
    labelled: bool,
    findings: list[Finding],
    rule_adds: dict[str, Finding],
    learned: LabelModel | None = None,
) -> None:
    """Tick what "accept" applies: the labels whose calibrated confidence clears their kind's threshold, and what the
    rubric concludes. labelled: the issue already carries a `module:` label; rule_adds: the rules' own strongest ADD
    per label; status: what the flags say (engine._flags).

    `module:` labels and flags: limits["preselect"]; `oncall:` labels: limits["preselect_route"]; the review
    flag: limits["preselect_review"] (each chosen out of fold for precision, fitting.fit_model). Bisection
    verdicts always; R11's binding flag always; G9.1's request for a reproduction (concludes); the route the engine
    takes where the rules conclude it (concludes_route). Never G4's fallback (a placeholder to replace), nothing
    on a usage question (G1), no CPU route once a bisection ran without showing the bug CPU-only (R2.4). With a
    model, a `module:` label outside the core only once it has a calibration curve of its own (has_own_curve): a
    label seen a handful of times has no measured precision, only its group's. Never a component whose best rule
    evidence is the default-backend guess for wrong results: R2 bisects those first, whatever the learned labeler
    makes of the words. `triaged` only when the issue will carry a `module:` label (ticked, or there already: G4),
    nothing is flagged and no rule still needs a human (status.pending, G6).
    """
    bar = limits.get("preselect", 1.01)
    bars = {"oncall": limits.get("preselect_route", bar), TRIAGE_REVIEW: limits.get("preselect_review", bar)}
    bisected = [x for x in findings if x.source.startswith("bisection")]
    cpu_shown = any(x.label == CPU_INDUCTOR_ONCALL for x in bisected)
    guessed = {l for l, x in rule_adds.items() if x.reason == DEFAULT_BACKEND_GUESS and not bisected}
    held = {x.label: x.reason for x in findings if x.kind == Kind.HOLD}  # weighing: the thread contradicts it
    routed = {x.label for x in findings if concludes_route(x)} if out.route in (Route.HANDOFF, Route.CPU) else set()
    outright = {l for l, x in rule_adds.items() if named_outright(x)}
    ticked, held_back = [], {}
    for s in out.add:
        threshold = bars["oncall"] if is_oncall(s.label) else bars.get(s.label, bar)
        pick = s.confidence >= threshold and s.rule_id != "G4"
        if s.label == out.queue and s.label in routed:
            pick = True
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
        if s.label in outright:  # the rubric names it: its weight, not the triagers' history (components.GATES)
            pick = True
            held_back[s.label] = NAMED_OUTRIGHT
        if pick and s.label in held:
            pick, held_back[s.label] = False, held[s.label]
        if s.label == PT2_ONCALL or s.source == "bisection" or (s.label == TRIAGE_REVIEW and status.binding):
            pick = True
        if s.label == NEEDS_REPRODUCTION and status.repro is not None:
            pick = concludes(status.repro)
        if status.question and is_module(s.label):
            pick = False
        ticked.append(pick)
    modules = labelled or ends_with_component(s.label for s, t in zip(out.add, ticked) if t)
    flagged = any(t and s.label in (TRIAGE_REVIEW, NEEDS_REPRODUCTION) for s, t in zip(out.add, ticked))
    done = modules and not flagged and not status.question and not status.pending
    out.add = [
        replace(
            s,
            preselected=done if s.label == TRIAGED else t,
            reason=f"{s.reason} · {held_back[s.label]}" if s.label in held_back else s.reason,
        )
        for s, t in zip(out.add, ticked)
    ]


NAMED_OUTRIGHT = "pre-selected: the rubric names it outright (its confidence is what triagers' history says)"
UNMEASURED = "held back: too few past triage decisions to measure how often it is right"


BISECT_FIRST = "held back: wrong results are bisected before a component is applied (R2)"
