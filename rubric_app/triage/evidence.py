"""Evidence across issues and runs, for the refresh and the pages (rubric/engine/settled.py reads it, this loads it).

- shared_evidence(): issues sharing a failure signature take their components from the same evidence: what
  settles a component on one open queue issue (a backend result or a diagnosis in its thread, a verdict) goes
  into the others' suggestions (rubric/weighing.shared_findings). triage/suggestions._store calls it for a batch,
  then refreshes the group's other open issues.
- group_components(): the group page's "where they disagree": each member's leading component and its evidence.
- run_notes(): the bisection panel's "the reporter says X, this run saw Y" for a finished run.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Prefetch

from rubric_app.models import BisectionRun, Comment, Issue, Suggestion
from rubric_app.rubric.engine.settled import run_notes as notes_of
from rubric_app.rubric.engine.settled import settled, shared_among
from rubric_app.rubric.reading.types import IssueText, SharedEvidence
from rubric_app.vocabulary import CORE_COMPONENTS


def _open(issue: Issue) -> bool:
    return issue.in_queue and issue.state == Issue.State.OPEN


def shared_evidence(
    issues: list[Issue], texts: list[IssueText]
) -> tuple[dict[int, tuple[SharedEvidence, ...]], list[Issue]]:
    """({issue id: what the other open queue issues sharing its failure signature settle}, those other issues
    outside `issues`, their text's relations prefetched, to refresh in turn). Signatures as similar.index left
    them on `issues`. One query for the other issues (and its prefetches when there are any), whatever the batch."""
    keys = {issue.signature for issue in issues if issue.signature and _open(issue)}
    if not keys:
        return {}, []
    finished = BisectionRun.objects.filter(status=BisectionRun.Status.DONE).order_by("-created_at")
    others = list(
        Issue.objects.in_queue()
        .filter(signature__in=keys)
        .exclude(pk__in=[issue.pk for issue in issues])
        .order_by("pk")
        .prefetch_related("labels", "comments", Prefetch("bisection_runs", queryset=finished, to_attr="finished_runs"))
    )
    members: dict[str, list[tuple[Issue, IssueText | None]]] = defaultdict(list)
    for issue, text in [*zip(issues, texts), *((other, None) for other in others)]:
        if issue.signature in keys and _open(issue):
            members[issue.signature].append((issue, text))
    shared: dict[int, tuple[SharedEvidence, ...]] = {}
    for group in members.values():
        if len(group) < 2:
            continue
        among = shared_among({issue.number: settled(text or issue.as_issue_text()) for issue, text in group})
        shared.update({issue.pk: among[issue.number] for issue, _text in group if among[issue.number]})
    return shared, others


@dataclass
class MemberComponent:
    """A group member's leading component suggestion (or none) as the group page shows it."""

    issue: Issue
    suggestion: Suggestion | None


def group_components(members: list[Issue]) -> list[MemberComponent]:
    """Each member's leading core component (its pre-selected one first, then the most confident), read from the
    prefetched suggestions; [] when they all lead with the same one (or none has one): nothing to show."""
    rows = []
    for issue in members:
        core = [s for s in issue.suggestions.all() if s.kind == Suggestion.Kind.ADD and s.label in CORE_COMPONENTS]
        rows.append(MemberComponent(issue, max(core, key=lambda s: (s.preselected, s.confidence), default=None)))
    leading = {row.suggestion.label for row in rows if row.suggestion}
    return rows if len(leading) > 1 else []


def run_notes(run: BisectionRun | None, issue: Issue, comments: list[Comment] | None = None) -> list[str]:
    """Where a finished run and the issue's thread differ (rubric/settled.run_notes); [] for an unfinished or
    failed run. comments: the page's list; read here when not given (one query)."""
    if run is None or run.status != BisectionRun.Status.DONE or not run.results:
        return []
    comments = list(issue.comments.all()) if comments is None else comments
    return notes_of(issue.thread_text(comments), run.results, run.verdict_labels or [], run.pk)
