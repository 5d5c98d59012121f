"""The PT2 triage rubric (../RUBRIC.md in the product docs) as pure Python.

No Django imports here: the engine takes plain data (IssueText) and returns an
Assessment. The Django side (rubric_app/triage/suggestions.py) maps rows to and from it.
"""

from .engine import evaluate
from .types import (
    Assessment,
    Avoided,
    BisectionEvidence,
    ChecklistItem,
    CommentText,
    IssueText,
    Neighbour,
    Suggested,
)

__all__ = [
    "Assessment",
    "Avoided",
    "BisectionEvidence",
    "ChecklistItem",
    "CommentText",
    "IssueText",
    "Neighbour",
    "Suggested",
    "evaluate",
]
