"""How rules read an issue: Finding (one conclusion of one rule), Facts (the issue as rules read it), the registry.

Rules live in rules/general.py (G, R1-R5), rules/domain.py (R6-R10), rules/review.py (R11, R12), rules/agents.py and
rules/skill_additions.py; each registers itself with @rule. The labels they name are rubric_app/vocabulary.py's.
"""

from __future__ import annotations

import re
import re._constants as sre_constants
import re._parser as sre_parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cache

from rubric_app.rubric.reading.text import CodeFacts, Source
from rubric_app.rubric.reading.types import IssueText
from rubric_app.vocabulary import Kind

# G8: a finding at or under WEAK is a guess from a keyword (often a traceback's vocabulary, which
# says where it failed, not why): the checklist asks a human to confirm it.
WEAK = 0.5

I = re.I


@dataclass(frozen=True)
class Finding:
    """One conclusion of one rule.

    kind: add (a component or domain label, weighed by the engine), avoid, route
    (an oncall: label to hand off or redirect to), flag (a status label), check
    (a checklist item; `state` is satisfied | violated | needs_human | not_applicable).
    """

    rule_id: str
    kind: str
    label: str = ""
    weight: float = 0.0
    evidence: str = ""
    source: str = ""
    reason: str = ""
    state: str = ""
    origin: str = "rule"  # rule | model | bisection: what the Suggested's `source` will say
    # False for a reading newer than the shipped labeler, which it was never trained on: kept out of its features and
    # of its calibration (engine.Reading.features, fitting), so the model the files train stays the shipped one.
    learned: bool = True


@cache
def needles(pattern: re.Pattern[str]) -> tuple[str, ...] | None:
    """Lowercase literals of which any match must contain at least one; None when the pattern has
    an alternative without one. A cheap `in` test on them skips most regex searches (the hot path);
    the locator below then skips most of the rest."""
    try:
        tree = sre_parse.parse(pattern.pattern.lower())
    except re.error:
        return None
    found = _alternatives_needles(list(tree))
    return tuple(found) if found else None


def _alternatives_needles(seq: list) -> list[str] | None:
    """Needles of a parsed sequence: its longest literal run, else a required group's alternatives."""
    if len(seq) == 1 and seq[0][0] is sre_constants.BRANCH:
        found: list[str] = []
        for branch in seq[0][1][1]:
            sub = _alternatives_needles(list(branch))
            if sub is None:
                return None
            found += sub
        return found
    best = run = ""
    for op, arg in seq:
        if op is sre_constants.LITERAL:
            run += chr(arg)
        else:
            best, run = max(best, run, key=len), ""
    best = max(best, run, key=len)
    # Candidates: the longest literal run, or the needles of any group that must match (any of its
    # alternatives will do). The one whose shortest needle is longest filters best.
    candidates = [[best]] if len(best) >= 3 else []
    for op, arg in seq:
        sub = (
            _alternatives_needles(list(arg[3]))
            if op is sre_constants.SUBPATTERN
            else _alternatives_needles([(op, arg)])
            if op is sre_constants.BRANCH
            else None
        )
        if sub:
            candidates.append(sub)
    return max(candidates, key=lambda c: min(map(len, c))) if candidates else None


@cache
def locator(pattern: re.Pattern[str]) -> re.Pattern[str] | None:
    """A looser, much faster twin of `pattern` for the folded lowercase text: any text the pattern
    matches, the locator matches too, so a locator miss skips the real search (the engine's hot path).

    Lowercase and case-sensitive, without `\\b`: Python's re then scans for the first characters in C
    instead of trying every alternative at every position (about 10x faster on issue text). None when
    lowering would change the pattern's meaning (an uppercase escape such as \\S or \\B).
    """
    source = pattern.pattern
    if re.search(r"\\[A-Z]", source):
        return None
    try:
        return re.compile(source.lower().replace("\\b", ""))
    except re.error:
        return None


# The four non-ASCII letters re.IGNORECASE matches to ASCII ones (see the re docs): folded the same
# way before the `in` tests, so the prefilter never skips text the pattern would match.
_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"})


def _contains_any(text: str, required: tuple[str, ...]) -> bool:
    for needle in required:
        if needle in text:
            return True
    return False


@dataclass
class Facts:
    """The issue as the rules see it: capped sources, repro-code facts, current labels."""

    issue: IssueText
    sources: list[Source]
    code: CodeFacts
    labels: frozenset[str]
    _lowered: list[str] = field(default_factory=list, repr=False)
    _found: dict[tuple[int, str], tuple[str, str] | None] = field(default_factory=dict, repr=False)
    _lowered_whole: tuple[str, str, str] = ("", "", "")
    # The thread reader's facts (thread.py), read once per issue by thread_facts() in rules/general.py.
    thread: list | None = field(default=None, repr=False)
    # The backend results the thread reports (thread.backend_results), read once per issue by
    # backend_reports() in rules/general.py.
    backends: list | None = field(default=None, repr=False)
    automation: object = field(default=None, repr=False)  # automation.Automation, read once (rules/agents.py)
    # The environment reports cut out of the body and comments (text.split_environment): only rules that ask
    # about the reporter's setup read them (find_environment).
    environment: list[Source] = field(default_factory=list, repr=False)

    def find(self, pattern: re.Pattern[str], where: str = "all") -> tuple[str, str] | None:
        """First match as (exact matched text, source name), looking in title, body, then comments.

        where: "all", "title", or "text" (body and comments, not the title). Memoized per issue:
        several rules ask the same question.
        """
        key = (id(pattern), where)
        if key not in self._found:
            self._found[key] = self._search(pattern, where)
        return self._found[key]

    def _search(self, pattern: re.Pattern[str], where: str) -> tuple[str, str] | None:
        if not self._lowered:
            self._lowered = [s.text.translate(_FOLD).lower() for s in self.sources]
            # title, then body and comments as one string: one `in` test rules out every source at once.
            text = "\n".join(self._lowered[1:])
            self._lowered_whole = (self._lowered[0], text, self._lowered[0] + "\n" + text)
        required, loose = needles(pattern), locator(pattern)
        if required is not None:
            scope = self._lowered_whole[{"title": 0, "text": 1}.get(where, 2)]
            if not _contains_any(scope, required):
                return None
        for source, lowered in zip(self.sources, self._lowered):
            if where == "title" and source.name != "title":
                continue
            if where == "text" and source.name == "title":
                continue
            if required is not None and not _contains_any(lowered, required):
                continue
            if loose is not None and not loose.search(lowered):
                continue
            match = pattern.search(source.text)
            if match and match.group(0):
                return match.group(0), source.name
        return None

    def has(self, pattern: re.Pattern[str], where: str = "all") -> bool:
        return self.find(pattern, where) is not None

    def find_environment(self, pattern: re.Pattern[str]) -> tuple[str, str] | None:
        """First match in the environment reports, as (matched text, the source it was cut from)."""
        for source in self.environment:
            match = pattern.search(source.text)
            if match and match.group(0):
                return match.group(0), source.name
        return None


RuleFn = Callable[[Facts], Iterable[Finding]]
RULES: list[tuple[str, RuleFn]] = []


def rule(rule_id: str) -> Callable[[RuleFn], RuleFn]:
    def register(fn: RuleFn) -> RuleFn:
        RULES.append((rule_id, fn))
        return fn

    return register


def _add(f: Facts, rule_id: str, label: str, pattern: re.Pattern[str], title_w: float, text_w: float, reason: str):
    """An ADD finding from the first match of pattern: title_w when it is in the title, text_w elsewhere."""
    hit = f.find(pattern, "title")
    if hit:
        return [Finding(rule_id, Kind.ADD, label, title_w, hit[0], hit[1], reason)]
    hit = f.find(pattern, "text")
    if hit and text_w > 0:
        return [Finding(rule_id, Kind.ADD, label, text_w, hit[0], hit[1], reason)]
    return []
