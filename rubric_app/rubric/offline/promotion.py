"""The promotion gate: may a labeler trained on the history replace the one in use?

Both are scored on issues neither learned from, on two slices, and the candidate must not fall on either:

- the recent slice: the newest triaged history, held out by time (issue numbers follow creation), so the figures say
  how each does on the next issues to arrive; spread, so that no author and no kind of report (a text cluster) fills
  it: chosen among its newest RECENT_WINDOW times its size, at most a tenth from one author, the clusters in turns;
- the reference slice: the issues of the history's untouched rule (evaluation.is_held_out: one in five, by a hash of
  the number) up to a bound fixed at the first training from the history (reference_until): no issue filed later can
  ever be in it, so no new history, a flood above all, can fill it or tilt it. Nothing trains on it.

Near-duplicate issues (near_copies.py: the same words, give or take a fifth) count once everywhere: a cluster is
one record, trained on or judged by, never both (a copy in training would teach a held-out issue's answer). 500
copies of one text, filed among the newest issues, are one issue of the recent slice and one example to learn from.

The candidate replaces the model in use only when it is at least as good on every gated figure on both slices:
component F1, the pre-selection's precision and coverage (what `a` ticks and how often it ticks a component), routing
F1. First the recent slice's labels must follow from the issues' text at all: the candidate's components must agree
with them better than with the same labels shuffled among the held-out issues (above the 95th percentile of SHUFFLES
shuffles: a permutation test, on predictions made once). A history whose labels were scrambled fails there, even
though its held-out answers are scrambled too, and the model in use, scored against them, looks as bad as the
candidate; labelling every issue with the most common component (a baseline tried first) did not tell them apart:
the rules' findings alone beat it against scrambled answers on 200 issues. Pure Python: records in, a Verdict out.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from rubric_app.rubric.engine.assess import evaluate
from rubric_app.rubric.engine.model import LabelModel
from rubric_app.rubric.offline import near_copies
from rubric_app.rubric.offline.evaluation import has_component, is_held_out, issue_from_record, score
from rubric_app.rubric.offline.fitting import trust
from rubric_app.rubric.reading.types import Assessment

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
# The recent slice: a fifth of the triaged history (near-duplicates counted once, the reference slice aside), at
# least MIN_HELD_OUT issues (fewer say nothing) and at most MAX_HELD_OUT (enough for figures within about 0.02; the
# rest is worth more as training), chosen among the newest RECENT_WINDOW times as many: at most SPREAD of it from one
# author, the text clusters in turns (_spread).
HELD_OUT_SHARE = 0.2
MIN_HELD_OUT = 20
MAX_HELD_OUT = 500
RECENT_WINDOW = 3
SPREAD = 0.1
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


@dataclass
class Slices:
    """The triaged history cut for one training: what the candidate learns from, the two slices it is judged on, and
    every issue number of the judged slices' clusters (decisions on those are not learned from either)."""

    pool: list[dict[str, Any]]
    recent: list[dict[str, Any]]
    reference: list[dict[str, Any]]
    judged: frozenset[int]
    collapsed: int = 0  # issues folded into another as its near-duplicate

    @property
    def held_out(self) -> int:
        return len(self.recent) + len(self.reference)


def in_reference(record: dict[str, Any], reference_until: int) -> bool:
    return int(record["number"]) <= reference_until and is_held_out(record)


def cut(records: list[dict[str, Any]], reference_until: int) -> Slices:
    """The history cut into the pool, the recent slice and the reference slice (see the module's docstring), each
    near-duplicate cluster one record: the one in the reference slice if any, else the oldest."""
    sets = [near_copies.word_set(r) for r in records]
    near = near_copies.clusters(sets, near_copies.NEAR_DUPLICATE)
    topic = near_copies.clusters(sets, near_copies.TOPIC)
    members: dict[int, list[int]] = {}
    for i in sorted(range(len(records)), key=lambda i: int(records[i]["number"])):
        members.setdefault(near[i], []).append(i)
    chosen = {
        cluster: next((i for i in group if in_reference(records[i], reference_until)), group[0])
        for cluster, group in members.items()
    }
    reference = sorted((i for i in chosen.values() if in_reference(records[i], reference_until)), key=_number(records))
    rest = sorted((i for i in chosen.values() if not in_reference(records[i], reference_until)), key=_number(records))
    size = max(MIN_HELD_OUT, min(MAX_HELD_OUT, round(len(rest) * HELD_OUT_SHARE)))
    recent = _spread(rest[-size * RECENT_WINDOW :], size, records, topic)
    judged = {records[j]["number"] for i in (*reference, *recent) for j in members[near[i]]}
    held = set(recent)
    return Slices(
        pool=[records[i] for i in rest if i not in held],
        recent=[records[i] for i in sorted(recent, key=_number(records))],
        reference=[records[i] for i in reference],
        judged=frozenset(int(n) for n in judged),
        collapsed=len(records) - len(members),
    )


def _number(records: list[dict[str, Any]]):
    return lambda i: int(records[i]["number"])


def _spread(window: list[int], size: int, records: list[dict[str, Any]], topic: list[int]) -> list[int]:
    """`size` of the window (oldest first), newest first: at most SPREAD of them from one author (unknown authors
    apart), the text clusters taken in turns (one each, then two each...); only when that cannot fill the slice, as
    many from one author as it takes."""
    taken: dict[int, None] = {}  # in the order taken
    authors: dict[str, int] = defaultdict(int)
    kinds: dict[int, int] = defaultdict(int)
    author_of = {i: str(records[i].get("author") or "") or f"#{records[i]['number']}" for i in window}
    for author_cap in (max(1, math.ceil(size * SPREAD)), size):
        for kind_cap in range(1, size + 1):
            for i in reversed(window):
                free = i not in taken and authors[author_of[i]] < author_cap and kinds[topic[i]] < kind_cap
                if free and len(taken) < size:
                    taken[i] = None
                    authors[author_of[i]] += 1
                    kinds[topic[i]] += 1
            if len(taken) >= size or max(kinds.values(), default=0) < kind_cap:
                break  # full, or no cluster could give another one at this cap
    return list(taken)


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
    """The gate's answer: promote or not, the reason in one sentence, and what it rests on: the figures on the recent
    slice (candidate, in_use) and on the reference slice (reference: {"candidate": ..., "in_use": ...})."""

    promote: bool
    reason: str
    candidate: dict[str, float] = field(default_factory=dict)
    in_use: dict[str, float] = field(default_factory=dict)
    compared: int = 0  # recent held-out issues both were scored on
    held_out: int = 0  # the recent slice
    shuffled: float = 0.0  # the candidate's component F1 against the recent slice's labels shuffled (95th percentile)
    reference: dict[str, dict[str, float]] = field(default_factory=dict)
    reference_size: int = 0
    reference_compared: int = 0
    collapsed: int = 0  # issues of the history counted as near-duplicates of another

    def table(self) -> list[str]:
        """The figures side by side, one line each, gated ones marked; the reference slice's below."""
        lines = [
            f"{'':32}{'candidate':>10}{'in use':>10}   (recent slice: {self.compared} held-out issues neither "
            "learned from)"
        ]
        lines += self._rows(self.candidate, self.in_use)
        if self.held_out:
            lines.append(
                f"  the candidate against the {self.held_out} recent issues' labels shuffled among them: component "
                f"F1 {self.shuffled:.3f} (95th percentile of {SHUFFLES})"
            )
        if self.reference:
            lines.append(
                f"{'':32}{'candidate':>10}{'in use':>10}   (reference slice: {self.reference_compared} issues)"
            )
            lines += self._rows(self.reference["candidate"], self.reference["in_use"])
        if self.collapsed:
            lines.append(f"  {self.collapsed} issues of the history counted once with their near-duplicates")
        return lines

    @staticmethod
    def _rows(new: dict[str, float], old: dict[str, float]) -> list[str]:
        return [
            f"{'*' if key in GATED else ' '} {NAMES[key]:30}{_cell(new.get(key)):>10}{_cell(old.get(key)):>10}"
            for key in SHOWN
        ]


def _cell(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def _worse(new: dict[str, float], old: dict[str, float]) -> str:
    return ", ".join(f"{NAMES[k]} ({new[k]:.3f} < {old[k]:.3f})" for k in GATED if new[k] < old[k])


def judge(
    slices: Slices,
    candidate: LabelModel,
    in_use: LabelModel | None,
    in_use_learned: Learned,
) -> Verdict:
    """Whether `candidate` (trained on slices.pool) may replace `in_use` (None: the rules alone).

    In order: enough recent issues held out; their labels follow from the text (the permutation test, on all of
    them); enough of them that the model in use never saw (all of them when that cannot be known: a file trained
    elsewhere); then every gated figure at least the model in use's, on those and on the reference slice's issues
    the model in use never saw (judged on the recent slice alone, and said so, while fewer than MIN_HELD_OUT).
    """
    held = slices.recent
    verdict = Verdict(False, "", held_out=len(held), reference_size=len(slices.reference), collapsed=slices.collapsed)
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
    reference = [r for r in slices.reference if in_use_learned.saw(int(r["number"])) is not True]
    verdict.reference_compared = len(reference)
    if len(reference) >= MIN_HELD_OUT:
        verdict.reference = {
            "candidate": figures(reference, assess(reference, candidate)),
            "in_use": figures(reference, assess(reference, in_use)),
        }
    worse = [
        f"on the {name} slice: {why}"
        for name, why in (
            ("recent", _worse(verdict.candidate, verdict.in_use)),
            (
                "reference",
                _worse(verdict.reference["candidate"], verdict.reference["in_use"]) if verdict.reference else "",
            ),
        )
        if why
    ]
    if worse:
        verdict.reason = "worse than the model in use " + "; ".join(worse)
        return verdict
    verdict.promote = True
    verdict.reason = "at least as good as the model in use on every gated figure, on the recent and reference slices"
    if not verdict.reference:
        verdict.reason = (
            "at least as good as the model in use on every gated figure on the recent slice (the reference slice "
            f"holds {len(reference)} issues the model in use never learned from, too few to judge by: need "
            f"{MIN_HELD_OUT})"
        )
    if in_use_learned.saw(int(held[0]["number"])) is None:
        verdict.reason += " (what the model in use learned from is unknown: every held-out issue counted)"
    return verdict
