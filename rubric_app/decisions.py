"""A triager's decision: plan it, validate it, queue it, apply it to GitHub, audit it.

(Contract laid by the foundation; the GitHub issue implements it.)
"""

from __future__ import annotations


def plan_changes(issue, *, chosen: list[str], route: str, review: bool):
    """Return (add, remove): exactly what GitHub will see for the triager's choices."""
    raise NotImplementedError


def request_decision(*, issue, user, add, remove, labels_seen, redirect="", meeting_decision="", close=False, meeting=None):
    """Validate and record a decision, then enqueue its application; returns the TriageDecision."""
    raise NotImplementedError


def apply_decision(decision_id: int):
    """Apply a pending decision to GitHub label by label, after a conflict check."""
    raise NotImplementedError
