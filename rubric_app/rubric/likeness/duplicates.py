"""Possible duplicates: which similar issue a report may duplicate, how sure that is, and why.

A report's most similar issues (neighbours.py: the cosine of their term vectors) are scored again as originals:
the titles compared as titles (a title is a summary, not more words of the body), the failure signature, and the
names both reports use (the op or API, the config flag, the exception, the quoted identifier). An issue whose
thread says it duplicates another (`named_original`: "Duplicate of #N", "dupe of", "same as #N", "tracked at #N")
is never the original itself: its score passes to the issue it names, or it is left out when it names the report
(a report's own duplicate is never its original). Only standing names an original: a member's or maintainer's
sentence (GitHub's author_association), or GitHub's own closed-as-duplicate state; a stranger's "Duplicate of #N"
moves nothing, and the reasons say who said it. `best_original` is the one a "possible duplicate" mark offers,
when it clears MARK_AT: calibrated for precision on real duplicate pairs (rubric_app/data/pt2_duplicate_pairs.json,
evaluate_similar --duplicates); below it the issue page lists similar issues without offering to close anything.

Every match says why it is listed. Issue text is untrusted: read line by line, each line capped, every pattern
bounded. Pure Python, no Django.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field

from rubric_app.rubric.likeness.neighbours import Vocabulary, _token, shipped_vocabulary, tokens_of
from rubric_app.rubric.reading.text import Source, sources_of
from rubric_app.rubric.reading.types import IssueText
from rubric_app.vocabulary import is_maintainer

MAX_LINE = 1_000
MAX_LINES = 2_000  # per source

# The score of a candidate original: the cosine of the term vectors, plus TITLE_WEIGHT times the cosine of the
# titles, plus NAME_WEIGHT for each specific name both use (at most MAX_NAMES of them). Chosen on the development
# pairs only (the held-out ones are scored, never looked at): see docs/similar.md.
TITLE_WEIGHT = 1.0
NAME_WEIGHT = 0.08
MAX_NAMES = 3
# A name counts when few PT2 issues use it (document frequency in the shipped vocabulary): the config flags every
# fuzzer's template sets, or `torch.compile`'s own options, say nothing of which bug a report is.
RARE_NAME = 3
# Candidates this close to the best are all about as likely: the original is then a closed one, else the
# earliest report (the others may well duplicate it too), as the group route takes the oldest report.
EARLIER_MARGIN = 0.1


@dataclass(frozen=True)
class Weights:
    """The ranking's knobs, as one value: what offline/duplicates.choose_weights compares by cross-validation."""

    title: float = TITLE_WEIGHT
    name: float = NAME_WEIGHT
    margin: float = EARLIER_MARGIN


SHIPPED = Weights()
# The knobs' candidates, few on purpose (each more is one more way to fit the development pairs' noise): the shipped
# weights and their neighbours; offline/duplicates.choose_weights keeps the one cross-validation prefers.
GRID = tuple(
    Weights(title, name, margin) for title in (0.5, 1.0, 1.5) for name in (0.0, 0.08, 0.16) for margin in (0.0, 0.1)
)

# "Possible duplicate of #N" at or above this score (one mark per issue, its best original): the threshold
# offline/duplicate_recall.calibrate chose on the development pairs, rounded up (at most one in a hundred of the pool's
# other PT2 issues marked: 7 of 727, near-copies of an earlier report; none of the real pairs clears it,
# docs/similar.md); evaluate_similar --duplicates prints it beside the figures.
MARK_AT = 1.35

_REF = r"(?:#|https?://github\.com/pytorch/pytorch/issues/)(\d{1,9})\b"
# What a person writes about a duplicate, in its thread: the original it names (the last such sentence wins).
_NAMES_ORIGINAL = re.compile(
    r"\b(?:(?:possible\s+|a\s+|likely\s+)?(?:duplicate|dupe?)\s+of\s*:?\s*"
    r"|clos(?:e|ed|ing)\s+(?:this\s+)?(?:one\s+)?as\s+(?:a\s+)?(?:duplicate|dupe?)\s+(?:of\s+)?:?\s*"
    r"|same\s+(?:issue\s+|bug\s+|problem\s+)?as\s+"
    r"|(?:is|been)\s+tracked\s+(?:at|in)\s+)" + _REF,
    re.I,
)
# A fix named in the thread: "fixed by #123", "closed by https://github.com/pytorch/pytorch/pull/123", "fixed by the
# linked PR" (GitHub's own link, which the REST issue does not carry).
_FIX = re.compile(
    r"\b(?:fixed|closed|resolved|addressed)\s+(?:by|in|with|via)\s+"
    r"(?:#(\d{1,9})\b|https?://github\.com/pytorch/pytorch/(?:pull|commit)/([0-9a-f]{7,40}|\d{1,9})\b"
    r"|(the\s+linked\s+(?:PR|pull\s+request|commit))\b)",
    re.I,
)
# The build a fix is in, as the thread says it: "available in the 2026-09-20 nightly", "nightly 20260920", "in 2.12".
_BUILD = re.compile(
    r"\b(?:in|from)\s+(?:the\s+)?(?:(\d{4}-\d{2}-\d{2}|\d{8})\s+nightly|nightly\s+(\d{4}-?\d{2}-?\d{2}))\b"
    r"|\b(?:in|from)\s+(?:the\s+)?(?:torch|pytorch|release)?\s*(v?2\.\d{1,2}(?:\.\d{1,2})?)(?:\s+release)?\b",
    re.I,
)
# The names a report and its original use alike, whatever their other words.
_QUOTED = re.compile(r"`([A-Za-z_][\w.]{2,80})(?:\([^`\n]{0,80}\))?`")
_API = re.compile(r"\b(?:torch|F|nn|aten|prims)\.(?:[A-Za-z_]\w{0,60}\.){0,5}([A-Za-z_]\w{1,60})")
_CONFIG = re.compile(r"\bconfig\.([a-z][a-z0-9_]{2,60})\b|\b((?:TORCH|TORCHINDUCTOR|TORCHDYNAMO)_[A-Z0-9_]{2,60})\b")
_EXCEPTION = re.compile(r"\b([A-Z][A-Za-z0-9]{2,60}(?:Error|Exception|Unsupported|Failed))\b")
# Names every PT2 report uses: no evidence of which bug it is.
COMMON_NAMES = frozenset(
    """
compile torch tensor randn rand ones zeros empty arange cuda cpu device module linear forward backward manual_seed
no_grad is_available allclose float float32 float16 bfloat16 int64 nn functional dynamo inductor _dynamo _inductor
backendcompilerfailed runtimeerror assertionerror typeerror valueerror attributeerror inductorerror
torchruntimeerror internaltorchdynamoerror keyerror indexerror notimplementederror exception error
suppress_errors verbose debug reset optimize sequential parameter relu softmax item
""".split()
)


@dataclass(frozen=True)
class Report:
    """What the scoring reads of one issue: its number, term vector (similarity.terms_of), title, the specific
    names it uses, its signature key ("" none), state and, read from its thread, the original it names as a
    duplicate."""

    number: int
    vector: dict[str, float]
    title: str = ""
    names: frozenset[str] = frozenset()
    signature: str = ""
    state: str = "open"
    named_original: int | None = None
    named_by: str = ""  # who named it ("@login (member)", "GitHub: closed as a duplicate"): shown with the reasons
    state_reason: str = ""  # GitHub's, once closed


@dataclass
class Match:
    """A candidate original of a report: its number, score and the reasons it is listed (shown as they are)."""

    number: int
    score: float
    reasons: list[str] = field(default_factory=list)
    via: int | None = None  # the duplicate of it that the report resembled, when the score passed through one

    @property
    def marked(self) -> bool:
        return self.score >= MARK_AT


def _lines(text: str) -> list[str]:
    return [line[:MAX_LINE] for line in text.split("\n", MAX_LINES)[:MAX_LINES]]


@dataclass(frozen=True)
class Named:
    """An original named in a thread: its number and who said it ("@login (member)"; "GitHub: closed as a
    duplicate" when GitHub's own state is what gives the sentence its standing)."""

    number: int
    by: str
    author: str = ""  # who wrote the sentence, and GitHub's author_association of them
    association: str = ""


def has_standing(source: Source, *, closed_as_duplicate: bool = False, unknown_counts: bool = False) -> bool:
    """Whether a comment's sentence about duplicates counts: a member's, owner's or collaborator's (GitHub's
    author_association), any when GitHub closed the issue as a duplicate (its state says so), and one whose author's
    association is unknown only where the caller says so (harvested threads that never recorded it)."""
    if closed_as_duplicate or is_maintainer(source.association):
        return True
    return unknown_counts and not source.association


def _speaker(source: Source, closed_as_duplicate: bool) -> str:
    if is_maintainer(source.association):
        return f"@{source.author or '?'} ({source.association.strip().lower()})"
    if closed_as_duplicate:
        return "GitHub: closed as a duplicate"
    return f"@{source.author}" if source.author else "its thread"


def original_named(
    issue: IssueText, *, closed_as_duplicate: bool = False, unknown_counts: bool = False
) -> Named | None:
    """The issue someone with standing named as this one's original in its thread ("Duplicate of #N", "dupe of",
    "closing as duplicate of", "same as #N", "tracked at #N"; the last one said), and who, or None. "Similar to #N" is
    no such statement, nor is anything in the title or the description (a reporter's "possibly related: #N"), nor a
    stranger's comment (has_standing)."""
    found = None
    for source in sources_of(issue)[2:]:
        if not has_standing(source, closed_as_duplicate=closed_as_duplicate, unknown_counts=unknown_counts):
            continue
        for line in _lines(source.text):
            for match in _NAMES_ORIGINAL.finditer(line):
                number = int(match.group(1))
                if number != issue.number:
                    found = Named(number, _speaker(source, closed_as_duplicate), source.author, source.association)
    return found


def named_original(issue: IssueText, **standing) -> int | None:
    """original_named's number, or None."""
    found = original_named(issue, **standing)
    return found.number if found else None


def named_fix(issue: IssueText, **standing) -> str:
    """The fix the thread names ("#123", "a1b2c3d", "the linked PR"), the last one said by someone with standing,
    or ""."""
    found = ""
    for source in sources_of(issue)[2:]:
        if not has_standing(source, **standing):
            continue
        for line in _lines(source.text):
            for match in _FIX.finditer(line):
                number, commit, linked = match.groups()
                found = f"#{number}" if number else (commit[:12] if commit else " ".join(linked.split()))
    return found


def fixed_in(issue: IssueText, **standing) -> str:
    """The build the thread says a fix is in ("the 2026-09-20 nightly", "2.12"), by someone with standing, or ""."""
    found = ""
    for source in sources_of(issue)[2:]:
        if not has_standing(source, **standing):
            continue
        for line in _lines(source.text):
            for match in _BUILD.finditer(line):
                day, day2, release = match.groups()
                found = f"the {day or day2} nightly" if (day or day2) else release
    return found[:60]


def names_of(issue: IssueText) -> frozenset[str]:
    """The specific names the report uses in its title and description: quoted identifiers, torch APIs and ops,
    config flags and environment variables, exception classes; lower-case, the common ones left out."""
    found: set[str] = set()
    for source in sources_of(issue)[:2]:
        for line in _lines(source.text):
            found.update(m.rsplit(".", 1)[-1] for m in _QUOTED.findall(line))
            found.update(_API.findall(line))
            found.update(a or b for a, b in _CONFIG.findall(line))
            found.update(_EXCEPTION.findall(line))
    return frozenset(n.lower() for n in found if n.lower() not in COMMON_NAMES and len(n) > 2)


def title_vector(title: str, vocabulary: Vocabulary | None = None) -> dict[str, float]:
    """The title's words (and identifier parts), IDF-weighted, unit length."""
    vocabulary = vocabulary or shipped_vocabulary()
    counts = Counter(tokens_of(title[:500]))
    weights = {word: (1.0 + math.log(count)) * vocabulary.idf(word) for word, count in counts.items()}
    norm = math.sqrt(sum(w * w for w in weights.values())) or 1.0
    return {word: w / norm for word, w in weights.items()}


def cosine(a: dict[str, float], b: dict[str, float]) -> float:
    if len(a) > len(b):
        a, b = b, a
    return sum(w * b[t] for t, w in a.items() if t in b)


def match(
    report: Report,
    candidate: Report,
    vocabulary: Vocabulary | None = None,
    report_title: dict[str, float] | None = None,
    weights: Weights = SHIPPED,
) -> Match:
    """How likely `candidate` is the original `report` duplicates, and why. report_title: the report's title_vector,
    when the caller matches it against many candidates."""
    reasons = []
    vocabulary = vocabulary or shipped_vocabulary()
    text = cosine(report.vector, candidate.vector)
    if report_title is None:
        report_title = title_vector(report.title, vocabulary)
    titles = report_title, title_vector(candidate.title, vocabulary)
    title = cosine(*titles)
    names = sorted(n for n in report.names & candidate.names if vocabulary.df.get(_token(n), 0) <= RARE_NAME)[
        :MAX_NAMES
    ]
    if report.signature and report.signature == candidate.signature:
        reasons.append("same failure signature")
    if names:
        reasons.append("both name " + ", ".join(f"`{n}`" for n in names))
    shared_title = sorted(titles[0].keys() & titles[1].keys(), key=lambda t: -titles[0][t] * titles[1][t])[:4]
    if shared_title:
        reasons.append(f"titles share {', '.join(shared_title)} ({title:.0%})")
    reasons.append(f"similar text ({text:.0%})")
    score = text + weights.title * title + weights.name * len(names)
    return Match(candidate.number, round(score, 4), reasons)


def rank(
    report: Report, candidates: list[Report], vocabulary: Vocabulary | None = None, weights: Weights = SHIPPED
) -> list[Match]:
    """The candidates as originals of `report`, best first: one sharing its failure signature before any other (the
    issue page's rule, so the page's list and the mark agree), then by score. A candidate that says it duplicates the
    report is left out (an issue's own duplicate is never its original); one that names another original (someone
    with standing said so: Report.named_by) passes its score to it (when that one is among the candidates, or as a
    match of its own)."""
    vocabulary = vocabulary or shipped_vocabulary()
    report_title = title_vector(report.title, vocabulary)
    by_number = {c.number: c for c in candidates}
    direct: dict[int, Match] = {}  # each candidate matched once, whether as itself or as a named original

    def matched(candidate: Report) -> Match:
        if candidate.number not in direct:
            direct[candidate.number] = match(report, candidate, vocabulary, report_title, weights)
        return direct[candidate.number]

    best: dict[int, Match] = {}
    for candidate in candidates:
        if candidate.number == report.number or candidate.named_original == report.number:
            continue
        found = matched(candidate)
        original = candidate.named_original
        if original is not None and original != candidate.number:
            if original == report.number:
                continue
            found = Match(original, found.score, [_passed_through(candidate), *found.reasons], via=candidate.number)
            if original in by_number and matched(by_number[original]).score >= found.score:
                continue
        if found.number not in best or found.score > best[found.number].score:
            best[found.number] = found
    twins = {c.number for c in candidates if report.signature and c.signature == report.signature}
    ranked = sorted(best.values(), key=lambda m: (m.number not in twins, -m.score, m.number))
    if not ranked:
        return ranked
    closed = {c.number for c in candidates if c.state == "closed" and c.named_original is None}
    same = ranked[0].number in twins
    head = [m for m in ranked if m.score >= ranked[0].score - weights.margin and (m.number in twins) == same]
    head.sort(key=lambda m: (m.number not in closed, m.number))
    if head[0] is not ranked[0]:
        head[0].reasons.append(
            f"filed before #{ranked[0].number}, as similar" + (" and closed" if head[0].number in closed else "")
        )
    return head + ranked[len(head) :]


def _passed_through(candidate: Report) -> str:
    """The reason a match passed through a duplicate: who said it duplicates the original. "Closed as its duplicate"
    only where GitHub says it was closed as one: an open issue is never called closed."""
    by = f" (said by {candidate.named_by})" if candidate.named_by else ""
    if candidate.state == "closed" and candidate.state_reason == "duplicate":
        return f"#{candidate.number}, closed as its duplicate{by}, is similar:"
    state = "open" if candidate.state != "closed" else "closed"
    return f"#{candidate.number} ({state}), named its duplicate{by}, is similar:"


def best_original(
    report: Report,
    candidates: list[Report],
    vocabulary: Vocabulary | None = None,
    threshold: float = MARK_AT,
    weights: Weights = SHIPPED,
) -> Match | None:
    """The possible duplicate mark: the best original when it clears `threshold` (the calibrated one in use:
    triage/duplicates.mark_threshold), else None."""
    ranked = rank(report, candidates, vocabulary, weights)
    return ranked[0] if ranked and ranked[0].score >= threshold else None
