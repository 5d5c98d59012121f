"""What a triager's one decision means, decided here and not in the forms: what `a` accepts on the issue page, in
the queue and on a failure-signature group (the rubric's answer as the apply form's choices), what "Bot was right"
may confirm and what correcting the bot starts from, which labels a meeting outcome adds, and the G4 advice that
points at the route the rubric suggests. The forms validate what was posted and call these.

One binding holds everywhere: `a` applies exactly what the page shows pre-selected. `triaged` goes on only where G6
holds and no rule still needs a human (the engine's G6 checklist item says what the triager must decide, and the
form's `hold` keeps `triaged` off until they have); `needs reproduction` never goes with it (G9); a route the rubric
concludes (a transfer, a hand-off, the CPU lane, a request for a reproduction) is the route `a` previews.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.core.exceptions import ObjectDoesNotExist

from rubric_app.models import Issue, Suggestion
from rubric_app.rubric.reading.catalog import transfer_repo
from rubric_app.rubric.reading.thread import TRANSFER
from rubric_app.triage import decisions
from rubric_app.vocabulary import (
    CPU_INDUCTOR_ONCALL,
    HIGH_PRIORITY,
    LANE_BOT,
    LANE_FIXED,
    LANE_REVIEW,
    LOW_PRIORITY,
    NEEDS_REPRODUCTION,
    TRIAGE_REVIEW,
    TRIAGED,
    Route,
    is_component,
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

    Only the pre-selected labels among `offered` are ticked (their calibrated confidence clears the threshold, or a
    rule concludes them); the others stay unticked as "possible". The route is the one the rubric concludes
    (accepted_route), else the issue's own lane. The review box starts ticked when R11 pre-selected the flag or the
    issue already carries it. `hold` keeps `triaged` off where a rule still needs a human (undecided).
    """
    add = [s for s in suggestions if s.kind == Suggestion.Kind.ADD]
    ticked = {s.label for s in add if s.preselected}
    handoff = next((s.label for s in add if is_oncall(s.label) and s.label in handoffs), "")
    route = accepted_route(issue, ticked, handoff)
    return {
        "labels": [n for n in offered if n in ticked],
        "route": route,
        "handoff_to": handoff,
        "transfer_to": suggested_transfer(issue),
        # Already flagged: the box starts ticked, so unticking it (and the flag going) is a choice.
        "review": TRIAGE_REVIEW in ticked or issue.has_label(TRIAGE_REVIEW),
        "hold": bool(undecided(issue)),
    }


def accepted_route(issue: Issue, ticked: set[str], handoff: str) -> str:
    """The route `a` accepts: the one the rubric concludes, else the issue's own lane. A transfer the engine routed to
    a repository the dashboard transfers to (G2); a hand-off or the CPU lane whose oncall label is pre-selected (G5,
    R10, R6.3: a rule concludes it, engine concludes_route); a request for a self-contained reproduction where G9
    concludes (`needs reproduction` pre-selected). A route that is only "possible" is shown as the suggested route,
    for the triager to pick."""
    lane = Route.CPU if issue.has_label(CPU_INDUCTOR_ONCALL) else Route.PT2
    route = issue.suggested_route
    if route == Route.TRANSFER and suggested_transfer(issue):
        return Route.TRANSFER
    if route == Route.HANDOFF and handoff in ticked:
        return Route.HANDOFF
    if route == Route.CPU and CPU_INDUCTOR_ONCALL in ticked:
        return Route.CPU
    if NEEDS_REPRODUCTION in ticked and not issue.has_label(NEEDS_REPRODUCTION):
        return Route.REPRODUCTION
    return lane


def undecided(issue: Issue) -> str:
    """What the triager must decide before `triaged`, in the rubric's words (its G6 checklist item: R11's judgement,
    a reproduction G9 asks for or waits for, a fuzzer's failed criteria); "" when nothing: G6 holds as it is."""
    item = next((i for i in issue.checklist if i.get("rule_id") == "G6"), None)
    if not item or item.get("state") != "needs_human":
        return ""
    return item.get("text", "").removeprefix("Not triaged yet, a human decides first: ")


def route_evidence(issue: Issue, route: str, handoff_to: str = "") -> str:
    """Why the rubric takes `route`, for the preview: the rule and the words that conclude it ("" for the lane)."""
    if route == Route.TRANSFER:
        item = next((i for i in issue.checklist if i.get("rule_id") == "G2"), None)
        return f"G2: “{item['evidence']}”" if item and item.get("evidence") else ""
    label = {Route.HANDOFF: handoff_to, Route.CPU: CPU_INDUCTOR_ONCALL, Route.REPRODUCTION: NEEDS_REPRODUCTION}
    wanted = label.get(route, "")
    s = next((s for s in issue.suggestions.all() if s.kind == Suggestion.Kind.ADD and s.label == wanted), None)
    if s is None or not s.preselected:
        return ""
    said = f": “{s.evidence}”" if s.evidence else ""
    return f"{s.rule_id} ({s.reason.split(' · ')[0]}){said}"


def suggested_transfer(issue: Issue) -> str:
    """The repository G2's checklist item says the issue belongs in, when the engine routed it there ("transfer") and
    it is one the dashboard transfers to; else "".

    The item's evidence is the thread's sentence ("transfer this to the vision repo"), not a bare name: the name is
    what G2's own pattern read in it (rubric.thread.TRANSFER), then the repository that name means (catalog)."""
    if issue.suggested_route != Route.TRANSFER:
        return ""
    item = next((i for i in issue.checklist if isinstance(i, dict) and i.get("rule_id") == "G2"), None)
    return transfer_named(str(item.get("evidence", ""))) if item else ""


def transfer_named(sentence: str) -> str:
    """The repository a G2 sentence names ("the fix belongs in pytorch/vision", "the vision repo"), else ""."""
    said = TRANSFER.search(sentence)
    return transfer_repo(said.group("repo") if said else sentence)


# What `a` does on a queue row (its Accept form): preview the rubric's answer, keep the bot's labels (no GitHub
# write), or preview the reply asking the reporter to confirm a fix; "" where the row has nothing to accept.
ROW_PREVIEW, ROW_BOT, ROW_CONFIRM_FIXED = "preview", "bot", "confirm fixed"

# Why `j` passes over a queue row (keys.js): the meeting decides a flagged issue (R11), and a decision on its way
# to GitHub has been made already. The triage review lane lists the flagged ones on purpose: there they count.
WAITING_NOTES = {"meeting": "waiting for the meeting (R11)", "decision": "a decision is on its way to GitHub"}


@dataclass(frozen=True)
class RowAccepts:
    """A queue row's actions for one triager: what `a` does (ROW_*, "" for nothing), whether "take it" is offered
    and the possible-duplicate mark carries the preview `d` submits, who took the issue, and what the row waits for
    ("meeting", "decision" or "": row_waiting)."""

    accept: str
    take: bool
    duplicate: bool
    taken_by: str
    waiting: str

    @property
    def waiting_note(self) -> str:
        return WAITING_NOTES.get(self.waiting, "")


def row_accepts(issue: Issue, lane: str | None, user, *, can_apply: bool) -> RowAccepts:
    """What a queue row offers `user` (the issue as IssueQuerySet.for_queue prefetches it: add_suggestions, the
    checklist, the assignment; annotated with_decision_in_flight).

    Reviewing the bot's lane, `a` keeps the bot's labels; in the may-be-fixed lane it asks the reporter to confirm on
    the newer build; elsewhere it previews the rubric's answer where the rubric has one: a label to add, or a route it
    concludes without labels (G2's transfer, suggested_transfer). Nothing to apply for a reader without the right."""
    try:
        holder = issue.assignment
    except ObjectDoesNotExist:
        holder = None
    if not can_apply:
        accept = ""
    elif lane == LANE_BOT:
        accept = ROW_BOT
    elif lane == LANE_FIXED:
        accept = ROW_CONFIRM_FIXED
    else:
        accept = ROW_PREVIEW if issue.add_suggestions or suggested_transfer(issue) else ""
    return RowAccepts(
        accept=accept,
        take=can_apply and (holder is None or holder.user_id != user.pk),
        duplicate=can_apply,
        taken_by=holder.user.get_username() if holder else "",
        waiting=row_waiting(issue, lane),
    )


def row_waiting(issue: Issue, lane: str | None) -> str:
    """ "decision", "meeting" or "": what a queue row waits for (its issue annotated by with_decision_in_flight)."""
    if getattr(issue, "decision_in_flight", False):
        return "decision"
    if lane != LANE_REVIEW and any(label.name == TRIAGE_REVIEW for label in issue.labels.all()):
        return "meeting"
    return ""


def group_accepted(members: list[Issue], offered: list[str], handoffs: set[str]) -> dict:
    """`a` for a failure-signature group: what every member's own `a` agrees on. The module labels pre-selected on
    all of them; the route they all take (a lane, a hand-off), else oncall: pt2; the review flag where R11 binds on
    one of them (one crash or silent wrong result flags the shared failure); `hold` where any of them waits for a
    human, so the group never marks `triaged` an issue its own page would not."""
    if not members:
        return {"labels": [], "route": Route.PT2, "handoff_to": "", "review": False, "hold": False}
    each = [accepted(issue, list(issue.suggestions.all()), offered=offered, handoffs=handoffs) for issue in members]
    everywhere = set.intersection(*(set(values["labels"]) for values in each))
    routes = {(values["route"], values["handoff_to"]) for values in each}
    route, handoff = routes.pop() if len(routes) == 1 else (Route.PT2, "")
    if route not in (Route.PT2, Route.CPU, Route.HANDOFF):
        route, handoff = Route.PT2, ""
    return {
        "labels": [n for n in offered if n in everywhere],
        "route": route,
        "handoff_to": handoff if route == Route.HANDOFF else "",
        "review": any(s.label == TRIAGE_REVIEW and s.preselected for issue in members for s in issue.suggestions.all()),
        "hold": any(values["hold"] for values in each),
    }


def bot_confirmation_refusal(issue: Issue) -> str:
    """Why "Bot was right" may not confirm what the triage bot labelled ("" when it may): the bot marked it `triaged`
    where the rubric says it is not, because R11 binds (the meeting decides), G9 asks for a reproduction, or a rule
    still needs a human. The correction ("The bot got it wrong") starts from the rubric's answer instead."""
    if not issue.has_label(TRIAGED):
        return ""
    ticked = {s.label for s in issue.suggestions.all() if s.kind == Suggestion.Kind.ADD and s.preselected}
    if TRIAGE_REVIEW in ticked:
        return (
            "The bot marked it triaged, but R11 flags it for the weekly meeting (triage review is pre-selected): "
            "correct it with “The bot got it wrong”."
        )
    if NEEDS_REPRODUCTION in ticked or issue.has_label(NEEDS_REPRODUCTION):
        return (
            "The bot marked it triaged, but it has no self-contained reproduction (G9: never triaged beside needs "
            "reproduction): correct it with “The bot got it wrong”."
        )
    if why := undecided(issue):
        return f"The bot marked it triaged, but a human decides first: {why}"
    return ""


def bot_correction(issue: Issue, allowed: frozenset[str]) -> dict:
    """What correcting the bot starts from: keep the issue's labels but `triaged` where the rubric does not mark it
    triaged, and add what the rubric pre-selects that the issue lacks (never `triaged` itself: correcting the bot is
    not triaging the issue, G6)."""
    current = issue.label_names()
    ticked = [s for s in issue.suggestions.all() if s.kind == Suggestion.Kind.ADD and s.preselected]
    add = [s.label for s in ticked if s.label in allowed and s.label not in current and s.label != TRIAGED]
    drop = {TRIAGED} if bot_confirmation_refusal(issue) else set()
    return {"keep": [n for n in current if n not in drop], "add": list(dict.fromkeys(add))}


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

    Only the meeting may add `high priority` (R11); request_decision enforces who may. An outcome that adds
    `triaged` leaves it off while the issue carries `needs reproduction` (G9: triaged once a reproduction has
    arrived). Where the outcome adds `triaged` to an issue without a component (G4; a category label such as
    `module: crash` is none), `component` is added only if the rubric suggested it for this issue and it names a
    component; without one, request_decision refuses the decision and says why.
    """
    current = set(issue.label_names())
    add = [name for name in MEETING_LABELS[outcome] if name not in current]
    if NEEDS_REPRODUCTION in current:
        add = [name for name in add if name != TRIAGED]
    remove = [TRIAGE_REVIEW] if TRIAGE_REVIEW in current else []
    if TRIAGED in add and not issue.component_labels:
        suggested = {s.label for s in issue.suggestions.all() if s.kind == Suggestion.Kind.ADD}
        if is_component(component) and component in suggested and component not in current:
            add.append(component)
    return decisions.Plan(add, remove, close_reason="completed" if outcome == "close" else "")
