"""The promotion gate: may a labeler trained on the history replace the one in use?

Both are scored on the same issues, ones neither learned from: the newest triaged history, held out by time (issue
numbers follow creation), so the figures say how each does on the next issues to arrive. The candidate replaces
the model in use only when it is at least as good on every gated figure: component F1, the pre-selection's
precision and coverage (what `a` ticks and how often it ticks a component), routing F1.

First the held-out labels must follow from the issues' text at all: the candidate's components must agree with
them better than with the same labels shuffled among the held-out issues (above the 95th percentile of SHUFFLES
shuffles: a permutation test, on predictions made once). A history whose labels were scrambled fails there, even
though its held-out answers are scrambled too, and the model in use, scored against them, looks as bad as the
candidate; labelling every issue with the most common component (a baseline tried first) did not tell them apart:
the rules' findings alone beat it against scrambled answers on 200 issues. Pure Python: records in, a Verdict out.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from .engine import evaluate
from .model import LabelModel
from .offline.evaluation import has_component, is_held_out, issue_from_record, score
from .offline.fitting import trust
from .types import Assessment

# The figures the gate compares, as evaluation.trust() gives them, and the ones shown beside them.
GATED = ("component_f1", "preselected_precision", "coverage", "routing_f1")
SHOWN = (*GATED, "component_precision", "component_recall", "review_precision", "review_recall")
NAMES = {
    "component_f1": "component F1",
    "component_precision": "component precision",
    "component_recall": "component recall",
    "preselected_precision": "pre-selected precision",
    "coverage": "issues with a pre-selection",
    "routing_f1": "routing F1",
    "review_precision": "review flag precision",
    "review_recall": "review flag recall",
}
# The newest fifth of the triaged history, at least MIN_HELD_OUT issues (fewer say nothing) and at most
# MAX_HELD_OUT (enough for figures within about 0.02; the rest is worth more as training).
HELD_OUT_SHARE = 0.2
MIN_HELD_OUT = 20
MAX_HELD_OUT = 500
# The shipped model's pool: the harvested files' issues up to this number, less their held-out slice
# (evaluation.is_held_out). Which issues it learned from is known only by that rule.
SHIPPED_NEWEST = 198_333
# The permutation test's shuffles of the held-out labels (seeded: the same history gives the same verdict).
SHUFFLES = 100


@dataclass(frozen=True)
class Learned:
    """What a model learned from, to keep the issues it is scored on ones it never saw.

    numbers: the issues it trained on (records and decisions), when known; shipped: the shipped model's rule;
    neither: unknown (a file trained elsewhere), so it may have seen any issue."""

    numbers: frozenset[int] | None = None
    shipped: bool = False

    def saw(self, number: int) -> bool | None:
        """True or False, or None when it cannot be known."""
        if self.shipped:
            return number <= SHIPPED_NEWEST and not is_held_out({"number": number})
        return None if self.numbers is None else number in self.numbers


def split_by_time(records: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(training pool, held-out newest): the newest HELD_OUT_SHARE by issue number, within the bounds."""
    ordered = sorted(records, key=lambda r: int(r["number"]))
    held = max(MIN_HELD_OUT, min(MAX_HELD_OUT, round(len(ordered) * HELD_OUT_SHARE)))
    return ordered[:-held], ordered[-held:]


def assess(records: list[dict[str, Any]], model: LabelModel | None) -> list[Assessment]:
    """The engine's answer for each record, its labels hidden, with `model` (None: the rules alone)."""
    return [evaluate(issue_from_record(r, use_labels=False), model=model, use_model=model is not None) for r in records]


def figures(records: list[dict[str, Any]], assessments: list[Assessment]) -> dict[str, float]:
    """The gated and shown figures of these assessments of `records` (evaluation.trust)."""
    t = trust(records, assessments)
    values = {
        "component_f1": t.components.f1,
        "component_precision": t.components.precision,
        "component_recall": t.components.recall,
        "preselected_precision": t.preselected.precision,
        "coverage": t.coverage,
        "routing_f1": t.routing.f1,
        "review_precision": t.review.precision,
        "review_recall": t.review.recall,
    }
    return {k: round(v, 3) for k, v in values.items()}


def shuffled_f1(records: list[dict[str, Any]], assessments: list[Assessment], seed: int = 0) -> float:
    """The 95th percentile of the component F1 of these assessments against the labels of the issues humans gave a
    component, shuffled among them SHUFFLES times: what agreement by chance reaches."""
    labelled = [(r, a.verdict()) for r, a in zip(records, assessments) if has_component(r)]
    if not labelled:
        return 0.0
    rng, lists = random.Random(seed), [r.get("labels", []) for r, _ in labelled]
    found = []
    for _ in range(SHUFFLES):
        rng.shuffle(lists)
        shuffled = [{**r, "labels": labels} for (r, _), labels in zip(labelled, lists)]
        found.append(score(shuffled, [verdict for _, verdict in labelled]).components.f1)
    return round(sorted(found)[int(0.95 * len(found)) - 1], 3)


@dataclass
class Verdict:
    """The gate's answer: promote or not, the reason in one sentence, and what it rests on."""

    promote: bool
    reason: str
    candidate: dict[str, float] = field(default_factory=dict)
    in_use: dict[str, float] = field(default_factory=dict)
    compared: int = 0  # held-out issues both were scored on
    held_out: int = 0
    shuffled: float = 0.0  # the candidate's component F1 against the held-out labels shuffled (95th percentile)

    def table(self) -> list[str]:
        """The figures side by side, one line each, gated ones marked."""
        lines = [f"{'':32}{'candidate':>10}{'in use':>10}   (on {self.compared} held-out issues neither learned from)"]
        for key in SHOWN:
            mark = "*" if key in GATED else " "
            new, old = self.candidate.get(key), self.in_use.get(key)
            lines.append(f"{mark} {NAMES[key]:30}{_cell(new):>10}{_cell(old):>10}")
        if self.held_out:
            lines.append(
                f"  the candidate against the {self.held_out} held-out issues' labels shuffled among them: component "
                f"F1 {self.shuffled:.3f} (95th percentile of {SHUFFLES})"
            )
        return lines


def _cell(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def judge(
    pool: list[dict[str, Any]],
    held: list[dict[str, Any]],
    candidate: LabelModel,
    in_use: LabelModel | None,
    in_use_learned: Learned,
) -> Verdict:
    """Whether `candidate` (trained on `pool`) may replace `in_use` (None: the rules alone), on the `held` issues.

    In order: enough held out; the labels follow from the text (the permutation test, on all of them);
    enough of them that the model in use never saw (all of them when that cannot be known: a file trained
    elsewhere); then every gated figure at least the model in use's, on those.
    """
    verdict = Verdict(False, "", held_out=len(held))
    if len(held) < MIN_HELD_OUT:
        verdict.reason = f"only {len(held)} triaged issues held out: too few to judge by (need {MIN_HELD_OUT})"
        return verdict
    assessed = assess(held, candidate)
    everything = figures(held, assessed)
    verdict.shuffled = shuffled_f1(held, assessed)
    if everything["component_f1"] <= verdict.shuffled:
        verdict.candidate = everything
        verdict.reason = (
            f"the held-out issues' labels do not follow from their text: the candidate's components agree with them "
            f"(F1 {everything['component_f1']:.3f}) no better than with the same labels shuffled among the issues "
            f"({verdict.shuffled:.3f}); are the history's labels right?"
        )
        return verdict
    compared = [r for r in held if in_use_learned.saw(int(r["number"])) is not True]
    verdict.compared = len(compared)
    if len(compared) < MIN_HELD_OUT:
        verdict.candidate = everything
        verdict.reason = (
            f"only {len(compared)} of the {len(held)} held-out issues are ones the model in use never learned from "
            f"(need {MIN_HELD_OUT}): no fair comparison"
        )
        return verdict
    verdict.candidate = everything if len(compared) == len(held) else figures(compared, assess(compared, candidate))
    verdict.in_use = figures(compared, assess(compared, in_use))
    worse = [k for k in GATED if verdict.candidate[k] < verdict.in_use[k]]
    if worse:
        verdict.reason = "worse than the model in use on " + ", ".join(
            f"{NAMES[k]} ({verdict.candidate[k]:.3f} < {verdict.in_use[k]:.3f})" for k in worse
        )
        return verdict
    verdict.promote = True
    verdict.reason = "at least as good as the model in use on every gated figure"
    if in_use_learned.saw(int(held[0]["number"])) is None:
        verdict.reason += " (what the model in use learned from is unknown: every held-out issue counted)"
    return verdict
