"""Forms of the dashboard: queue filters, the triage (apply) form, bisection and meeting decisions."""

from __future__ import annotations

import json
from dataclasses import replace

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from rubric_app.bisection import names_cuda
from rubric_app.lanes import LANES
from rubric_app.models import AgendaItem, BisectionRun, Issue, Meeting, Suggestion
from rubric_app.rubric.catalog import TRANSFER_REPOS
from rubric_app.rubric.flow import change_breaks_g4
from rubric_app.search import issue_number
from rubric_app.triage import accepting, decisions
from rubric_app.triage.metrics import DEFAULT_WEEKS, MAX_WEEKS
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
    known_module_labels,
    module_label_names,
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


class QueueFilterForm(forms.Form):
    """The queue's filters; they live in the query string so a filtered view is a shareable URL."""

    LANES = [(lane.code, lane.title) for lane in LANES]

    lane = forms.ChoiceField(choices=LANES, required=False)
    module = forms.CharField(required=False, max_length=100, help_text="suggested or applied module label")
    author = forms.CharField(required=False, max_length=100)
    q = forms.CharField(
        required=False,
        max_length=200,
        label="Search",
        help_text='words (stemmed), "a phrase", -word, or; #number or an issue URL',
    )

    def clean_module(self) -> str:
        """A module label the queue knows (catalog or applied); "dynamo" means "module: dynamo"."""
        name = self.cleaned_data["module"].strip()
        if not name:
            return ""
        valid = known_module_labels()
        if name not in valid and f"module: {name}" in valid:
            return f"module: {name}"
        if name not in valid:
            raise forms.ValidationError(f"unknown module: {name}", code="unknown_module")
        return name

    def lane_value(self) -> str:
        return (self.cleaned_data.get("lane") if self.is_valid() else "") or "pt2"

    def filter(self, qs: QuerySet[Issue]) -> QuerySet[Issue]:
        """Return qs narrowed by the valid filters; invalid input filters nothing (and shows its error)."""
        if not self.is_valid():
            return qs
        data = self.cleaned_data
        if data["module"]:
            # Exists, not a join: a join on labels or suggestions would repeat rows.
            suggested = Suggestion.objects.filter(issue=OuterRef("pk"), kind=Suggestion.Kind.ADD, label=data["module"])
            applied = Issue.labels.through.objects.filter(issue=OuterRef("pk"), label__name=data["module"])
            qs = qs.filter(Exists(suggested) | Exists(applied))
        if data["author"]:
            qs = qs.filter(author__iexact=data["author"].lstrip("@"))
        if data["q"]:
            qs = qs.search(data["q"])  # ranked: best match first
        return qs

    def reference(self) -> dict | None:
        """The issue the search names ("#170029", an issue URL) wherever it is, or None when it names none.

        {"number", "issue" (None when the mirror lacks it), "lanes": [(lane, name)] listing it, "github_url"}:
        the lane filter must not hide the issue a triager asked for by number.
        """
        number = issue_number(self.cleaned_data["q"]) if self.is_valid() and self.cleaned_data["q"] else None
        if number is None:
            return None
        issue = Issue.objects.prefetch_related("labels").filter(number=number).first()
        lanes = issue.queue_lanes() if issue else []
        return {
            "number": number,
            "issue": issue,
            "lanes": [(code, name) for code, name in self.LANES if code in lanes],
            "github_url": f"{settings.GITHUB_URL}/{settings.GITHUB_REPO}/issues/{number}",
        }


class HistorySearchForm(forms.Form):
    """The history page's search (/history): the queue's query language over the issues in no lane."""

    q = forms.CharField(
        required=False,
        max_length=200,
        label="Search",
        help_text='words (stemmed), "a phrase", -word, or; #number or an issue URL',
    )


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


class BisectForm(forms.Form):
    # strip=False: leading indentation is part of Python code.
    code = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 14, "spellcheck": "false"}),
        max_length=100_000,
        strip=False,
        label="Repro (runs sandboxed; edit freely)",
    )
    device = forms.ChoiceField(choices=BisectionRun.Device.choices, initial=BisectionRun.Device.CPU)
    # The torch builds the live workers host (TORCH_BUILDS): ticking two runs the same repro on each, and the
    # issue page compares them (a regression, R11). None ticked: the workers' first build.
    builds = forms.MultipleChoiceField(
        required=False, widget=forms.CheckboxSelectMultiple, label="Torch builds (tick two to compare)"
    )

    def __init__(
        self, *args, live: dict[str, list[str]] | None = None, hosted: dict[str, dict] | None = None, **kwargs
    ) -> None:
        """live: WorkerHeartbeat.objects.queues(); each device choice whose queue has no live worker says so.
        hosted: WorkerHeartbeat.objects.hosted_builds(), the builds offered (each with its version)."""
        super().__init__(*args, **kwargs)
        self.live, self.hosted = live, hosted or {}
        offered: dict[str, str] = {}  # every build a live bisection worker hosts
        for versions in self.hosted.values():
            for name, version in versions.items():
                offered.setdefault(name, version)
        self.fields["builds"].choices = [(name, f"{name} (torch {version})") for name, version in offered.items()]
        self.offers_builds = len(offered) > 1
        if live is not None:
            self.fields["device"].choices = [
                (
                    value,
                    label
                    if live.get(BisectionRun.QUEUES[value])
                    else f"{label}: no {BisectionRun.QUEUES[value]} worker online",
                )
                for value, label in BisectionRun.Device.choices
            ]

    def clean_device(self) -> str:
        """Refuse a GPU run while no GPU worker is online: it would wait in the queue for nothing."""
        device = self.cleaned_data["device"]
        if self.live is not None and BisectionRun.QUEUES[device] == "gpu" and not self.live.get("gpu"):
            raise forms.ValidationError(
                "No registered GPU runner is online (none has sent a signed heartbeat lately), so a cuda or both run "
                "would wait for nothing. Pick cpu, or start a GPU runner (the Runners page registers one)."
            )
        return device

    def clean(self) -> dict:
        """Each ticked build must be hosted by a live worker of the device's queue: elsewhere it would only fail."""
        cleaned = super().clean()
        device, chosen = cleaned.get("device"), cleaned.get("builds") or []
        if device and chosen and self.hosted:
            queue = BisectionRun.QUEUES[device]
            missing = [name for name in chosen if name not in self.hosted.get(queue, {})]
            if missing:
                self.add_error("builds", f"No live {queue} worker hosts {', '.join(missing)}: pick another build.")
        cleaned["builds"] = chosen or [""]
        return cleaned

    @classmethod
    def for_repro(cls, code: str, live: dict[str, list[str]] | None = None, hosted: dict | None = None) -> BisectForm:
        """The unbound form for an extracted repro: a repro that names cuda gets the GPU pre-selected,
        since on a CPU worker it would only fail for want of one."""
        cuda = names_cuda(code)
        form = cls(
            initial={"code": code, "device": BisectionRun.Device.CUDA if cuda else BisectionRun.Device.CPU},
            live=live,
            hosted=hosted,
        )
        form.names_cuda = cuda
        return form

    def clean_code(self) -> str:
        code = self.cleaned_data["code"]
        if not code.strip():
            raise forms.ValidationError("Paste a repro to bisect.")
        return code


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


class AgendaItemForm(forms.Form):
    """What the meeting records about one agenda item for its minutes: who owns it (a user of the dashboard, by
    name; empty: nobody) and a note."""

    owner = forms.CharField(required=False, max_length=150)
    note = forms.CharField(required=False, max_length=2000, widget=forms.Textarea(attrs={"rows": 1}))

    def clean_owner(self):
        name = self.cleaned_data["owner"].strip().lstrip("@")
        if not name:
            return None
        user = get_user_model().objects.filter(username=name, is_active=True).first()
        if user is None:
            raise forms.ValidationError(f"No dashboard user is named {name!r}: the owner must have an account.")
        return user

    def record_changes(self, *, meeting: Meeting, issue: Issue, by) -> None:
        """What was typed on the card but not saved when a decision was clicked: recorded where it differs from
        what the meeting has (nothing typed on an item without one records nothing)."""
        item = AgendaItem.objects.filter(meeting=meeting, issue=issue).first()
        owner, note = self.cleaned_data["owner"], self.cleaned_data["note"].strip()
        if (item.owner_id if item else None) != (owner.pk if owner else None) or (item.note if item else "") != note:
            self.record(meeting=meeting, issue=issue, by=by)

    def record(self, *, meeting: Meeting, issue: Issue, by) -> AgendaItem:
        """Store the owner and note of `issue` in `meeting` (one row per meeting and issue)."""
        item, _ = AgendaItem.objects.update_or_create(
            meeting=meeting,
            issue=issue,
            defaults={
                "owner": self.cleaned_data["owner"],
                "note": self.cleaned_data["note"].strip(),
                "updated_by": by,
                "updated_at": timezone.now(),
            },
        )
        return item


class MetricsForm(forms.Form):
    """The metrics page's window, in weeks (the current week included)."""

    weeks = forms.IntegerField(required=False, min_value=1, max_value=MAX_WEEKS, initial=DEFAULT_WEEKS)

    def weeks_value(self) -> int:
        return (self.cleaned_data.get("weeks") if self.is_valid() else None) or DEFAULT_WEEKS


class DutyForm(forms.Form):
    """Put a triager on this week's roster, with the modules they prefer (comma-separated)."""

    username = forms.CharField(max_length=150)
    modules = forms.CharField(required=False, max_length=1000, help_text="e.g. module: dynamo, module: inductor")

    def clean_modules(self) -> list[str]:
        names = [name.strip() for name in self.cleaned_data["modules"].split(",") if name.strip()]
        unknown = sorted(set(names) - set(module_label_names()))
        if unknown:
            raise forms.ValidationError(f"Not module labels of the catalog: {', '.join(unknown)}.")
        return names


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
