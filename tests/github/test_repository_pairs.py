"""The repository's own duplicate pairs (issue 52): the history sync, over HTTP to the fake GitHub (PyGithub and the
client as in production, nothing monkeypatched), records an issue GitHub closed as a duplicate, a marked_as_duplicate
timeline event and a member's "Duplicate of #N" as pairs, with who said each; a stranger's sentence is none."""

from __future__ import annotations

import pytest

from rubric_app.github import history
from rubric_app.models import DuplicatePair, Issue


@pytest.mark.django_db
def test_it_records_the_repositorys_duplicates_with_who_said_them_and_not_a_strangers(fake_github):
    fake_github.add_issue(500, title="inductor drops the gradient of diagonal_scatter", state="closed")
    fake_github.add_issue(501, title="the original of the event", state="closed")
    # GitHub closed it as a duplicate: the thread's sentence names the original, whoever wrote it.
    fake_github.add_issue(
        510,
        title="diagonal_scatter gradient is zero",
        comments=[{"body": "Duplicate of #500", "user": "a-contributor", "association": "CONTRIBUTOR"}],
        state="closed",
        state_reason="duplicate",
    )
    # Marked a duplicate on GitHub: the timeline's event names the original and who marked it.
    fake_github.add_issue(511, title="another report")
    fake_github.mark_duplicate(511, 501, actor="akowalczyk-inductor")
    # A member's comment on an open issue.
    fake_github.add_issue(
        512,
        title="open report",
        comments=[{"body": "Duplicate of #500", "user": "wy-maintainer", "association": "MEMBER"}],
    )
    # A stranger's comment on an open issue: no pair.
    fake_github.add_issue(
        513,
        title="open report, a stranger's comment",
        comments=[{"body": "Duplicate of #512", "user": "outsider", "association": "NONE"}],
    )

    history.sync_history(out=lambda line: None)

    pairs = {
        (p.duplicate.number, p.original, p.source, p.said_by, p.association)
        for p in DuplicatePair.objects.select_related("duplicate")
    }
    assert pairs == {
        (510, 500, "state", "a-contributor", "CONTRIBUTOR"),
        (511, 501, "event", "akowalczyk-inductor", ""),
        (512, 500, "comment", "wy-maintainer", "MEMBER"),
    }
    assert Issue.objects.get(number=511).state_reason == "duplicate"
    assert not DuplicatePair.objects.filter(duplicate__number=513).exists()

    # A second run records nothing twice.
    fake_github.add_comment(512, "Duplicate of #500", user="wy-maintainer", association="MEMBER")
    history.sync_history(out=lambda line: None)
    assert DuplicatePair.objects.count() == 3
