"""The checklist: every rubric item relevant to an issue with its state, built from the engine's answer (pure Python).

What the rules found (their `check` findings), the route's and the status's items (G3-G6, G5, R11), the questions
that would confirm or change the components (R1.1, R2, R5), what the triage skill added (R5.1, G9, G12), the second
components left out (R1) and the weak guesses (G8).
"""

from __future__ import annotations

from rubric_app.rubric.engine.preselection import Status, concludes
from rubric_app.rubric.engine.scoring import decisive
from rubric_app.rubric.engine.weighing import r11_item
from rubric_app.rubric.reading.facts import WEAK, Facts, Finding
from rubric_app.rubric.reading.types import Assessment, ChecklistItem
from rubric_app.rubric.rules.skill_additions import Layer, g9_need, release_gate
from rubric_app.vocabulary import (
    COMPILE_UX,
    CORE_COMPONENTS,
    DISPATCHER_LAYERS,
    DYNAMIC_SHAPES,
    DYNAMO,
    INDUCTOR,
    NEEDS_REPRODUCTION,
    PT2_DISPATCHER,
    PT2_ONCALL,
    RELEASE_TRIAGE,
    TRIAGE_REVIEW,
    Route,
    is_module,
    is_oncall,
)


def skill_checks(out: Assessment, facts: Facts, flags: dict[str, Finding], layer: Layer | None) -> list[ChecklistItem]:
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
                    f"Which layer? Add {', '.join(DISPATCHER_LAYERS[:-1])} or {DISPATCHER_LAYERS[-1]} next to "
                    f"{PT2_DISPATCHER}: both go on the issue.",
                    "needs_human",
                )
            )
    repro = flags.get(NEEDS_REPRODUCTION)
    if repro is not None:
        items.append(
            ChecklistItem(
                repro.rule_id,
                f"No self-contained reproduction ({g9_need(repro)}): "
                "ask for one with the standard reply, and do not mark it triaged (G9)."
                if concludes(repro)
                # G9.2 is a judgement: G6's item offers both answers, and this one must not contradict it.
                else f"Reproducing it may need {g9_need(repro)}: if it does, ask for a self-contained reproduction "
                "with the standard reply and do not mark it triaged yet (G9).",
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


def route_and_status(
    out: Assessment, checks: list[Finding], status: Status, labelled: bool = False
) -> list[ChecklistItem]:
    """The rules' checks, then the route's and the status's items (G5, or G3, G4, R11 and G6), each with its state.
    labelled: the issue already carries a module: label. G6 says why `triaged` is not pre-selected where it is not:
    flagged, asked for a reproduction, or a rule that still needs a human (status.pending), what the triager must
    decide (triage/accepting.py reads it as the apply form's hold)."""
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
        items.append(ChecklistItem("G3", f"{PT2_ONCALL} is not a redirect: continue labelling.", "satisfied"))
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
        items.append(r11_item(status.review))
        items.append(g6_item(status))
    return items


NOT_APPLICABLE = "not_applicable"


def g6_item(status: Status) -> ChecklistItem:
    """G6's line: triaged, or why not yet. Its text, where it needs a human, is what the triager must decide: the
    preview of `a` says it (triage/accepting.py)."""
    if status.pending:
        return ChecklistItem(
            "G6",
            "Not triaged yet, a human decides first: " + " ".join(item.text for item in status.pending),
            "needs_human",
            status.pending[0].evidence,
        )
    if status.binding:
        return ChecklistItem(
            "G6", "Flagged for the weekly meeting (R11): not triaged until it decides.", "not_applicable"
        )
    if status.question:
        return ChecklistItem("G6", "A usage question (G1): not triaged, closed with the forum reply.", "not_applicable")
    if status.repro is not None and concludes(status.repro):
        return ChecklistItem(
            "G6", "No self-contained reproduction: ask for one (G9), triaged once it has arrived.", NOT_APPLICABLE
        )
    return ChecklistItem("G6", "Not redirected and not flagged: triaged.", "satisfied")


def component_checks(out: Assessment, findings: list[Finding], bisected: tuple[str, ...] = ()) -> list[ChecklistItem]:
    """The questions that would confirm or change the suggested components (R1.1, R2, R5). bisected: the verdicts of
    the issue's finished bisection runs, newest first (IssueText.bisected)."""
    if out.route == Route.HANDOFF:
        return []
    labels = {s.label for s in out.add}
    items = []
    backend = next((x for x in findings if decisive(x) and x.label in CORE_COMPONENTS), None)
    backend = backend or next((x for x in findings if decisive(x) and x.label != NEEDS_REPRODUCTION), None)
    if backend:
        items.append(ChecklistItem("R2", "Backend results decide the component.", "satisfied", backend.evidence))
    elif bisected:
        # A finished run that named no component still answered R2's question: say what it found, never "no results".
        items.append(
            ChecklistItem(
                "R2",
                f"The bisection ran and named no component: {bisected[0][:400]}",
                "needs_human",
                bisected[0][:300],
            )
        )
    elif labels & {INDUCTOR, PT2_DISPATCHER, DYNAMO} or TRIAGE_REVIEW in labels:
        items.append(
            ChecklistItem(
                "R2",
                "No backend results yet: run the bisection (eager, aot_eager, "
                "aot_eager_decomp_partition, inductor) to find the component.",
                "needs_human",
            )
        )
    # A bisection verdict replaces the text's backend results (choose): where they disagree, say so.
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


def crowded_checks(crowded: list[Finding]) -> list[ChecklistItem]:
    """A core component left out next to another one (without_weak_company), as a question: R1 says do not
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


def weak_checks(
    out: Assessment, adds: dict[str, Finding], unsure: list[Finding], asked: frozenset[str] = frozenset()
) -> list[ChecklistItem]:
    """Weak or below-threshold signals as questions for a human instead of suggestions (G8).

    One item per label that had some evidence but is not suggested, or is suggested only as a weak
    guess (not pre-selected, and no rule found more than a keyword for it): the keyword says where it
    failed, a human decides whether that is why. asked: labels the checklist already asks about (crowded_checks).
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
