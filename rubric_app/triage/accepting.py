"""What a triager's one decision means, decided here and not in the forms: what `a` accepts (the rubric's answer
as the apply form's choices), the G4 advice that points at the route the rubric suggests, and which labels a
meeting outcome adds. The forms validate what was posted and call these.
"""

from __future__ import annotations

from rubric_app.models import Issue, Suggestion
from rubric_app.rubric.catalog import transfer_repo
from rubric_app.triage import decisions
from rubric_app.vocabulary import (
    CPU_INDUCTOR_ONCALL,
    HIGH_PRIORITY,
    LOW_PRIORITY,
    NEEDS_REPRODUCTION,
    TRIAGE_REVIEW,
    TRIAGED,
    Route,
    is_module,
    is_oncall,
)

# What each meeting outcome adds (R11: only the meeting adds `high priority`); every outcome settles the review.
MEETING_LABELS = {
    HIGH_PRIORITY: (HIGH_PRIORITY, TRIAGED),
    TRIAGED: (TRIAGED,),
    NEEDS_REPRODUCTION: (NEEDS_REPRODUCTION,),
    LOW_PRIORITY: (LOW_PRIORITY, TRIAGED),
    "close": (),
}


def accepted(issue: Issue, suggestions: list[Suggestion], *, offered: list[str], handoffs: set[str]) -> dict:
    """The rubric's answer as the apply form's values: what "accept the suggestions" (`a`) means.

    Only the pre-selected labels among `offered` are ticked (their calibrated confidence clears the threshold); the
    others stay unticked as "possible". The route is the issue's own lane unless the rubric's redirect is
    pre-selected; the review box starts ticked when R11 pre-selected the flag or the issue already carries it.
    """
    add = [s.label for s in suggestions if s.kind == Suggestion.Kind.ADD]
    ticked = {s.label for s in suggestions if s.kind == Suggestion.Kind.ADD and s.preselected}
    handoff = next((n for n in add if is_oncall(n) and n in handoffs), "")
    return {
        "labels": [n for n in offered if n in ticked],
        "route": accepted_route(issue, ticked, handoff),
        "handoff_to": handoff,
        "transfer_to": suggested_transfer(issue),
        # Already flagged: the box starts ticked, so unticking it (and the flag going) is a choice.
        "review": TRIAGE_REVIEW in ticked or issue.has_label(TRIAGE_REVIEW),
    }


def accepted_route(issue: Issue, ticked: set[str], handoff: str) -> str:
    """The route `a` accepts: the issue's own lane, unless the rubric's redirect is pre-selected (its oncall label
    ticked). A redirect or transfer that is only "possible" is shown as the suggested route, for the triager to pick."""
    lane = Route.CPU if issue.has_label(CPU_INDUCTOR_ONCALL) else Route.PT2
    route = issue.suggested_route
    if route == Route.HANDOFF and handoff in ticked:
        return Route.HANDOFF
    if route == Route.CPU and CPU_INDUCTOR_ONCALL in ticked:
        return Route.CPU
    return lane


def suggested_transfer(issue: Issue) -> str:
    """The repository G2's checklist item says the issue belongs in, when the engine routed it there ("transfer") and
    it is one the dashboard transfers to; else ""."""
    if issue.suggested_route != Route.TRANSFER:
        return ""
    item = next((i for i in issue.checklist if i.get("rule_id") == "G2"), None)
    return transfer_repo(item.get("evidence", "")) if item else ""


def g4_advice(issue: Issue, suggested: dict, chosen_route: str) -> str:
    """G4's refusal, pointing at the route the rubric suggests when that route needs no module label: a hand-off
    (G5), a transfer (G2), or a usage question (G1). `suggested` is accepted()'s answer for the issue."""
    if issue.suggested_route == Route.HANDOFF and suggested["handoff_to"] and chosen_route != Route.HANDOFF:
        return (
            f"G5: the rubric suggests handing it off to {suggested['handoff_to']}: pick that route. "
            + decisions.G4_MESSAGE
        )
    if suggested["transfer_to"] and chosen_route != Route.TRANSFER:
        return (
            f"G2: the thread says it belongs in {suggested['transfer_to']}: pick the transfer route. "
            + decisions.G4_MESSAGE
        )
    if any(item.get("rule_id") == "G1" and "question" in item.get("text", "") for item in issue.checklist):
        return (
            'G1: the rubric reads this as a usage question, not a bug: choose "A usage question" to close it '
            "with the forum reply. " + decisions.G4_MESSAGE
        )
    return decisions.G4_MESSAGE


def route_of(route: str, handoff_to: str) -> str:
    """plan_changes' route for a form's choice: the `oncall:` label handed off to, else the choice itself."""
    return handoff_to if route == Route.HANDOFF else route


def redirect_of(route: str, handoff_to: str) -> str:
    """The oncall queue a decision redirects to (TriageDecision.redirect): the hand-off's, the CPU lane, or ""."""
    if route == Route.HANDOFF:
        return handoff_to
    return CPU_INDUCTOR_ONCALL if route == Route.CPU else ""


def meeting_plan(issue: Issue, outcome: str, component: str = "") -> decisions.Plan:
    """The Plan of a meeting outcome (MEETING_LABELS): it settles the review, so `triage review` goes.

    Only the meeting may add `high priority` (R11); request_decision enforces who may. Where the outcome adds
    `triaged` to an issue without a component (G4), `component` is added only if the rubric suggested it for this
    issue; without one, request_decision refuses the decision and says why.
    """
    current = set(issue.label_names())
    add = [name for name in MEETING_LABELS[outcome] if name not in current]
    remove = [TRIAGE_REVIEW] if TRIAGE_REVIEW in current else []
    if TRIAGED in add and not issue.module_labels:
        suggested = {s.label for s in issue.suggestions.all() if s.kind == Suggestion.Kind.ADD}
        if is_module(component) and component in suggested:
            add.append(component)
    return decisions.Plan(add, remove, close_reason="completed" if outcome == "close" else "")
