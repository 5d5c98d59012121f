"""The demo walked from the queue (issue 53): every demo issue `a` can decide is decided from its queue row, the Hold's
judgement included, without the issue page; and the walk's figures (keys per issue, issues that needed the issue page).

The figures count keys, not seconds, from what the rows and their previews offer (HTTP, as the pages answer):
- `j a Enter` (3) where the row's preview applies as it is;
- where the Hold asks for a judgement (G6: R11, R12, G9), one more key in the row (`r`, or the hold's box) when the
  row's preview carries the judgement fields, else the issue page: `j o a r Enter` (5) and a page load;
- where `a` is refused for want of a component (G4): `j a l <word> Enter Enter` (6), the row's picker;
- a row with no Accept at all: the issue page (`j o`, then as there).
"""

from __future__ import annotations

import html
import re

import pytest
from django.core.management import call_command
from django.urls import reverse

from rubric_app.github.sync import sync_queue
from rubric_app.models import Issue

pytestmark = pytest.mark.django_db

ROW = re.compile(r'<tr class="issue-row" data-issue-row="(\d+)".*?</tr>', re.S)


def _rows(client) -> dict[int, str]:
    """Every queue row of the lane of all, by issue number, across its pages."""
    rows, page = {}, 1
    while True:
        body = client.get(reverse("rubric_app:queue"), {"lane": "all", "page": page}).content.decode()
        found = {int(m.group(1)): m.group(0) for m in ROW.finditer(body)}
        if not found or set(found) <= set(rows):
            return rows
        rows.update(found)
        page += 1


def walk(client) -> dict:
    """Each demo queue issue's keys and whether it needed the issue page, from what its row offers."""
    figures = {"issues": 0, "keys": 0, "issue page": [], "held": 0, "refused": 0}
    for number, row in sorted(_rows(client).items()):
        figures["issues"] += 1
        if "data-accept" not in row:
            figures["issue page"].append(number)
            figures["keys"] += 5
            continue
        url = reverse("rubric_app:issue_preview", args=[number])
        answer = html.unescape(
            client.post(url, {"accept": "1", "in_queue": "1"}, HTTP_HX_REQUEST="true").content.decode()
        )
        if "data-form-errors" in answer:
            figures["refused"] += 1
            figures["keys"] += 6
        elif "data-decide>" in answer:  # the Hold: a judgement first
            figures["held"] += 1
            if "data-queue-judgement" in answer and 'name="review"' in answer:
                figures["keys"] += 4
            else:
                figures["issue page"].append(number)
                figures["keys"] += 5
        else:
            figures["keys"] += 3
    return figures


def test_it_decides_every_demo_issue_from_its_queue_row(client, demo_server, triager):
    call_command("load_demo")
    sync_queue(full=True)
    client.force_login(triager)
    figures = walk(client)
    print(
        f"demo walk from the queue: {figures['issues']} issues, {figures['keys'] / figures['issues']:.2f} keys an "
        f"issue, {len(figures['issue page'])} needed the issue page {figures['issue page']}, "
        f"{figures['held']} held, {figures['refused']} refused (G4)"
    )
    assert figures["issues"] == Issue.objects.in_queue().count() > 40
    assert figures["issue page"] == []
