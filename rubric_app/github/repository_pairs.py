"""The repository's own duplicate pairs, read by the history sync: what the weekly training calibrates the
possible-duplicate mark on (triage/mark_calibration.py), as store_page reads them.

A pair is known three ways, each kept with who said it: GitHub closed the issue as a duplicate (state_reason
"duplicate") and its thread names the original; someone marked it a duplicate on GitHub (a marked_as_duplicate timeline
event naming the original); a member, owner or collaborator wrote "Duplicate of #N" in its thread. A stranger's
sentence is none of these (rubric/duplicates.has_standing): it moves no mark and calibrates nothing.
"""

from __future__ import annotations

from rubric_app.github.data import DuplicateEventData
from rubric_app.models import Comment, DuplicatePair, Issue
from rubric_app.rubric.likeness import duplicates


def record(issue_ids: list[int], events: dict[int, list[DuplicateEventData]] | None = None) -> int:
    """Record the pairs these issues are (events: {number: its timeline's marked_as_duplicate events}, for those
    read); returns how many are new. Three queries (the issues, their comments, the insert), none without issues."""
    issues = list(
        Issue.objects.filter(pk__in=issue_ids).only("number", "title", "body", "author", "state", "state_reason")
    )
    if not issues:
        return 0
    threads: dict[int, list[Comment]] = {issue.pk: [] for issue in issues}
    for comment in Comment.objects.filter(issue_id__in=threads).order_by("created_at", "github_id"):
        threads[comment.issue_id].append(comment)
    rows = []
    for issue in issues:
        said = {c.author: c for c in threads[issue.pk]}
        text = issue.thread_text(threads[issue.pk])
        member = duplicates.original_named(text)
        if member is not None:
            rows.append(_pair(issue, member, DuplicatePair.Source.COMMENT, said))
        if issue.state == Issue.State.CLOSED and issue.state_reason == "duplicate":
            stated = duplicates.original_named(text, closed_as_duplicate=True)
            if stated is not None:
                rows.append(_pair(issue, stated, DuplicatePair.Source.STATE, said))
        for event in (events or {}).get(issue.number, ()):
            if event.original != issue.number:
                rows.append(
                    DuplicatePair(
                        duplicate=issue,
                        original=event.original,
                        source=DuplicatePair.Source.EVENT,
                        said_by=event.actor,
                        said_at=event.created_at,
                    )
                )
    before = DuplicatePair.objects.filter(duplicate__in=issues).count()
    DuplicatePair.objects.bulk_create(rows, ignore_conflicts=True)
    return DuplicatePair.objects.filter(duplicate__in=issues).count() - before


def _pair(issue: Issue, named: duplicates.Named, source: str, said: dict[str, Comment]) -> DuplicatePair:
    comment = said.get(named.author)
    return DuplicatePair(
        duplicate=issue,
        original=named.number,
        source=source,
        said_by=named.author,
        association=named.association,
        said_at=comment.created_at if comment else None,
    )
