"""Placeholder engine: the rubric engine issue replaces this with the full rule set."""

from __future__ import annotations

from .types import Assessment, IssueText, Suggested


def evaluate(issue: IssueText, catalog: frozenset[str] | None = None) -> Assessment:
    """Return the Assessment of one issue. catalog: the label names that may be suggested (G7)."""
    assessment = Assessment()
    if not any(label.startswith("module:") for label in issue.labels):
        assessment.add.append(Suggested("module: compile ux", "G4", 0.2, reason="fallback module label"))
    return assessment
