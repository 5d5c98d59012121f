"""The queue's search box: issue references, the query language and its synonym table.

Pure Python (no Django): `parse` turns what a triager typed into clauses, `issue_number`
recognises "#170029", "170029" or an issue URL, and `fts5_match` writes a clause list as an
SQLite FTS5 MATCH expression. IssueQuerySet.search runs the clauses on the database's own
full-text search (PostgreSQL tsvector, SQLite FTS5), both stemming English.

The language is a subset of web-search syntax that both databases can run: words (all must
match), "quoted phrases", `-word` to exclude, and `or` between two terms. Everything else a
person may type (FTS5 or tsquery operators, `*`, `NEAR`, `:`, brackets, stray quotes) is
plain text: it is split into words and quoted, never passed on as syntax.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Words and phrases stemming cannot connect: searching any member also searches the others.
# Keep the members specific: PostgreSQL drops stop words, so a phrase like "out of memory"
# would shrink to "memory" there and match every memory-usage report.
SYNONYMS: tuple[tuple[str, ...], ...] = (
    ("segfault", "segmentation fault", "sigsegv", "seg fault"),
    (
        "oom",
        "outofmemoryerror",
        "cuda out of memory",
        "error out of memory",
        "ran out of memory",
        "runs out of memory",
        "cannot allocate memory",
    ),
    ("nan", "nans", "isnan"),
    ("recompile", "recompilation", "recompiling", "re compile", "re compilation"),
    ("ima", "illegal memory access", "cudaerrorillegaladdress"),
)

MAX_TERMS = 12  # a search box, not a document: longer input is cut, each term costs a query part

_WORD = re.compile(r"\w+")
_TOKEN = re.compile(r'(-?)"([^"]*)"?|(\S+)')
_NUMBER = re.compile(r"#?(\d{1,9})")
_URL = re.compile(r"(?:https?://)?(?:www\.)?github\.com/[\w.-]+/[\w.-]+/(?:issues|pull)/(\d{1,9})\b\S*", re.I)


def _normal(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


_EXPANSIONS = {_normal(member): tuple(_normal(m) for m in group) for group in SYNONYMS for member in group}


@dataclass(frozen=True)
class Clause:
    """One thing the issue must (or, negated, must not) contain: any of `phrases`.

    Each phrase is lower-case words separated by single spaces; a one-word phrase is a word.
    """

    phrases: tuple[str, ...]
    negated: bool = False


def issue_number(text: str) -> int | None:
    """The issue number when the whole of `text` names one ("#170029", "170029", an issue URL), else None."""
    text = text.strip()
    match = _NUMBER.fullmatch(text) or _URL.fullmatch(text)
    return int(match.group(1)) if match else None


def parse(text: str) -> list[Clause]:
    """The clauses of a search, synonyms expanded; [] when `text` holds no word.

    Never raises: input that is not the language's syntax is read as words.
    """
    clauses: list[Clause] = []
    join_next = False
    for minus, quoted, bare in _TOKEN.findall(text)[: MAX_TERMS * 2]:
        if bare and bare.lower() == "or" and clauses and not clauses[-1].negated:
            join_next = True
            continue
        negated = bool(minus) or (bare.startswith("-") and len(bare) > 1)
        phrase = _normal(quoted if not bare else bare)
        if not phrase:
            continue
        phrases = _EXPANSIONS.get(phrase, (phrase,))
        if join_next and not negated:
            last = clauses.pop()
            clauses.append(Clause(tuple(dict.fromkeys(last.phrases + phrases))))
        else:
            clauses.append(Clause(phrases, negated))
        join_next = False
        if len(clauses) >= MAX_TERMS:
            break
    return clauses


def fts5_match(clauses: list[Clause]) -> str:
    """The clauses as an FTS5 MATCH expression; "" when nothing is required (FTS5 needs a positive term).

    Every phrase is double-quoted and made of \\w characters only, so no input becomes FTS5 syntax.
    """

    def any_of(clause: Clause) -> str:
        return "(" + " OR ".join(f'"{phrase}"' for phrase in clause.phrases) + ")"

    required = [any_of(c) for c in clauses if not c.negated]
    if not required:
        return ""
    return " AND ".join(required) + "".join(f" NOT {any_of(c)}" for c in clauses if c.negated)
