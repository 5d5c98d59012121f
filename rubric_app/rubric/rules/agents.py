"""Rules that read what PyTorch's automation already found (automation.py): the PT2 Repro Agent's run on a GPU
and nightly we do not have, its CompilerBisector result, other agents' attempts. Each is evidence for the rule it
serves, shown on the checklist for the triager to weigh. None of them moves a confidence or a pre-selection:
measured out of fold on the training pool (docs/engine.md, "What the automation said"), reading them as findings
(the bisector as an R2 backend result, a reproduced crash as R11's flag) pre-selected 4 more wrong components in
all and flagged one more issue wrongly among the 7 that carry them, and changed none of those 7's components."""

from __future__ import annotations

from rubric_app.bisection.verdict import COMPONENT
from rubric_app.rubric.reading import automation
from rubric_app.rubric.reading.facts import Facts, Finding, rule
from rubric_app.vocabulary import TRIAGE_REVIEW, Kind


def automation_of(f: Facts) -> automation.Automation:
    """The issue's automation facts, read once per Facts (empty when reading them is switched off). Only the facts
    its own accounts posted (`known`) are any rule's evidence: anyone can write "🤖 PT2 Repro Agent"."""
    if f.automation is None:
        f.automation = (
            automation.read_automation(f.sources, f.labels, accounts=f.issue.automation_accounts)
            if automation.READ_AUTOMATION
            else automation.Automation()
        )
    return f.automation


def _ran_on(report: automation.AgentReport) -> str:
    where = " ".join(part for part in (report.gpu, f"nightly {report.nightly}" if report.nightly else "") if part)
    return f" on {where}" if where else ""


@rule("R11")
def r11_agent_reproduced(f: Facts) -> list[Finding]:
    """The Repro Agent reproduced a crash or a silent mismatch: R11 asks for the meeting; the triager decides."""
    report = automation_of(f).latest_agent
    if report is None or report.outcome not in ("reproduced", "mitigated") or not report.failure:
        return []
    what = "a crash" if report.failure == "crash" else "silently wrong results"
    return [
        Finding(
            "R11",
            Kind.CHECK,
            evidence=report.evidence,
            source=report.source,
            state="needs_human",
            reason=f"The PT2 Repro Agent reproduced {what}{_ran_on(report)}: flag {TRIAGE_REVIEW} for the meeting?",
        )
    ]


# What each backend's failure names when the bisector stops there (R2.1-R2.5; the crossref variant is R5's): our own
# bisection's table (bisection/verdict.py COMPONENT), where CompilerBisector calls the Dynamo-only mode "eager".
BISECTED = {
    ("eager" if mode == "dynamo_eager" else mode): (rule_id, label) for mode, (label, rule_id, _) in COMPONENT.items()
}


@rule("R2")
def r2_bisector(f: Facts) -> list[Finding]:
    """torch's CompilerBisector, run by the Repro Agent or another agent: the backend it stopped at names a
    component (R2.1-R2.5), shown with its subsystem for the triager to confirm."""
    found = []
    for result in automation_of(f).known_bisections[-1:]:
        rule_id, label = BISECTED.get("eager" if result.backend == "dynamo" else result.backend, ("R2", ""))
        where = result.backend + (f" / {result.subsystem}" if result.subsystem else "")
        names = f": {rule_id} says {label}" if label else ""
        found.append(
            Finding(
                rule_id,
                Kind.CHECK,
                evidence=result.evidence,
                source=result.source,
                state="needs_human",
                reason=f"torch's CompilerBisector stops at {where}{names}.",
            )
        )
    return found


@rule("R2.4")
def r2_4_agent_on_gpu(f: Facts) -> list[Finding]:
    """Reproduced on a GPU, so not an Inductor CPU-only bug (R2.4, R10): say so where a triager decides the route."""
    report = automation_of(f).latest_agent
    if report is None or report.outcome not in ("reproduced", "mitigated") or not report.gpu:
        return []
    return [
        Finding(
            "R2.4",
            Kind.CHECK,
            evidence=report.evidence,
            source=report.source,
            state="satisfied",
            reason=f"The PT2 Repro Agent reproduced it{_ran_on(report)}: not CPU-only, so no oncall: cpu inductor.",
        )
    ]


@rule("R2")
def r2_automation(f: Facts) -> list[Finding]:
    """What the agent's run leaves to a triager: a mitigation that hides the bug, a run that did not reproduce it
    on a newer build, a comment in a format we cannot read."""
    report = automation_of(f).latest_agent
    if report is None:
        return []
    said = {
        "mitigated": f"A predefined mitigation hides it{_ran_on(report)}: {report.mitigation}. "
        "The component is whatever that setting changes."
        if report.mitigation
        else "",
        "not reproduced": f"The PT2 Repro Agent could not reproduce it{_ran_on(report)}: it may be fixed; "
        "ask the reporter to confirm on that build.",
        "unreadable": "A PT2 Repro Agent comment we could not read: read its result yourself.",
    }.get(report.outcome, "")
    if not said:
        return []
    evidence = report.mitigation if report.outcome == "mitigated" else report.evidence
    return [Finding("R2", Kind.CHECK, evidence=evidence, source=report.source, state="needs_human", reason=said)]
