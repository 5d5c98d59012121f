"""Choosing labels in a form: the shipped catalog's names and descriptions, the widgets that show each label's
description, and the type-ahead label picker (a text field tied to the page's catalog <datalist>, a plain field
without JavaScript) with the field that checks what was picked against the triage catalog (G7)."""

from __future__ import annotations

import difflib
import re

from django import forms
from django.utils.html import format_html, format_html_join

from rubric_app.models import Label
from rubric_app.rubric.reading.catalog import is_forbidden, load_catalog
from rubric_app.rubric.rules.skill_additions import never_applied
from rubric_app.vocabulary import (
    TRIAGE_REVIEW,
    TRIAGED,
    is_home_oncall,
    is_module,
    is_oncall,
)

# The status flags have their own controls (the review checkbox, and `triaged`, which
# plan_changes derives from G6); oncall labels are the route choice, not checkboxes.
FLAG_LABELS = frozenset({TRIAGE_REVIEW, TRIAGED})

_catalog_cache: list[dict] | None = None


def catalog() -> list[dict]:
    """The shipped label catalog (read from disk once per process; it ships with the code)."""
    global _catalog_cache
    if _catalog_cache is None:
        _catalog_cache = [item for item in load_catalog() if not is_forbidden(item["name"])]
    return _catalog_cache


def module_label_names() -> list[str]:
    return sorted(item["name"] for item in catalog() if is_module(item["name"]))


def known_module_labels() -> list[str]:
    """Every module label a queue filter can match: the catalog's and any applied on GitHub."""
    applied = Label.objects.filter(name__startswith="module:").values_list("name", flat=True)
    return sorted(set(module_label_names()) | set(applied))


def handoff_oncalls(allowed: frozenset[str]) -> list[str]:
    """Oncall queues an issue can be handed off to (G5): every oncall of the triage catalog in use (`allowed`:
    Label.objects.triage_catalog(), which follows the triage skill in use: a queue the skill removed, such as
    `oncall: package/deploy`, is never offered) except PT2's own two, and except what G13 says is never a redirect
    (`oncall: releng`; a distributed sub-queue, which the distributed team's triage picks)."""
    return sorted(name for name in allowed if is_oncall(name) and not is_home_oncall(name) and not never_applied(name))


class _Described:
    """Choices that carry their label's description (the triage skill's words) as a tooltip."""

    def __init__(self, *args, descriptions: dict[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.descriptions = descriptions or {}

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        if self.descriptions.get(value):
            option["attrs"]["title"] = self.descriptions[value]
        return option


class DescribedSelectMultiple(_Described, forms.SelectMultiple):
    """A multiple select of labels, each option with its description."""


class DescribedCheckboxes(_Described, forms.CheckboxSelectMultiple):
    """Checkboxes of labels, each with its description."""


def pickable_labels(allowed: frozenset[str]) -> list[str]:
    """The catalog labels a triager may add by hand (G7's triage catalog), less the ones with controls of their
    own: the status flags (the review box, `triaged` from G6) and the oncall labels (the route)."""
    return sorted(name for name in allowed if name not in FLAG_LABELS and not is_oncall(name))


def catalog_descriptions() -> dict[str, str]:
    """{label name: its description in the shipped catalog} (what the label picker shows beside each name)."""
    return {item["name"]: item.get("description", "") for item in catalog()}


# The page's one <datalist> of labels (web/templatetags/triage.py label_datalist) that every LabelPicker names.
LABEL_DATALIST_ID = "label-catalog"


class LabelPicker(forms.Widget):
    """A type-ahead label picker that is a plain form field without JS: a ticked box for each label chosen already,
    and a text field tied to the page's catalog <datalist> (names with their descriptions) for more, one or several
    comma-separated. keys.js turns a name picked in the field into one more ticked box."""

    def __init__(self, attrs=None, placeholder: str = "type to find a label"):
        super().__init__(attrs)
        self.placeholder = placeholder

    def value_from_datadict(self, data, files, name) -> list[str]:
        return data.getlist(name) if hasattr(data, "getlist") else list(data.get(name) or [])

    def value_omitted_from_data(self, data, files, name) -> bool:
        return False  # like checkboxes: nothing posted means nothing picked

    def render(self, name, value, attrs=None, renderer=None) -> str:
        values = [v for v in (value if isinstance(value, (list, tuple)) else split_names(value)) if v]
        attrs = self.build_attrs(self.attrs, attrs)
        boxes = format_html_join(
            "",
            '<label data-picked><input type="checkbox" name="{}" value="{}" checked> {}</label> ',
            ((name, v, v) for v in values),
        )
        return format_html(
            '<span class="label-picker" data-label-picker><span class="picked">{}</span>'
            '<input type="text" name="{}" id="{}" list="{}" placeholder="{}" autocomplete="off" size="26"></span>',
            boxes,
            name,
            attrs.get("id", f"id_{name}"),
            LABEL_DATALIST_ID,
            self.placeholder,
        )


def split_names(value) -> list[str]:
    """Label names from what a LabelPicker posted: a list of fields, each one name or several comma-separated."""
    items = value if isinstance(value, (list, tuple)) else [value] if value else []
    return list(dict.fromkeys(part.strip() for item in items for part in str(item).split(",") if part.strip()))


class CatalogLabelsField(forms.Field):
    """Labels picked from the catalog (LabelPicker); each must be one of `allowed` (G7), matched without regard to
    case, and "dynamo" stands for "module: dynamo". Cleans to the names, each once."""

    widget = LabelPicker

    def __init__(self, *, allowed=(), refused: dict[str, str] | None = None, **kwargs):
        kwargs.setdefault("required", False)
        super().__init__(**kwargs)
        self.allowed = allowed
        self.refused = refused or {}

    def offer(self, allowed: frozenset[str], refused: dict[str, str]) -> list[str]:
        """Take the labels a triager may pick by hand from the catalog `allowed` (pickable_labels), less `refused`
        (each with why it is not picked here); returns them, in the order the picker lists them."""
        pickable = [name for name in pickable_labels(allowed) if name not in refused]
        self.allowed, self.refused = frozenset(pickable), refused
        return pickable

    def to_python(self, value) -> list[str]:
        return list(dict.fromkeys(picked_label(name, self.allowed) or name for name in split_names(value)))

    def validate(self, value: list[str]) -> None:
        for name in value:
            if name in self.refused:
                raise forms.ValidationError(self.refused[name])
        unknown = [name for name in value if name not in self.allowed]
        if unknown:
            hints = [
                f"{name!r}: did you mean {' or '.join(near)}?"
                for name in unknown
                if (near := near_labels(name, self.allowed))
            ]
            raise forms.ValidationError(
                f"Not in the triage label catalog (G7): {', '.join(unknown)}. "
                + (" ".join(hints) + " " if hints else "")
                + "Pick a label from the list."
            )


_WORD = re.compile(r"[a-z0-9]+")


def _words(name: str) -> set[str]:
    return set(_WORD.findall(name.lower()))


def picked_label(typed: str, allowed) -> str:
    """The catalog label `typed` means, or "": the name in any case, the part after "module: " ("dynamo"), or the
    one label whose name holds every typed word ("correctness" is `module: correctness (silent)`). Words shared by
    several labels pick none (the picker then lists them as did-you-mean, near_labels)."""
    key = " ".join(typed.lower().split())
    by_lower = {name.lower(): name for name in allowed}
    if key in by_lower or f"module: {key}" in by_lower:
        return by_lower.get(key) or by_lower[f"module: {key}"]
    words = _words(key) - {"module"}
    within = [name for name in allowed if words and words <= _words(name)]
    return within[0] if len(within) == 1 else ""


def near_labels(typed: str, allowed, limit: int = 3) -> list[str]:
    """Catalog labels close to what was typed but not picked (a near miss, "corectness"; or a word several labels
    hold): what the picker's refusal offers as did-you-mean. Only catalog labels, best first."""
    key = " ".join(typed.lower().split())
    words = _words(key) - {"module"}
    within = sorted(name for name in allowed if words and words <= _words(name))
    if within:
        return within[:limit]
    short = {}  # each name, without its "module: ", and each word of four letters or more: the name
    for name in sorted(allowed):
        for form in (name.lower(), name.lower().removeprefix("module: "), *_words(name) - {"module"}):
            if len(form) >= 4:
                short.setdefault(form, name)
    close = difflib.get_close_matches(key.removeprefix("module: "), list(short), n=limit * 2, cutoff=0.75)
    return list(dict.fromkeys(short[c] for c in close))[:limit]


# Typed in a picker but chosen elsewhere on the form: said so, rather than "not in the catalog".
OWN_CONTROLS = {
    TRIAGE_REVIEW: "`triage review` is the review box below (R11), not a label to pick.",
    TRIAGED: "`triaged` is added by Apply itself when the issue is labelled and not held (G6), not a label to pick.",
}
