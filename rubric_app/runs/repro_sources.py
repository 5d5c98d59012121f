"""Whose repro counts (issue #35): the repro the dashboard runs by default, automatically or in the bisection form,
is the reporter's or a maintainer's (GitHub's author_association MEMBER, OWNER or COLLABORATOR) or one of the
automation's accounts' (rubric_app/vocabulary.py). Another commenter's is offered on the issue page for a triager to
choose, never chosen automatically, and its runs are never enough on their own for "may be fixed" or a regression
(build_checks.py): the best-scoring code block no longer wins whoever posted it.

A run records whose post its code is (BisectionRun.repro_author) and whether it counts (repro_counts): the code as
posted or as converted to the harness convention (bisection.extract) identifies the post; code that matches no post
was typed by the triager who started the run, and counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings

from rubric_app.bisection import extract
from rubric_app.bisection.builds import repro_hash
from rubric_app.models import Comment, Issue
from rubric_app.vocabulary import repro_counts


@dataclass(frozen=True)
class PostedRepro:
    """The best repro of one text of the issue (its body or a comment) and who posted it."""

    repro: extract.Repro
    author: str
    association: str
    source: str  # "body" or "comment:<github id>" (the issue page's anchor)
    counts: bool  # the reporter's, a maintainer's or the automation's: run by default, may conclude
    by_reporter: bool  # the reporter's own (the version they report is where they saw it fail)

    @property
    def hashes(self) -> frozenset[str]:
        """The repro's identity as run: the code the harness gets (converted) and the block as posted."""
        return frozenset(repro_hash(code) for code in (self.repro.code, self.repro.original) if code)


def posted_repros(issue: Issue, comments: list[Comment] | None = None) -> list[PostedRepro]:
    """The best repro of each text of the issue that has one, body first, then comments in thread order.

    comments: the issue's comments when the caller has them (the issue page's list); else one query."""
    comments = list(issue.comments.all()) if comments is None else comments
    texts = [issue.body] + [c.body for c in comments]
    found = []
    for repro in extract.repros_by_text(texts):
        comment = comments[repro.source - 1] if repro.source else None
        author = comment.author if comment else issue.author
        association = comment.author_association if comment else ""
        reporter = bool(author) and author.lower() == (issue.author or "").lower()
        found.append(
            PostedRepro(
                repro=repro,
                author=author,
                association=association,
                source=f"comment:{comment.github_id}" if comment else "body",
                counts=repro.source == 0
                or repro_counts(
                    author=author,
                    association=association,
                    reporter=issue.author,
                    accounts=settings.AUTOMATION_ACCOUNTS,
                ),
                by_reporter=repro.source == 0 or reporter,
            )
        )
    return found


def default_repro(posted: list[PostedRepro]) -> PostedRepro | None:
    """The repro run by default: the best-scoring one that counts (ties: the earliest), or None."""
    best = None
    for item in posted:
        if item.counts and (best is None or item.repro.score > best.repro.score):
            best = item
    return best


def offered_repros(posted: list[PostedRepro]) -> list[PostedRepro]:
    """Other commenters' repros: offered to a triager, never run without one choosing it."""
    return [item for item in posted if not item.counts]


def standing(posted: list[PostedRepro], code: str) -> tuple[str, bool]:
    """(whose post `code` is, whether it counts) for a run of `code`: a counting post's when any counting post has
    this code; another commenter's (not counting) when only theirs has; ("", True) for code no one posted (the
    triager who starts the run typed or edited it)."""
    wanted = repro_hash(code)
    matching = [item for item in posted if wanted in item.hashes]
    counting = [item for item in matching if item.counts]
    if counting:
        return counting[0].author, True
    if matching:
        return matching[0].author, False
    return "", True
