"""Forms of the dashboard that send nothing to GitHub: the queue's filters and the history's search, a bisection's
repro, what the meeting records about an agenda item, the metrics window and the roster. The forms of decisions are
decision_forms.py's."""

from __future__ import annotations

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone

from rubric_app.bisection import names_cuda
from rubric_app.lanes import LANES
from rubric_app.models import AgendaItem, BisectionRun, Issue, Meeting, Suggestion
from rubric_app.search import issue_number
from rubric_app.triage.metrics import DEFAULT_WEEKS, MAX_WEEKS
from rubric_app.web.labels import known_module_labels, module_label_names


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
            "github_url": Issue.github_page(number, settings.GITHUB_REPO),
        }


class HistorySearchForm(forms.Form):
    """The history page's search (/history): the queue's query language over the issues in no lane."""

    q = forms.CharField(
        required=False,
        max_length=200,
        label="Search",
        help_text='words (stemmed), "a phrase", -word, or; #number or an issue URL',
    )


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
