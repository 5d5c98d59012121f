"""How good the neighbours are, offline: precision@k of shared components, against plain TF-IDF.

For each issue humans gave a component (evaluation.COMPONENTS), its k most similar other issues
among those with a component: precision@k is the share of them carrying one of its components.
The baseline, computed in the same run on the same cleaned text, is textbook TF-IDF: every word,
raw term counts, the corpus' own IDF, cosine over the full vectors. The neighbour vote
(similarity.similar_findings) is scored leave-one-out: its suggestions for an issue come from the
other issues only. Pure Python.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from rubric_app.rubric.engine.assess import evaluate
from rubric_app.rubric.likeness.neighbours import MemoryIndex, Vocabulary, terms_of, vote, words_of
from rubric_app.rubric.likeness.signature import signature_of
from rubric_app.rubric.offline.evaluation import ALIASES, COMPONENTS, Counts, is_held_out, issue_from_record, score
from rubric_app.rubric.reading.types import IssueText, Neighbour
from rubric_app.vocabulary import is_module


def components(record: dict[str, Any]) -> frozenset[str]:
    """The component labels humans applied (older names folded, as the engine's scorer does)."""
    return frozenset(label for label in (ALIASES.get(l, l) for l in record.get("labels", [])) if label in COMPONENTS)


@dataclass
class Precision:
    queries: int = 0
    hits: int = 0
    shown: int = 0

    @property
    def value(self) -> float:
        return self.hits / self.shown if self.shown else 0.0


@dataclass
class SimilarityReport:
    """precision@k per method and per slice of queries ("all" and each file's name)."""

    k: int
    ours: dict[str, Precision] = field(default_factory=dict)
    baseline: dict[str, Precision] = field(default_factory=dict)
    signatures: int = 0  # issues with a failure signature
    shared_signatures: int = 0  # ... whose signature (a specific one) another issue shares
    vote: dict[str, Precision] = field(default_factory=dict)  # the vote's suggestions: right / made
    vote_issues: dict[str, int] = field(default_factory=dict)  # issues the vote suggested anything for
    # The engine's component counts without and with the neighbours' vote, per slice ("all", "held-out").
    engine: dict[tuple[str, bool], Counts] = field(default_factory=dict)


def tfidf_vectors(texts: list[Counter[str]]) -> list[dict[str, float]]:
    """Textbook TF-IDF: raw counts times smoothed IDF over these documents, unit length."""
    df: Counter[str] = Counter()
    for counts in texts:
        df.update(counts.keys())
    n = len(texts)
    vectors = []
    for counts in texts:
        vector = {t: c * (math.log((n + 1) / (df[t] + 1)) + 1.0) for t, c in counts.items()}
        norm = math.sqrt(sum(w * w for w in vector.values())) or 1.0
        vectors.append({t: w / norm for t, w in vector.items()})
    return vectors


def plain_tfidf(issues: list[IssueText]) -> list[dict[str, float]]:
    """The baseline both evaluations beat: TF-IDF over every word of each issue, the title counted once, no
    identifier split into its parts."""
    return tfidf_vectors([words_of(i, title_counts=1, identifiers=False) for i in issues])


def evaluate_similarity(
    slices: dict[str, list[dict[str, Any]]], k: int = 5, vocabulary: Vocabulary | None = None, engine: bool = False
) -> SimilarityReport:
    """Score the neighbours of every issue with a component in `slices` ({name: records}), the pool being
    all of them together. vocabulary: the IDF of our vectors (default: the shipped one). engine: also score
    the engine with and without the vote (slow: the engine runs twice on every record)."""
    records = [r for rs in slices.values() for r in rs]
    slice_of = {int(r["number"]): name for name, rs in slices.items() for r in rs}
    issues = [issue_from_record(r, use_labels=False) for r in records]
    truth = {int(r["number"]): components(r) for r in records}
    pool = {n for n, c in truth.items() if c}
    ours, theirs = MemoryIndex(), MemoryIndex()
    keys: Counter[str] = Counter()
    signatures = {}
    for issue, vector in zip(issues, plain_tfidf(issues)):
        signature = signature_of(issue)
        signatures[issue.number] = signature
        if signature is not None and signature.specific:
            keys[signature.key] += 1
        ours.add(issue.number, terms_of(issue, signature, vocabulary))
        theirs.add(issue.number, vector)
    report = SimilarityReport(
        k=k,
        signatures=sum(s is not None for s in signatures.values()),
        shared_signatures=sum(1 for s in signatures.values() if s and s.specific and keys[s.key] > 1),
    )
    for number in sorted(pool):
        for _method, index, scores in (("ours", ours, report.ours), ("baseline", theirs, report.baseline)):
            found = index.neighbours(number, k, among=pool)
            for name in ("all", slice_of[number]):
                p = scores.setdefault(name, Precision())
                p.queries += 1
                p.shown += len(found)
                p.hits += sum(1 for other, _ in found if truth[other] & truth[number])
        near = [
            Neighbour(other, tuple(sorted(truth[other])), score, _same(signatures[number], signatures[other]))
            for other, score in ours.neighbours(number, 20, among=pool)
        ]
        suggested = vote(near)
        for name in ("all", slice_of[number]):
            p = report.vote.setdefault(name, Precision())
            p.queries += 1
            p.shown += len(suggested)
            p.hits += sum(1 for label in suggested if label in truth[number])
            report.vote_issues[name] = report.vote_issues.get(name, 0) + bool(suggested)
    if engine:
        _score_engine(report, records, issues, ours, signatures, truth)
    return report


def _score_engine(report: SimilarityReport, records, issues, index: MemoryIndex, signatures, truth) -> None:
    """The engine (rules + shipped model) on every record, without and with its neighbours' vote (the others'
    labels only: leave-one-out). The held-out slice is the honest figure: the model never trained on it."""
    labelled = {n: tuple(sorted(l for l in r.get("labels", []) if is_module(l))) for n, r in zip(truth, records)}
    for with_vote in (False, True):
        predictions = []
        for issue in issues:
            near = (
                tuple(
                    Neighbour(other, labelled[other], cosine, _same(signatures[issue.number], signatures[other]))
                    for other, cosine in index.neighbours(issue.number, 20)
                    if labelled[other]
                )
                if with_vote
                else ()
            )
            predictions.append(evaluate(replace(issue, neighbours=near)).verdict())
        for name, keep in (("all", lambda r: True), ("held-out", is_held_out)):
            chosen = [(r, p) for r, p in zip(records, predictions) if keep(r)]
            report.engine[(name, with_vote)] = score([r for r, _ in chosen], [p for _, p in chosen]).components


def _same(a, b) -> bool:
    return a is not None and b is not None and a.specific and a.key == b.key
