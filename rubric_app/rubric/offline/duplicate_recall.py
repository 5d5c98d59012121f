"""How well the possible-duplicate ranking finds originals, offline: real duplicate pairs in a pool of PT2 issues.

The pairs (rubric_app/data/pt2_duplicate_pairs.json) are PyTorch issues a person said duplicate another; each
duplicate is asked as it arrived (title and description: never the sentence naming its original) against a pool of
real PT2 issues: the JSON-lines files given (their full threads) plus every other issue the pairs file holds. The
figures: top-1 and top-5 (the original first, or among the five), and the precision of the "possible duplicate"
mark at its threshold (duplicates.MARK_AT): of the marks made, on the pairs' duplicates and on every other issue
of the files asked the same way (which duplicates no issue of the pool as far as anyone said), the share naming the
right original. The baseline, computed in the same run on the same pool, is a plain TF-IDF cosine (every word, raw
counts, the pool's IDF, full vectors), its mark threshold calibrated the same way (calibrate). The pairs are split
once (held_out): the development part chose the knobs, the held-out part is only reported. Pure Python.
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
    figures: dict[tuple[str, str], Figures]  # (method, part) -> figures; parts: "development", "held-out"
    misses: list[tuple[int, int, list[int]]] = field(default_factory=list)  # development only: (dup, orig, top 5)


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
    return duplicates.Report(
        number=issue.number,
        vector=terms_of(issue, signature),
        title=issue.title,
        names=duplicates.names_of(issue),
        signature=signature.key if signature is not None and signature.specific else "",
        state=state,
        named_original=duplicates.named_original(issue),
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

    scored: dict[str, list[tuple[int | None, bool | None, float, list[int]]]] = {"ours": [], "TF-IDF": []}
    for query, original in queries:
        report = _report(query)
        # On arrival the mirror holds the issues filed before it (a lower number), never a later one.
        near = [reports[n] for n, _ in ours.nearest(report.vector, CANDIDATES, among=older(query.number))]
        ranked = duplicates.rank(report, near)
        scored["ours"].append(_outcome([m.number for m in ranked], [m.score for m in ranked], original))
        found = theirs.nearest(plain_query[id(query)], CANDIDATES, among=older(query.number))
        scored["TF-IDF"].append(_outcome([n for n, _ in found], [s for _, s in found], original))

    parts = ["held-out" if held_out(p.original) else "development" for p in pairs]
    thresholds, calibrated, figures = {}, {}, {}
    for method, outcomes in scored.items():
        asked, others = outcomes[: len(pairs)], outcomes[len(pairs) :]
        dev = [o for o, part in zip(asked, parts) if part == "development"]
        calibrated[method] = calibrate(dev, others)
        thresholds[method] = duplicates.MARK_AT if method == "ours" else calibrated[method]
        for part in ("development", "held-out"):
            chosen = [o for o, p in zip(asked, parts) if p == part]
            f = figures[(method, part)] = Figures(ranks=[rank for rank, *_ in chosen])
            for _rank, right, score, _top in chosen:
                if score >= thresholds[method]:
                    f.pair_marks += 1
                    f.marked_right += bool(right)
            f.other_marks = sum(1 for *_, score, _top in others if score >= thresholds[method])
    misses = [
        (p.duplicate.number, p.original, top)
        for p, part, (rank, _, _, top) in zip(pairs, parts, scored["ours"])
        if part == "development" and rank != 1
    ]
    return DuplicateReport(len(pool), len(negatives), thresholds, calibrated, figures, misses)


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
