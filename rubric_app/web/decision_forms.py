"""The forms of decisions: each cleans to the plan of label changes (triage/decisions.Plan) a decision sends to
GitHub. The issue page's triage (apply) form and its bot correction, an agenda card's meeting outcome, one decision
for the ticked issues of a signature group."""

from __future__ import annotations

import json
from dataclasses import replace

from django import forms

from rubric_app.models import Issue, Suggestion
from rubric_app.rubric.reading.catalog import TRANSFER_REPOS
from rubric_app.rubric.reading.flow import change_breaks_g4
from rubric_app.triage import accepting, decisions
from rubric_app.vocabulary import (
    CORE_COMPONENTS,
    LOW_PRIORITY,
    MAY_BE_FIXED,
    Route,
    is_module,
    is_oncall,
)
from rubric_app.web.labels import (
    FLAG_LABELS,
    OWN_CONTROLS,
    CatalogLabelsField,
    DescribedCheckboxes,
    LabelPicker,
    handoff_oncalls,
)

ROUTES = [
    (Route.PT2, "Keep in oncall: pt2"),
    (Route.CPU, "Route to oncall: cpu inductor"),
    (Route.HANDOFF, "Hand off to another oncall"),
    (
        Route.REPRODUCTION,
        "No self-contained reproduction: label it, add needs reproduction and ask for one with the standard reply; "
        "not triaged (G9)",
    ),
    # The routes that stop labelling: no label changes, a standard reply instead (G1), or a transfer (G2).
    (Route.QUESTION, "A usage question: close as not planned, with the forum reply (G1)"),
    (Route.MORE_INFO, "Unclear: ask for a repro and logs, with the standard reply (G1)"),
    (Route.TRANSFER, "Belongs in another repository: transfer it (G2)"),
    (Route.DUPLICATE, "A duplicate: close it as a duplicate of the issue below, with the standard comment"),
    # Offered only where the issue's runs say it may be fixed (Issue.build_finding).
    (
        Route.CONFIRM_FIXED,
        "May be fixed: it passes on a newer torch build; ask the reporter to confirm there (a reply, nothing closed)",
    ),
    # Offered only where the rubric reads an edge case (G10 on the checklist).
    (
        Route.EXPECTED_NUMERICS,
        "Expected floating-point behaviour, as the documentation says: close with the numerical-accuracy reply (G10)",
    ),
]
MEETING_DECISIONS = list(decisions.MEETING_DECISIONS)


def _labels_seen(raw: str, then: str) -> list[str]:
    """A page's label snapshot (JSON: a list of names), or a ValidationError saying to `then`."""
    try:
        seen = json.loads(raw)
    except ValueError:
        seen = None
    if not isinstance(seen, list) or not all(isinstance(n, str) for n in seen):
        raise forms.ValidationError(f"The page's label snapshot is unreadable; {then}.")
    return seen


class TriageForm(forms.Form):
    """The issue page's apply form: chosen labels, route, review flag, and what the page showed.

    labels_seen carries the labels the triager saw, so the apply step can detect that
    someone changed the issue on GitHub meanwhile (a conflict, not an overwrite).
    """

    labels = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)
    route = forms.ChoiceField(choices=ROUTES, initial=Route.PT2, widget=forms.RadioSelect)
    handoff_to = forms.ChoiceField(required=False, label="Hand off to")
    transfer_to = forms.ChoiceField(
        required=False, label="Transfer to", choices=[("", "—")] + [(name, name) for name in TRANSFER_REPOS]
    )
    duplicate_of = forms.IntegerField(required=False, min_value=1, max_value=10**9, label="Duplicate of #")
    review = forms.BooleanField(required=False, label="Flag triage review (R11: the meeting decides)")
    # G6: `triaged` waits while a rule still needs a human (accepting.undecided says what); unticked, Apply marks it.
    hold = forms.BooleanField(required=False, label="Hold: not triaged yet, a human decides first (G6)")
    labels_seen = forms.CharField(widget=forms.HiddenInput)
    # Labels the engine did not suggest, picked from the catalog (G7).
    add_labels = CatalogLabelsField(label="Add a label the engine did not suggest")

    def __init__(
        self,
        *args,
        issue: Issue,
        suggestions: list[Suggestion],
        allowed: frozenset[str],
        descriptions: dict[str, str] | None = None,
        **kwargs,
    ):
        super().__init__(*args, **kwargs)
        self.issue = issue
        self.pickable = self.fields["add_labels"].offer(
            allowed,
            {**OWN_CONTROLS, **{n: f"{n!r} is a route: pick it under Route (G5)." for n in allowed if is_oncall(n)}},
        )
        # What each label is for, in the triage skill's words (skill_files.in_use): shown beside each checkbox.
        self.descriptions = descriptions or {}
        checkable = [
            s
            for s in suggestions
            if s.kind == Suggestion.Kind.ADD and s.label not in FLAG_LABELS and not is_oncall(s.label)
        ]
        names = list(dict.fromkeys(s.label for s in checkable))
        # A label outside the triage catalog is shown but never offered for applying (R7.4, G7).
        self.fields["labels"].choices = [(n, n) for n in names if n in allowed]
        self.not_in_catalog = [n for n in names if n not in allowed]
        self.fields["handoff_to"].choices = [("", "—")] + [(n, n) for n in handoff_oncalls(allowed)]
        hidden = {Route.CONFIRM_FIXED} if issue.build_finding != MAY_BE_FIXED else set()
        if not any(item.get("rule_id") == "G10" for item in issue.checklist):
            hidden.add(Route.EXPECTED_NUMERICS)
        self.fields["route"].choices = [c for c in ROUTES if c[0] not in hidden]
        self.suggested = self.suggested_initial(suggestions)
        if not self.is_bound:
            self.initial.update(self.suggested)

    def suggested_initial(self, suggestions: list[Suggestion]) -> dict:
        """The rubric's answer as form values: what "accept the suggestions" means (accepting.accepted)."""
        handoffs = {n for n, _ in self.fields["handoff_to"].choices if n}
        offered = [n for n, _ in self.fields["labels"].choices]
        values = accepting.accepted(self.issue, suggestions, offered=offered, handoffs=handoffs)
        return {**values, "labels_seen": json.dumps(self.issue.label_names())}

    def clean_labels_seen(self) -> list[str]:
        return _labels_seen(self.cleaned_data["labels_seen"], "reload the issue")

    def clean(self) -> dict:
        data = super().clean()
        if data.get("route") == Route.HANDOFF and not data.get("handoff_to"):
            self.add_error("handoff_to", "Choose the oncall to hand the issue off to (G5).")
        if data.get("route") == Route.TRANSFER and not data.get("transfer_to"):
            self.add_error("transfer_to", "Choose the repository to transfer the issue to (G2).")
        if data.get("route") == Route.HANDOFF and data.get("review"):  # refused anyway: said on the box, before Apply
            self.add_error("review", decisions.HANDOFF_REVIEW_MESSAGE)
        if data.get("route") == Route.DUPLICATE and "duplicate_of" in data:
            number = data["duplicate_of"]
            # Its labels are read for the conflict check, its plan and its refusal: once.
            original = Issue.objects.prefetch_related("labels").filter(number=number).first() if number else None
            why = decisions.duplicate_refusal(self.issue, number, original)
            if why:
                self.add_error("duplicate_of", why)
            elif original.in_queue and original.state == Issue.State.OPEN:
                self._original_seen(original)
        if not self.errors:
            plan = self.plan()
            if change_breaks_g4(self.issue.label_names(), plan.add, plan.remove):
                self.add_error(None, accepting.g4_advice(self.issue, self.suggested, data.get("route")))
        return data

    def plan(self) -> decisions.Plan:
        """What Apply would send to GitHub for the valid choices (decisions.plan_changes)."""
        return decisions.plan_changes(
            self.issue,
            chosen=self.chosen(),
            route=self.route_value(),
            review=self.cleaned_data["review"],
            transfer_to=self.cleaned_data["transfer_to"],
            duplicate_of=self.cleaned_data["duplicate_of"],
            hold=self.cleaned_data["hold"],
        )

    def decide(self) -> str:
        """What the triager must decide before `triaged`, where the valid choices hold it (the preview says it)."""
        held = self.is_valid() and self.cleaned_data["hold"] and not self.cleaned_data["review"]
        return accepting.undecided(self.issue) if held else ""

    def undecided(self) -> str:
        """What the Hold asks the triager (accepting.undecided): shown beside the boxes that answer it."""
        return accepting.undecided(self.issue)

    def answers_low_priority(self) -> bool:
        """R12.5 offers `low priority` as the Hold's answer: a box of this form."""
        return LOW_PRIORITY in dict(self.fields["labels"].choices)

    def route_evidence(self) -> str:
        """Why the rubric takes the chosen route, where it concludes it (the preview says it)."""
        if not self.is_valid():
            return ""
        return accepting.route_evidence(self.issue, self.cleaned_data["route"], self.cleaned_data["handoff_to"])

    def stops_labelling(self) -> bool:
        """The chosen route sends a reply, a close or a transfer instead of labels (G1, G2, a duplicate)."""
        return self.is_valid() and self.cleaned_data["route"] in Route.STOPS_LABELLING

    # Closing it as a duplicate of an open queue issue: the ticked labels (and the review flag) go to the original, in
    # a decision of its own, as the group route gives them (decisions.plan_for_original).
    original: Issue | None = None
    original_seen: list[str] | None = None  # what the preview showed of the original's labels

    def _original_seen(self, original: Issue) -> None:
        """The original's labels as the preview showed them (posted back by Apply: a change on GitHub meanwhile is a
        conflict, as on this issue), or, previewing, as the mirror holds them now."""
        raw = self.data.get("original_labels_seen")
        try:
            self.original_seen = _labels_seen(raw, "preview again") if raw else original.label_names()
        except forms.ValidationError as exc:
            self.add_error(None, exc)
            return
        self.original = original

    def labels_original(self) -> bool:
        """The ticked labels go to the original (closing it as a duplicate of an open queue issue)."""
        return self.is_valid() and self.original is not None

    def plans(self) -> list[tuple[Issue, decisions.Plan]]:
        """What Apply sends, one decision per issue in number order: this issue's plan and, closing it as a duplicate
        of an open queue issue with labels ticked (or the review flag), the original's."""
        original = self._original_plan()
        both = [(self.issue, self.plan()), *([(self.original, original)] if original else [])]
        return sorted(both, key=lambda pair: pair[0].number)

    def _original_plan(self) -> decisions.Plan | None:
        # The original's `triaged` follows its own G6, as its own page's `a` would (accepting.undecided).
        hold = bool(self.original and accepting.undecided(self.original))
        return decisions.plan_for_original(
            self.original, chosen=self.chosen(), review=self.cleaned_data["review"], hold=hold
        )

    def labels_seen_by_issue(self) -> dict[int, list[str]]:
        seen = {self.issue.number: self.cleaned_data["labels_seen"]}
        return {**seen, self.original.number: self.original_seen} if self.original else seen

    def original_change(self, user) -> tuple[Issue, decisions.Plan, str] | None:
        """The original's own decision in the preview: (the original, its plan, why it would be refused or "")."""
        plan = self._original_plan()
        return (self.original, plan, decisions.refusal(issue=self.original, user=user, plan=plan)) if plan else None

    def chosen(self) -> list[str]:
        """The checked labels and the ones picked from the catalog, each once."""
        return list(dict.fromkeys(self.cleaned_data["labels"] + self.cleaned_data.get("add_labels", [])))

    def route_value(self) -> str:
        """plan_changes' route: "pt2", "cpu inductor", the `oncall:` label handed off to, or a route
        that stops labelling (question, more info, transfer)."""
        return accepting.route_of(self.cleaned_data["route"], self.cleaned_data["handoff_to"])

    def redirect_to(self) -> str:
        return accepting.redirect_of(self.cleaned_data["route"], self.cleaned_data["handoff_to"])


class BotCorrectionForm(forms.Form):
    """ "The bot got it wrong": which of the issue's labels to keep, which catalog labels to add, and whether the
    Repro Agent's verdict was wrong too. Cleans to decisions.correct_bot's keywords (add, remove, labels_seen,
    repro_incorrect); `bot-mislabeled` is always added by correct_bot itself.
    """

    keep = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple, label="Keep")
    add = CatalogLabelsField(label="Add", widget=LabelPicker(placeholder="type to add a label"))
    repro_incorrect = forms.BooleanField(
        required=False, label="The Repro Agent's verdict is wrong too (adds repro:agent:h100:incorrect)"
    )
    labels_seen = forms.CharField(widget=forms.HiddenInput)
    clean_labels_seen = TriageForm.clean_labels_seen

    def __init__(
        self, *args, issue: Issue, allowed: frozenset[str], descriptions: dict[str, str] | None = None, **kwargs
    ):
        current = issue.label_names()
        kwargs.setdefault("initial", {**accepting.bot_correction(issue, allowed), "labels_seen": json.dumps(current)})
        super().__init__(*args, **kwargs)
        self.current = current
        self.fields["add"].widget.descriptions = descriptions or {}
        self.fields["keep"].choices = [(n, n) for n in current]
        self.fields["add"].allowed = allowed - set(current)
        self.fields["add"].refused = {n: f"#{issue.number} has {n!r} already: keep it above." for n in current}

    def clean(self) -> dict:
        data = super().clean()
        if self.errors:
            return data
        keep = set(data.get("keep") or ())
        return {
            "add": list(data.get("add") or ()),
            "remove": [n for n in self.current if n not in keep],
            "labels_seen": data["labels_seen"],
            "repro_incorrect": data.get("repro_incorrect", False),
        }


class MeetingDecisionForm(forms.Form):
    """One click on an agenda card: the outcome, and the catalog labels the card's picker added (`module: crash`)."""

    decision = forms.ChoiceField(choices=[(d, d) for d in MEETING_DECISIONS])
    labels_seen = forms.CharField(widget=forms.HiddenInput)
    # The suggested `module:` label the agenda shows for an issue that has none (G4).
    component = forms.CharField(required=False, max_length=100, widget=forms.HiddenInput)
    add_labels = CatalogLabelsField(label="Add a label")

    clean_labels_seen = TriageForm.clean_labels_seen

    def __init__(self, *args, allowed: frozenset[str] = frozenset(), **kwargs):
        super().__init__(*args, **kwargs)
        # The outcomes' own labels are their buttons: `high priority` through the picker would skip R11's chair.
        refused = {
            **OWN_CONTROLS,
            **{
                n: f"`{n}` is a decision of the meeting: click its button."
                for added in accepting.MEETING_LABELS.values()
                for n in added
                if n not in OWN_CONTROLS
            },
        }
        self.pickable = self.fields["add_labels"].offer(allowed, refused)  # what the cards' pickers offer

    def plan(self, issue: Issue) -> decisions.Plan:
        """The Plan of the chosen outcome (accepting.meeting_plan) with the labels picked on the card; the suggested
        component stays ticked unless the chair unticks it (a picked category label such as `module: crash` is no
        component, G4)."""
        picked = self.cleaned_data["add_labels"]
        component = self.cleaned_data["component"]
        plan = accepting.meeting_plan(issue, self.cleaned_data["decision"], component)
        current = set(issue.label_names())
        return replace(plan, add=plan.add + [n for n in picked if n not in current and n not in plan.add])


# What one decision may do to every issue of a signature group: label them alike, hand them off, ask
# for more information, or close all but the original as its duplicates.
GROUP_ROUTES = [
    (value, name) for value, name in ROUTES if value in (Route.PT2, Route.CPU, Route.HANDOFF, Route.MORE_INFO)
] + [
    (
        Route.DUPLICATE,
        "Duplicates: close every ticked issue but the original as a duplicate of it, with the standard comment",
    )
]


class GroupDecisionForm(forms.Form):
    """One decision for the ticked issues of a group sharing a failure signature.

    Each issue gets its own plan (decisions.plan_changes on its own labels), its own refusal and its
    own TriageDecision; labels_seen carries what the page showed of each ({number: labels}), so each
    is checked for a conflict on its own.
    """

    issues = forms.TypedMultipleChoiceField(coerce=int, widget=forms.CheckboxSelectMultiple, label="Issues")
    labels = forms.MultipleChoiceField(required=False, widget=DescribedCheckboxes, label="Labels")
    add_labels = CatalogLabelsField(label="More labels")
    route = forms.ChoiceField(choices=GROUP_ROUTES, initial=Route.PT2, widget=forms.RadioSelect)
    handoff_to = forms.ChoiceField(required=False, label="Hand off to")
    duplicate_of = forms.IntegerField(required=False, min_value=1, max_value=10**9, label="Original #")
    review = forms.BooleanField(required=False, label="Flag triage review (R11: the meeting decides)")
    hold = forms.BooleanField(required=False, label="Hold: not triaged yet, a human decides first (G6)")
    labels_seen = forms.CharField(widget=forms.HiddenInput)

    def __init__(
        self, *args, members: list[Issue], allowed: frozenset[str], descriptions: dict[str, str] | None = None, **kwargs
    ):
        """members: the group's open queue issues, labels and suggestions prefetched; descriptions: what each label
        is for (skill_files.in_use), shown on its checkbox."""
        super().__init__(*args, **kwargs)
        self.fields["labels"].widget.descriptions = descriptions or {}
        self.members, self.allowed = {issue.number: issue for issue in members}, allowed
        self.pickable = self.fields["add_labels"].offer(allowed, OWN_CONTROLS)
        self.fields["issues"].choices = [(issue.number, f"#{issue.number}") for issue in members]
        # The module labels suggested for or carried by the most of them first, then the other core components.
        suggested = [s for issue in members for s in issue.suggestions.all() if s.kind == Suggestion.Kind.ADD]
        counts: dict[str, int] = {name: 0 for name in CORE_COMPONENTS}
        for name in [s.label for s in suggested] + [name for issue in members for name in issue.label_names()]:
            if is_module(name):
                counts[name] = counts.get(name, 0) + 1
        self.fields["labels"].choices = [
            (name, name) for name in sorted(counts, key=lambda n: (-counts[n], n)) if name in allowed
        ]
        self.fields["handoff_to"].choices = [("", "—")] + [(n, n) for n in handoff_oncalls(allowed)]
        if not self.is_bound:
            # Ticked: every issue, and what `a` would accept on each of them (accepting.group_accepted).
            offered = [n for n, _ in self.fields["labels"].choices]
            handoffs = {n for n, _ in self.fields["handoff_to"].choices if n}
            self.initial.update(
                {
                    **accepting.group_accepted(members, offered, handoffs),
                    "issues": list(self.members),
                    "duplicate_of": min(self.members, default=None),  # the oldest report is usually the original
                    "labels_seen": json.dumps({str(n): issue.label_names() for n, issue in self.members.items()}),
                }
            )

    def clean_labels_seen(self) -> dict[int, list[str]]:
        try:
            seen = {int(n): labels for n, labels in json.loads(self.cleaned_data["labels_seen"]).items()}
        except (ValueError, AttributeError):
            raise forms.ValidationError("The page's label snapshot is unreadable; reload the group.") from None
        if not all(isinstance(v, list) and all(isinstance(n, str) for n in v) for v in seen.values()):
            raise forms.ValidationError("The page's label snapshot is unreadable; reload the group.")
        return seen

    def clean(self) -> dict:
        data = super().clean()
        if data.get("route") == Route.HANDOFF and not data.get("handoff_to"):
            self.add_error("handoff_to", "Choose the oncall to hand the issues off to (G5).")
        if data.get("route") == Route.DUPLICATE and not data.get("duplicate_of") and "duplicate_of" not in self.errors:
            self.add_error("duplicate_of", "Name the original: the issue the others duplicate.")
        missing = [n for n in data.get("issues", []) if n not in data.get("labels_seen", {})]
        if missing and "labels_seen" in data:
            self.add_error(None, f"The page did not show #{missing[0]}'s labels; reload the group.")
        return data

    def chosen(self) -> list[str]:
        """The ticked labels and the ones picked from the catalog, each once."""
        return list(dict.fromkeys(self.cleaned_data["labels"] + self.cleaned_data.get("add_labels", [])))

    def plans(self) -> list[tuple[Issue, decisions.Plan | None]]:
        """(issue, its Plan) for every ticked issue, in number order.

        Duplicates: every ticked issue but the original is closed as its duplicate, and the original gets the
        labels (and the review flag) chosen "for all of them", in its own lane: the one issue left open is the one
        that needs them. None for an original with nothing chosen for it (left unchanged).
        """
        data = self.cleaned_data
        route = accepting.route_of(data["route"], data["handoff_to"])
        chosen = self.chosen()
        out = []
        for number in sorted(set(data["issues"])):
            issue = self.members[number]
            if route == Route.DUPLICATE and number != data["duplicate_of"]:
                out.append((issue, decisions.plan_duplicate(data["duplicate_of"])))
            elif route == Route.DUPLICATE:
                original = decisions.plan_for_original(issue, chosen=chosen, review=data["review"], hold=data["hold"])
                out.append((issue, original))
            else:
                plan = decisions.plan_changes(
                    issue, chosen=chosen, route=route, review=data["review"], hold=data["hold"]
                )
                out.append((issue, plan))
        return out

    def redirect_to(self) -> str:
        return accepting.redirect_of(self.cleaned_data["route"], self.cleaned_data["handoff_to"])
