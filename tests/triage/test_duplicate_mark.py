"""The possible-duplicate mark (issue 52): only standing moves it (a stranger's "Duplicate of #N" does not, a member's
does and is named), the issue page's similar issues and the mark are one ranking, and the demo's #170162 is marked as
a duplicate of #170161 with what #170161's state means and a reply that asks to try the build with the fix."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from rubric_app.models import Comment, DuplicatePair, Issue
from rubric_app.rubric.offline import duplicate_recall as offline
from rubric_app.rubric.offline.evaluation import issue_from_record, read_jsonl
from rubric_app.triage import followups, similar
from tests.factories import make_issue
from tests.helpers import preview_duplicate

DATA = Path(__file__).resolve().parents[1] / "data"


def _record(number: int) -> dict:
    with open(DATA / "pt2_train.jsonl", encoding="utf-8") as fh:
        found = {int(r["number"]): r for r in read_jsonl(fh)}
    with open(DATA / "pt2_dev.jsonl", encoding="utf-8") as fh:
        found.update({int(r["number"]): r for r in read_jsonl(fh)})
    data = json.loads(offline.PAIRS_FILE.read_text(encoding="utf-8"))
    found.update({int(o["number"]): o for o in data["others"] if int(o["number"]) not in found})
    return found[number]


@pytest.fixture
def twins(db):
    """#182012 (closed, in the mirror as the history brings it) and #182765, filed again nearly word for word, in the
    queue; and #182000, an outsider's unrelated open issue filed before both."""
    first = issue_from_record(_record(182012), use_labels=False)
    original = make_issue(182012, title=first.title, body=first.body, state="closed", in_queue=False)
    outsider = make_issue(182000, title="my tool's export is slow", body="please look at my project", author="outsider")
    similar.reindex(Issue.objects.filter(pk__in=[original.pk, outsider.pk]))
    again = offline.arrival(_record(182765))
    report = make_issue(182765, title=again.title, body=again.body)
    followups.issues_changed([report.pk], "sync")
    return original, report, outsider


def _says(original: Issue, body: str, author: str, association: str, github_id: int) -> None:
    Comment.objects.create(
        issue=original, github_id=github_id, body=body, author=author, author_association=association
    )
    similar.reindex(Issue.objects.filter(pk=original.pk))
    followups.issues_changed(list(Issue.objects.in_queue().values_list("pk", flat=True)), "sync")


def test_it_lets_no_strangers_duplicate_of_move_the_mark_but_a_members(twins):
    original, report, outsider = twins
    assert Issue.objects.get(pk=report.pk).possible_duplicate_id == original.pk

    # The outsider says the legitimate original duplicates their own issue: nothing moves.
    _says(original, "Duplicate of #182000", "outsider", "NONE", 1)
    _says(report, "+1", "outsider", "NONE", 2)
    marked = Issue.objects.get(pk=report.pk)
    assert marked.possible_duplicate_id == original.pk
    assert not any("182000" in r or "outsider" in r for r in marked.possible_duplicate_reasons)
    assert Issue.objects.get(pk=original.pk).named_original is None

    # A member says it: the mark follows to the original they named, and the evidence names them.
    _says(original, "Duplicate of #182000", "wy-maintainer", "MEMBER", 3)
    marked = Issue.objects.get(pk=report.pk)
    assert marked.possible_duplicate_id == outsider.pk
    assert marked.possible_duplicate_reasons[0] == (
        "#182012 (closed), named its duplicate (said by @wy-maintainer (member)), is similar:"
    )
    # It was not closed as a duplicate on GitHub (state_reason), so nothing calls it that; the open one is "open".
    assert not any("closed as its duplicate" in r for r in marked.possible_duplicate_reasons)
    assert outsider.state_as_original == "open"


def test_it_follows_a_duplicate_marked_on_github_to_its_original_and_says_who_marked_it(twins):
    """#182012 marked a duplicate of #182000 on GitHub (the history recorded the timeline's event; no comment): GitHub's
    state says it, so the mark follows to #182000 and names who marked it."""
    original, report, outsider = twins
    Issue.objects.filter(pk=original.pk).update(state_reason="duplicate")
    DuplicatePair.objects.create(duplicate=original, original=182000, source="event", said_by="akowalczyk-inductor")

    followups.issues_changed([report.pk], "sync")

    marked = Issue.objects.get(pk=report.pk)
    assert marked.possible_duplicate_id == outsider.pk
    assert marked.possible_duplicate_reasons[0] == (
        "#182012, closed as its duplicate (said by @akowalczyk-inductor (marked as a duplicate)), is similar:"
    )


def test_it_lists_the_marks_original_first_on_the_page_with_the_marks_reasons(client, triager, twins):
    original, report, _outsider = twins
    marked = Issue.objects.get(pk=report.pk)
    client.force_login(triager)

    page = client.get(reverse("rubric_app:issue", args=[report.number])).content.decode()

    listed = page[page.index('<ul class="similar">') :]
    first = re.search(r'data-similar="(\d+)"', listed).group(1)
    reason = html.unescape(re.search(r"<span data-reason>(.*?)</span>", listed, re.S).group(1))
    assert int(first) == marked.possible_duplicate.number == original.number
    assert reason == "; ".join(marked.possible_duplicate_reasons[:3])
    assert [n.issue.number for n in similar.neighbours(marked)][0] == original.number


@pytest.mark.django_db
def test_it_marks_170162_a_duplicate_of_the_fixed_170161_and_asks_to_try_the_nightly(client, triager):
    call_command("load_demo")
    report = Issue.objects.get(number=170162)
    original = report.possible_duplicate
    assert original is not None and original.number == 170161

    assert original.state_as_original == "closed as fixed on 2026-09-18 by the linked PR (in the 2026-09-20 nightly)"
    client.force_login(triager)
    page = client.get(reverse("rubric_app:issue", args=[170162])).content.decode()
    assert "(closed as fixed on 2026-09-18 by the linked PR (in the 2026-09-20 nightly))" in html.unescape(page)

    preview = html.unescape(preview_duplicate(client, 170162, 170161))
    assert 'data-reply="duplicate_of_fixed"' in preview and "Duplicate of #170161" in preview
    assert "Could you try the 2026-09-20 nightly" in preview and "follow #170161" not in preview
    provenance = preview[preview.index("data-duplicate-provenance") :]
    assert "#170161 is closed as fixed on 2026-09-18" in provenance and "titles share" in provenance
