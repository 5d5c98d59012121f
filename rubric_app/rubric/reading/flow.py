"""G4, decided once: "every oncall: pt2 issue ends with at least one module: label" (RUBRIC G4).

The engine (its checklist and what `a` ticks), the triage form, a decision's refusal and the page's warning
all ask these two questions; a second copy of the rule is a bug waiting. Pure Python.
"""

from __future__ import annotations

from collections.abc import Iterable

from rubric_app.vocabulary import PT2_ONCALL, TRIAGED, is_module

G4_VIOLATION = "A PT2 issue needs at least one module: label."


def ends_with_component(labels: Iterable[str]) -> bool:
    """What G4 asks an issue to end with: at least one `module:` label among `labels`."""
    return any(is_module(name) for name in labels)


def breaks_g4(labels: Iterable[str]) -> bool:
    """True when an issue carrying `labels` has ended (`triaged`) in oncall: pt2 without a `module:` label.

    An untriaged issue without one is simply work to do: G4 speaks of how an issue ends.
    """
    names = set(labels)
    return PT2_ONCALL in names and TRIAGED in names and not ends_with_component(names)


def change_breaks_g4(labels: Iterable[str], add: Iterable[str], remove: Iterable[str]) -> bool:
    """True when adding `add` and removing `remove` from `labels` makes the issue break G4.

    Only a change that adds `triaged` or takes a module label away: an issue triaged that way before (by
    hand on GitHub) can still get other changes, and its G4 warning stays on its page.
    """
    add, remove = set(add), set(remove)
    makes_it = TRIAGED in add or any(is_module(name) for name in remove)
    return makes_it and breaks_g4((set(labels) | add) - remove)
