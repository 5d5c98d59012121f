"""Similar issues: each issue as a short weighted term vector, and what its neighbours' labels suggest.

terms_of() turns an issue into at most TERMS_PER_ISSUE + a few signature terms, weighted by TF-IDF
(document frequencies from PT2 issues, data/pt2_terms.json) and L2-normalized, so that the dot
product of two vectors is their cosine. The failure signature (signature.py) adds terms of its
own: the whole key, the message and the innermost frame, so that reports of one failure rank above
reports that only share words. The same vectors are stored per issue in the
database (rubric_app/triage/similar.py), where the dot product is a join on the term; MemoryIndex is the
same arithmetic in memory, for the offline evaluation.

similar_findings() is the engine's finding source: "4 of the 5 most similar triaged issues are
`module: dynamic shapes`", citing the rule that governs the label, with the neighbours as evidence.

Text is untrusted: it is capped (text.py) and tokenized by one bounded pattern. Pure Python, no Django.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from rubric_app.rubric.likeness.signature import Signature
from rubric_app.rubric.reading.catalog import GOVERNING_RULE
from rubric_app.rubric.reading.facts import Finding
from rubric_app.rubric.reading.text import sources_of
from rubric_app.rubric.reading.types import IssueText, Neighbour
from rubric_app.vocabulary import (
    COMPILE_TIME,
    COMPILE_UX,
    CUDA_GRAPHS,
    DDP,
    DECOMPOSITIONS,
    DETERMINISM,
    DTENSOR,
    DYNAMIC_SHAPES,
    DYNAMO,
    FLEX_ATTENTION,
    FSDP,
    FUNCTORCH,
    FX,
    HELION,
    INDUCTOR,
    MEMORY_USAGE,
    NUMERICAL_STABILITY,
    PERFORMANCE,
    PT2_DISPATCHER,
    Kind,
)

VOCABULARY_FILE = Path(__file__).resolve().parents[2] / "data" / "pt2_terms.json"

TERMS_PER_ISSUE = 48
MAX_TERM = 100  # the stored term's length (a frame name can be longer)
# The text a vector is made of: enough for the title, the description and the start of the thread.
MAX_TEXT = 30_000
# A title word counts as this many body words. The knobs were chosen on harvested threads whose bodies began
# with a "# <title>" line (a title word counted once there and once more in the body); the offline reader
# now drops that line (evaluation.without_title_heading), so 2 keeps the chosen weighting, and a synced
# issue, whose body never repeated its title, gets it too.
TITLE_COUNTS = 2
# The signature's terms, against the text's unit-length vector: two reports of one failure share
# about 0.6 of their (renormalized) vector whatever their wording; the same message or the same
# innermost frame alone adds a little. Not the exception class nor the outer frames: AssertionError
# and eval_frame.py are in half the tracebacks, and say nothing of which ones are alike.
SIGNATURE_WEIGHTS = {"sig": 1.0, "msg": 0.5, "frame": 0.5}

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{1,40}")
_DIGITS = re.compile(r"\d+")
# An identifier's parts: snake_case pieces and CamelCase words (an acronym stays whole: SDPA, HTTPError's HTTP).
_PART = re.compile(r"[A-Z]{2,}(?=[A-Z][a-z]|\b|_|\d)|[A-Z]?[a-z]+|[A-Z]+|\d+")
_DTYPE = re.compile(r"(?:b?float|u?int|complex)(?:8|16|32|64|128)$")
_URL = re.compile(r"https?://\S{1,500}")
# The bot's cc list says nothing about the failure: it is derived from the labels, so it would only echo
# them. (collect_env's lines never get here: text.sources_of cuts them out.)
_NOISE_LINE = re.compile(r"\s{0,8}cc @")
STOP = frozenset(
    """
the and for with this that when are not but from have has was were you your can use using used will would should
could into than then there their they them what which while where who why how all any also just only some more most
very such been being its our out about after before because does did doing done get got here just like make made
may might must need now one two new see seems seem still same want way well work works worked yes try tried trying
def return self none true false import print torch else elif pass lambda class raise assert
""".split()
)


def _token(raw: str) -> str:
    """A token as the index keeps it: lower-case, digits dropped (a dtype keeps them), no edge underscores,
    a plural's "s" dropped; "" when too short or a stop word."""
    word = raw.lower()
    if not _DTYPE.match(word):
        word = _DIGITS.sub("", word)
    word = word.strip("_")
    if len(word) > 4 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    return "" if len(word) < 3 or word in STOP else word


def _clean(text: str) -> str:
    """The text without URLs and the cc list (collect_env's report is already cut: text.sources_of)."""
    return "\n".join(line for line in _URL.sub(" ", text).split("\n") if not _NOISE_LINE.match(line))


def parts_of(raw: str) -> list[str]:
    """The parts of a code identifier as index tokens: `diagonal_scatter` gives diagonal and scatter,
    `AutocastModeVariable` autocast, mode and variable; [] for a plain word. So two reports of sibling ops or of
    one class through different names share the words they have in common (foo_bar_baz and foo_qux_baz: foo, baz)."""
    pieces = [p for p in _PART.findall(raw) if p]
    if len(pieces) < 2:
        return []
    return [word for word in (_token(p) for p in pieces) if word]


def tokens_of(text: str) -> list[str]:
    """The index tokens of a text: each word, and each part of a code identifier besides the identifier itself."""
    out = []
    for raw in _TOKEN.findall(text):
        word = _token(raw)
        if word:
            out.append(word)
            out += parts_of(raw)
    return out


def words_of(issue: IssueText, title_counts: int = TITLE_COUNTS, identifiers: bool = True) -> Counter[str]:
    """Token counts of the issue's title (each `title_counts` times), description and thread, capped at MAX_TEXT.

    identifiers=False: the words only, no identifier parts (the plain TF-IDF the evaluations compare with)."""
    counts: Counter[str] = Counter()
    budget = MAX_TEXT
    for source in sources_of(issue):
        text = source.text[:budget]
        budget -= len(text)
        weight = title_counts if source.name == "title" else 1
        text = _clean(text) if source.name != "title" else text
        for word in tokens_of(text) if identifiers else [w for w in map(_token, _TOKEN.findall(text)) if w]:
            counts[word] += weight
        if budget <= 0:
            break
    return counts


@dataclass(frozen=True)
class Vocabulary:
    """Document frequencies of terms in a corpus of PT2 issues: the IDF of the vectors."""

    documents: int
    df: dict[str, int]

    def idf(self, term: str) -> float:
        """Smoothed IDF; a term the corpus never saw counts as seen once."""
        return math.log((self.documents + 1) / (self.df.get(term, 1) + 1)) + 1.0

    @classmethod
    def build(cls, issues: Iterable[IssueText], min_df: int = 2) -> Vocabulary:
        df: Counter[str] = Counter()
        n = 0
        for issue in issues:
            n += 1
            df.update(set(words_of(issue)))
        return cls(n, {term: count for term, count in df.items() if count >= min_df})

    def to_json(self) -> dict:
        return {"documents": self.documents, "df": dict(sorted(self.df.items()))}


@lru_cache(maxsize=1)
def shipped_vocabulary() -> Vocabulary:
    """The document frequencies shipped in data/ (PT2 issues; rebuilt by `evaluate_similar --write-vocabulary`)."""
    with open(VOCABULARY_FILE, encoding="utf-8") as fh:
        data = json.load(fh)
    return Vocabulary(int(data["documents"]), {str(k): int(v) for k, v in data["df"].items()})


def signature_terms(signature: Signature | None) -> dict[str, float]:
    """The signature's own terms and weights (SIGNATURE_WEIGHTS); none without a signature."""
    if signature is None:
        return {}
    terms = {f"frame:{signature.frames[0]}"[:MAX_TERM]: SIGNATURE_WEIGHTS["frame"]} if signature.frames else {}
    if signature.specific:
        terms[f"sig:{signature.key}"] = SIGNATURE_WEIGHTS["sig"]
        if signature.message:
            digest = hashlib.sha256(f"{signature.exception}\n{signature.message}".encode()).hexdigest()[:12]
            terms[f"msg:{digest}"] = SIGNATURE_WEIGHTS["msg"]
    return terms


def terms_of(
    issue: IssueText,
    signature: Signature | None = None,
    vocabulary: Vocabulary | None = None,
    limit: int = TERMS_PER_ISSUE,
) -> dict[str, float]:
    """The issue's vector: its `limit` heaviest TF-IDF words plus its signature's terms, unit length.

    The dot product of two vectors (over the terms they share) is their cosine similarity.
    """
    vocabulary = vocabulary or shipped_vocabulary()
    weights = {word: (1.0 + math.log(count)) * vocabulary.idf(word) for word, count in words_of(issue).items()}
    top = sorted(weights.items(), key=lambda item: (-item[1], item[0]))[:limit]
    norm = math.sqrt(sum(w * w for _, w in top)) or 1.0
    vector = {word[:MAX_TERM]: w / norm for word, w in top}
    vector.update(signature_terms(signature))
    norm = math.sqrt(sum(w * w for w in vector.values())) or 1.0
    return {term: round(w / norm, 6) for term, w in vector.items()}


def shared_words(a: dict[str, float], b: dict[str, float], limit: int = 4) -> list[str]:
    """The plain words (not signature terms) two vectors share, heaviest first: why they are similar."""
    common = [(a[t] * b[t], t) for t in a.keys() & b.keys() if ":" not in t]
    return [t for _, t in sorted(common, reverse=True)[:limit]]


class MemoryIndex:
    """Vectors in memory with the database's arithmetic (rubric_app/triage/similar.py): candidates by
    shared terms, scored by the dot product. For the offline evaluation and the benchmark's checks."""

    def __init__(self) -> None:
        self.vectors: dict[int, dict[str, float]] = {}
        self.postings: dict[str, list[tuple[int, float]]] = defaultdict(list)

    def add(self, key: int, vector: dict[str, float]) -> None:
        self.vectors[key] = vector
        for term, weight in vector.items():
            self.postings[term].append((key, weight))

    def neighbours(
        self, key: int, limit: int = 10, among: set[int] | None = None, query_terms: int | None = None
    ) -> list[tuple[int, float]]:
        """[(key, cosine)] of the `limit` most similar others, best first (ties: smaller key first).

        query_terms: look candidates up by only the query's heaviest terms (the database does, see QUERY_TERMS)."""
        return self.nearest(self.vectors[key], limit, among, query_terms, exclude=key)

    def nearest(
        self,
        vector: dict[str, float],
        limit: int = 10,
        among: set[int] | None = None,
        query_terms: int | None = None,
        exclude: int | None = None,
    ) -> list[tuple[int, float]]:
        """neighbours() of a vector that is not in the index (a report asked as it arrived)."""
        scores: dict[int, float] = defaultdict(float)
        query = sorted(vector.items(), key=lambda item: -item[1])[:query_terms]
        for term, weight in query:
            for other, w in self.postings.get(term, ()):
                if other != exclude and (among is None or other in among):
                    scores[other] += weight * w
        return sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:limit]


# --- neighbours as a suggestion source ----------------------------------------------------------

# The labels a neighbour vote may suggest, each citing the rule that governs it (catalog.GOVERNING_RULE); a label the
# rubric does not govern is never suggested from neighbours.
VOTED_LABELS = (
    DYNAMO,
    INDUCTOR,
    DYNAMIC_SHAPES,
    PT2_DISPATCHER,
    DECOMPOSITIONS,
    FX,
    FUNCTORCH,
    HELION,
    FLEX_ATTENTION,
    DTENSOR,
    FSDP,
    DDP,
    CUDA_GRAPHS,
    DETERMINISM,
    COMPILE_TIME,
    NUMERICAL_STABILITY,
    COMPILE_UX,
    PERFORMANCE,
    MEMORY_USAGE,
)
VOTERS = 5  # the most similar triaged issues that vote
MIN_SIMILARITY = 0.12  # a neighbour less similar than this is not evidence of anything
MIN_VOTES = 3  # of VOTERS
# P(the label is right | this many of the 5 voted for it), measured leave-one-out on the PT2 issues
# of tests/data (evaluate_similar): the finding's weight, weighed by the engine like any other.
VOTE_WEIGHT = {3: 0.6, 4: 0.8, 5: 0.85}
SAME_SIGNATURE_WEIGHT = 0.75  # a triaged report of the very same failure


def similar_findings(issue: IssueText) -> list[Finding]:
    """ADD findings from the labels of the issue's most similar triaged issues (issue.neighbours).

    A component at least MIN_VOTES of the VOTERS most similar triaged neighbours carry, or one a
    triaged neighbour with the same failure signature carries. Evidence: the neighbours' numbers.
    """
    voters = [
        n for n in issue.neighbours if n.similarity >= MIN_SIMILARITY and any(l in VOTED_LABELS for l in n.labels)
    ]
    voters = sorted(voters, key=lambda n: (not n.same_signature, -n.similarity))[:VOTERS]
    found: list[Finding] = []
    for label in VOTED_LABELS:
        rule_id = GOVERNING_RULE[label]
        carrying = [n for n in voters if label in n.labels]
        twins = [n for n in carrying if n.same_signature]
        numbers = " ".join(f"#{n.number}" for n in carrying)
        if twins:
            found.append(
                Finding(
                    rule_id,
                    Kind.ADD,
                    label,
                    SAME_SIGNATURE_WEIGHT,
                    numbers,
                    "similar",
                    f"#{twins[0].number} has the same failure signature and is {label}",
                    origin="similar",
                )
            )
        elif len(carrying) >= MIN_VOTES:
            found.append(
                Finding(
                    rule_id,
                    Kind.ADD,
                    label,
                    VOTE_WEIGHT[len(carrying)],
                    numbers,
                    "similar",
                    f"{len(carrying)} of the {len(voters)} most similar triaged issues are {label}",
                    origin="similar",
                )
            )
    return found


def vote(neighbours: Iterable[Neighbour]) -> list[str]:
    """The labels similar_findings would suggest from these neighbours (for the evaluation)."""
    return [x.label for x in similar_findings(IssueText(0, "", "", neighbours=tuple(neighbours)))]
