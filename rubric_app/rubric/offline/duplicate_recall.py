"""How well the possible-duplicate ranking finds originals, offline: real duplicate pairs in a pool of PT2 issues.

The pairs (rubric_app/data/pt2_duplicate_pairs.json) are PyTorch issues a person said duplicate another; each
duplicate is asked as it arrived (title and description: never the sentence naming its original) against a pool of
real PT2 issues: the JSON-lines files given (their full threads) plus every other issue the pairs file holds. The
figures: top-1 and top-5 (the original first, or among the five), and the precision of the "possible duplicate"
mark at its threshold (duplicates.MARK_AT): of the marks made, on the pairs' duplicates and on every other issue
of the files asked the same way (which duplicates no issue of the pool as far as anyone said), the share naming the
right original. The baseline, computed in the same run on the same pool, is a plain TF-IDF cosine (every word, raw
counts, the pool's IDF, full vectors), its mark threshold calibrated the same way (calibrate). The pairs are split
once (held_out, fixed before any tuning): the held-out part is only reported, never chosen on. On the development
part every knob is chosen by cross-validation: the ranking's weights (duplicates.GRID) by leave-one-out over the
development pairs (each pair scored with the weights the others chose: choose_weights), the mark's threshold by
k-fold over the development pairs and the other issues together (each fold marked at the threshold the other folds
calibrate); those cross-validated figures are printed beside the held-out ones, which use the weights and threshold
chosen on the whole development part. Pure Python.
"""

from __future__ import annotations

import hashlib
import json
import math
from bisect import bisect_left
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rubric_app.rubric.likeness import duplicates
from rubric_app.rubric.likeness.neighbours import MemoryIndex, terms_of
from rubric_app.rubric.likeness.signature import signature_of
from rubric_app.rubric.offline.evaluation import issue_from_record
from rubric_app.rubric.offline.neighbour_precision import plain_tfidf
from rubric_app.rubric.reading.types import IssueText

PAIRS_FILE = Path(__file__).resolve().parents[2] / "data" / "pt2_duplicate_pairs.json"
CANDIDATES = 30  # the first stage's candidates, as the database's lookup (triage/similar.py CANDIDATES)
TOP = 5
FOLDS = 5  # the mark threshold's cross-validation
# A method's mark threshold (calibrate): the lowest score at which its marks on the development pairs reach
# PRECISION_TARGET while it marks at most MARK_BUDGET of the pool's other issues (the same rule for ours and the
# baseline's). The budget keeps the mark rare: a short precise list beats a long list of maybes. Those other marks
# are counted wrong, though some are duplicates no one named (docs/similar.md lists them).
PRECISION_TARGET = 0.8
MARK_BUDGET = 0.01


def held_out(original: int) -> bool:
    """The held-out part: the pairs whose original's number hashes to 0 mod 3 (fixed before any tuning)."""
    return int(hashlib.sha256(str(original).encode()).hexdigest(), 16) % 3 == 0


@dataclass(frozen=True)
class Pair:
    duplicate: IssueText  # as it arrived: title and description
    original: int
    url: str


@dataclass
class Figures:
    """One method's figures on one part: the original's rank per pair (None: not among the CANDIDATES), the marks
    made on the part's duplicates (and how many name the right original), and those made on the other issues (the
    same for both parts)."""

    ranks: list[int | None] = field(default_factory=list)
    marked_right: int = 0
    pair_marks: int = 0
    other_marks: int = 0

    @property
    def queries(self) -> int:
        return len(self.ranks)

    def top(self, k: int) -> int:
        return sum(1 for r in self.ranks if r is not None and r <= k)

    @property
    def marks(self) -> int:
        return self.pair_marks + self.other_marks

    @property
    def precision(self) -> float:
        """Strict: every mark on an issue no one named a duplicate counts as wrong."""
        return self.marked_right / self.marks if self.marks else 0.0


@dataclass
class DuplicateReport:
    pool: int
    negatives: int  # the other issues asked, whose marks can only be wrong
    thresholds: dict[str, float]  # per method: ours the shipped duplicates.MARK_AT, the baseline's calibrated
    calibrated: dict[str, float]  # per method, what calibrate() chooses on the development part
    # (method, part) -> figures; parts: "development (CV)" (cross-validated), "development" (the shipped knobs, as
    # tuned on it: not a figure to trust), "held-out" (the knobs chosen on the development part)
    figures: dict[tuple[str, str], Figures]
    misses: list[tuple[int, int, list[int]]] = field(default_factory=list)  # development only: (dup, orig, top 5)
    weights: duplicates.Weights = duplicates.SHIPPED  # what choose_weights keeps on the whole development part
    pairs: dict[str, int] = field(default_factory=dict)  # per part: how many pairs


def arrival(record: dict[str, Any]) -> IssueText:
    """An issue as it arrived: its title and description, no thread, no labels."""
    issue = issue_from_record(record, use_labels=False)
    return IssueText(number=issue.number, title=issue.title, body=issue.body, author=issue.author)


def load_pairs(path: Path = PAIRS_FILE) -> tuple[list[Pair], list[dict[str, Any]]]:
    """(the pairs, the records of every other issue the file holds: originals and near misses, for the pool)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    pairs, extra = [], {}
    for pair in data["pairs"]:
        dup, orig = pair["duplicate"], pair["original"]
        text = IssueText(number=int(dup["number"]), title=dup["title"], body=dup.get("body", ""))
        pairs.append(Pair(text, int(orig["number"]), pair["evidence"]["where"]))
        if not orig.get("in_pool_file"):
            extra[int(orig["number"])] = orig
    for other in data.get("others", []):
        extra[int(other["number"])] = other
    return pairs, list(extra.values())


def _report(issue: IssueText, state: str = "open") -> duplicates.Report:
    signature = signature_of(issue)
    # Harvested threads never recorded who is a member: their sentences count (each was read by a person).
    named = duplicates.original_named(issue, unknown_counts=True)
    return duplicates.Report(
        number=issue.number,
        vector=terms_of(issue, signature),
        title=issue.title,
        names=duplicates.names_of(issue),
        signature=signature.key if signature is not None and signature.specific else "",
        state=state,
        named_original=named.number if named else None,
        named_by=named.by if named else "",
    )


def evaluate_duplicates(records: list[dict[str, Any]], path: Path = PAIRS_FILE) -> DuplicateReport:
    """Score our ranking and the TF-IDF baseline on the pairs of `path` in the pool of `records` plus that file's
    other issues."""
    pairs, extra = load_pairs(path)
    by_number = {int(r["number"]): r for r in records}
    for record in extra:
        by_number.setdefault(int(record["number"]), record)
    pool = {n: issue_from_record(r, use_labels=False) for n, r in by_number.items()}
    states = {n: str(r.get("state", "open")) for n, r in by_number.items()}
    duplicates_asked = {p.duplicate.number for p in pairs}
    ours, reports = MemoryIndex(), {}
    for n, issue in pool.items():
        reports[n] = _report(issue, states[n])
        ours.add(n, reports[n].vector)
    # Every other issue of the pool, asked as it arrived: a mark on one is a wrong one. Not those whose thread
    # names an original (they may duplicate something) nor the pairs' own.
    negatives = [
        arrival(by_number[n]) for n in sorted(pool) if n not in duplicates_asked and reports[n].named_original is None
    ]
    queries = [(p.duplicate, p.original) for p in pairs] + [(q, None) for q in negatives]
    docs = list(pool.values()) + [q for q, _ in queries]
    plain = plain_tfidf(docs)
    theirs = MemoryIndex()
    for issue, vector in zip(pool.values(), plain):
        theirs.add(issue.number, vector)
    plain_query = dict(zip([id(q) for q, _ in queries], plain[len(pool) :]))

    numbers = sorted(pool)

    def older(number: int) -> set[int]:
        return set(numbers[: bisect_left(numbers, number)])

    grid = list(dict.fromkeys([duplicates.SHIPPED, *duplicates.GRID]))
    # Per weights, per query: the outcome (the candidates found once, by cosine, then ranked with each weights).
    ours_by: dict[duplicates.Weights, list[tuple]] = {w: [] for w in grid}
    plain_scored: list[tuple] = []
    for query, original in queries:
        report = _report(query)
        # On arrival the mirror holds the issues filed before it (a lower number), never a later one.
        near = [reports[n] for n, _ in ours.nearest(report.vector, CANDIDATES, among=older(query.number))]
        for w in grid:
            ranked = duplicates.rank(report, near, weights=w)
            ours_by[w].append(_outcome([m.number for m in ranked], [m.score for m in ranked], original))
        found = theirs.nearest(plain_query[id(query)], CANDIDATES, among=older(query.number))
        plain_scored.append(_outcome([n for n, _ in found], [s for _, s in found], original))

    parts = ["held-out" if held_out(p.original) else "development" for p in pairs]
    dev_index = [i for i, part in enumerate(parts) if part == "development"]
    chosen = choose_weights({w: [ours_by[w][i] for i in dev_index] for w in grid})
    scored = {"ours": ours_by[chosen], "TF-IDF": plain_scored}
    thresholds, calibrated, figures = {}, {}, {}
    for method, outcomes in scored.items():
        asked, others = outcomes[: len(pairs)], outcomes[len(pairs) :]
        dev = [o for o, part in zip(asked, parts) if part == "development"]
        calibrated[method] = calibrate(dev, others)
        thresholds[method] = duplicates.MARK_AT if method == "ours" else calibrated[method]
        for part in ("development", "held-out"):
            picked = [o for o, p in zip(asked, parts) if p == part]
            figures[(method, part)] = _figures(picked, others, thresholds[method])
    per_weights = {w: (ours_by[w][: len(pairs)], ours_by[w][len(pairs) :]) for w in grid}
    figures[("ours", "development (CV)")] = cross_validated(per_weights, dev_index)
    plain = {None: (plain_scored[: len(pairs)], plain_scored[len(pairs) :])}
    figures[("TF-IDF", "development (CV)")] = cross_validated(plain, dev_index)
    misses = [
        (p.duplicate.number, p.original, top)
        for p, part, (rank, _, _, top) in zip(pairs, parts, scored["ours"])
        if part == "development" and rank != 1
    ]
    counts = {part: parts.count(part) for part in ("development", "held-out")}
    return DuplicateReport(len(pool), len(negatives), thresholds, calibrated, figures, misses, chosen, counts)


def _figures(asked: list[tuple], others: list[tuple], threshold: float) -> Figures:
    f = Figures(ranks=[rank for rank, *_ in asked])
    for _rank, right, score, _top in asked:
        if score >= threshold:
            f.pair_marks += 1
            f.marked_right += bool(right)
    f.other_marks = sum(1 for *_, score, _top in others if score >= threshold)
    return f


def _merit(outcomes: list[tuple]) -> tuple[int, int]:
    """What choose_weights maximises: originals first, then originals among the first five."""
    ranks = [rank for rank, *_ in outcomes]
    return sum(1 for r in ranks if r == 1), sum(1 for r in ranks if r is not None and r <= TOP)


def choose_weights(by_weights: dict) -> object:
    """The weights whose ranking puts the most development originals first (then in the top five); a tie keeps the
    earlier in by_weights' order (the shipped weights first: a change must earn its place)."""
    return max(by_weights, key=lambda w: (_merit(by_weights[w]), -list(by_weights).index(w)))


def cross_validated(per_weights: dict, dev_index: list[int], folds: int = FOLDS) -> Figures:
    """The development pairs' figures with every knob chosen without them. per_weights: {weights: (the pairs'
    outcomes, the other issues' outcomes)} (one key: nothing to choose). The ranks: leave-one-out, each pair ranked
    by the weights choose_weights takes on the other development pairs. The mark: k-fold over the development pairs
    and the other issues together, each fold marked at the threshold calibrate() sets on the other folds (with the
    weights chosen on them)."""
    f = Figures()
    for i in dev_index:
        rest = [j for j in dev_index if j != i]
        w = choose_weights({w: [asked[j] for j in rest] for w, (asked, _o) in per_weights.items()})
        f.ranks.append(per_weights[w][0][i][0])
    negatives = len(next(iter(per_weights.values()))[1])
    for fold in range(folds):
        train_pairs = [j for n, j in enumerate(dev_index) if n % folds != fold]
        test_pairs = [j for n, j in enumerate(dev_index) if n % folds == fold]
        train_others = [j for j in range(negatives) if j % folds != fold]
        test_others = [j for j in range(negatives) if j % folds == fold]
        w = choose_weights({w: [asked[j] for j in train_pairs] for w, (asked, _o) in per_weights.items()})
        asked, others = per_weights[w]
        threshold = calibrate([asked[j] for j in train_pairs], [others[j] for j in train_others])
        part = _figures([asked[j] for j in test_pairs], [others[j] for j in test_others], threshold)
        f.pair_marks += part.pair_marks
        f.marked_right += part.marked_right
        f.other_marks += part.other_marks
    return f


def _outcome(
    numbers: list[int], scores: list[float], original: int | None
) -> tuple[int | None, bool | None, float, list[int]]:
    """(the original's rank, whether the top one is it, the top score, the top TOP numbers) of one query."""
    rank = numbers.index(original) + 1 if original in numbers else None
    top = scores[0] if scores else 0.0
    return rank, (rank == 1) if original is not None else None, top, numbers[:TOP]


def calibrate(positives: list[tuple], negatives: list[tuple]) -> float:
    """The lowest top score at which at most MARK_BUDGET of `negatives` (the other issues) are marked and the marks
    on `positives` (the development pairs) are at least PRECISION_TARGET right (or there are none)."""
    others = sorted((score for *_, score, _top in negatives), reverse=True)
    floor = others[int(len(others) * MARK_BUDGET)] if others else 0.0
    above = math.floor(floor * 10_000) / 10_000 + 0.0001  # four decimals, and still above the budget's floor
    for t in sorted({math.floor(s * 10_000) / 10_000 for *_, s, _top in positives if s >= above} | {above}):
        marked = [bool(right) for _r, right, score, _t in positives if score >= t]
        if not marked or sum(marked) / len(marked) >= PRECISION_TARGET:
            return round(t, 4)
    return round(above, 4)
