"""Choosing the components and the visibility labels (R1-R9, R7's domain and feature labels, G8), pure Python.

One core component normally, the likeliest; a second only when likely on its own and shown by evidence of its own
(R1: do not over-tag), and where such a pair is rarely right (a company curve fitted out of fold) it becomes a
question. Bisection verdicts and the thread's backend results replace the text's guesses (R2); a failing backend
rules out the stages after it. Holistic labels name a symptom and yield to a component unless they are the report's
subject.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from rubric_app.rubric.engine.model import LabelModel
from rubric_app.rubric.engine.scoring import HOLISTIC, SYMPTOMS, concluded, decisive
from rubric_app.rubric.reading.facts import Finding
from rubric_app.rubric.reading.types import Suggested
from rubric_app.rubric.rules.general import DEFAULT_BACKEND_GUESS
from rubric_app.vocabulary import (
    COMPILE_UX,
    CORE_COMPONENTS,
    CUDA_GRAPHS,
    DECOMPOSITIONS,
    DYNAMIC_SHAPES,
    DYNAMO,
    EDGE_CASES,
    FUZZER_TOPIC,
    HELION,
    INDUCTOR,
    MODULE_CRASH,
    PT2_DISPATCHER,
    is_module,
    is_oncall,
)

HOLISTIC_YIELDS_TO = 0.6


# ...unless the symptom is the report's subject (a slow compile, a throughput regression, a bad error
# message named in the title): triagers label the symptom next to the component then.
SYMPTOM_SUBJECT = 0.8


# A label a rule finds with at least this weight (the title names it, or a rule as specific as R4.3 or
# R9.1) is offered whatever triagers' history says of it; it is still ticked only above the bar.
OFFERED_OUTRIGHT = 0.8
# Labels a rule names outright where the rubric leaves no judgement (PyTorch's triage skill: G10's edge case at the
# dtype's limits, G11's hard crash, R8.1's Helion, a CUDA graph named in the title): from the rule and the weight
# given here up, they are offered and pre-selected on the rule's word (preselection.preselect), not on the
# triagers' history, most of which predates the skill's labels (docs/engine.md, "Labels the rubric names
# outright", measures each one on the held-out slice).
GATES = {
    MODULE_CRASH: ("G11", 0.7),
    EDGE_CASES: ("G10", 0.7),
    FUZZER_TOPIC: ("G10", 0.7),
    HELION: ("R8.1", 0.9),
    CUDA_GRAPHS: ("R7.2", 0.9),
}


def named_outright(x: Finding) -> bool:
    """A rule's finding that names its label outright (GATES)."""
    gate = GATES.get(x.label)
    return gate is not None and x.origin == "rule" and x.rule_id == gate[0] and x.weight >= gate[1]


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


# Avoids that only warn when nothing else supports the label (R1.5: "it uses torch.compile").
SOFT_AVOIDS = frozenset({"R1.5"})


# A failure already on the backend that names a component rules out the stages after it (RUBRIC
# "The backends"): tracing fails with backend='eager' (R2.3), aot_eager fails (R2.1), or
# aot_eager_decomp_partition fails while aot_eager passes (R2.5).
DOWNSTREAM = {
    DYNAMO: (PT2_DISPATCHER, DECOMPOSITIONS, INDUCTOR),
    PT2_DISPATCHER: (DECOMPOSITIONS, INDUCTOR),
    DECOMPOSITIONS: (INDUCTOR,),
}


def choose(
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
        and (
            score(x) >= _extra_bar(l, limits)
            or (x.origin == "rule" and x.weight >= OFFERED_OUTRIGHT)
            or named_outright(x)
        )
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


def without_weak_company(
    chosen: list[Finding], score: Callable[[Finding], float], learned: LabelModel | None, limits: dict[str, float]
) -> tuple[list[Finding], list[Finding]]:
    """(kept, dropped): R1's over-tagging. A core component next to another component stays only when its
    company curve says it is likely there (limits["company"], fitted by fitting.fit_model); the least
    likely goes first, and the component it stood next to always stays. A dropped one becomes a question
    on the checklist (crowded_checks)."""
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


def in_company(learned: LabelModel | None, s: Suggested, x: Finding, chosen: list[Finding]) -> Suggested:
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
