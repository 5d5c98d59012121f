"""Every demo issue, loaded as `make run` loads it (the demo issues, then a sync from the demo GitHub): what `a`
previews, on the issue page and from the queue row, adds exactly what the issue page shows pre-selected (issue 43).
"""

from __future__ import annotations

import html
import re

import pytest
from django.core.management import call_command
from django.urls import reverse

from rubric_app.github.sync import sync_queue
from rubric_app.models import Issue
from rubric_app.vocabulary import PT2_ONCALL, TRIAGE_REVIEW, TRIAGED, Route, is_module

pytestmark = pytest.mark.django_db

PRESELECTED_ROW = re.compile(
    r'<tr class="suggestion preselected"[^>]*>.*?<span class="chip suggested"[^>]*>([^<]+)</span>', re.S
)


def shown_preselected(page: str) -> set[str]:
    """The labels the issue page shows pre-selected (its ticked suggestion rows)."""
    return {html.unescape(name) for name in PRESELECTED_ROW.findall(page)}


def previewed(answer: str) -> dict:
    """What a preview fragment says GitHub will see, or the refusal it shows instead."""
    text = html.unescape(answer)
    return {
        "add": set(re.findall(r'<li class="add">\+ ([^<]+)</li>', text)),
        "reply": re.findall(r'data-reply="([^"]+)"', text),
        "transfer": re.findall(r'data-transfer="([^"]+)"', text),
        "decide": re.findall(r"data-decide>Not triaged yet: ([^<]+)</p>", text),
        "refused": re.sub(r"\s+", " ", " ".join(re.findall(r"data-form-errors>(.*?)</p>", text, re.S))).strip(),
    }


def expected_additions(issue: Issue, shown: set[str]) -> set[str]:
    """What `a` must add: every label shown pre-selected that the issue lacks; a hand-off's oncall label replaces
    oncall: pt2 (G5)."""
    return shown - set(issue.label_names())


def test_it_adds_on_a_exactly_what_every_demo_issue_page_shows_preselected(client, demo_server, triager):
    call_command("load_demo")
    sync_queue(full=True)
    client.force_login(triager)
    walked = {"issues": 0, "triaged": 0, "flagged": 0, "routed": 0, "held": 0, "refused": 0}
    for issue in Issue.objects.in_queue().order_by("number"):
        page = client.get(issue.get_absolute_url()).content.decode()
        shown = shown_preselected(page)
        issue.refresh_from_db()
        for in_queue in (False, True):
            data = {"accept": "1", **({"in_queue": "1"} if in_queue else {})}
            answer = client.post(reverse("rubric_app:issue_preview", args=[issue.number]), data, HTTP_HX_REQUEST="true")
            plan = previewed(answer.content.decode())
            where = f"#{issue.number} ({'queue' if in_queue else 'issue page'})"
            if plan["refused"]:
                # G4: nothing sure enough to pre-select a component: `a` adds nothing, and says what to tick.
                assert plan["refused"].startswith(("G4", "G1")) and "G4" in plan["refused"], where
                assert TRIAGED not in shown and not any(is_module(n) for n in shown | set(issue.label_names())), where
                walked["refused"] += not in_queue
                continue
            assert plan["add"] == expected_additions(issue, shown), where
            assert (TRIAGED in plan["add"]) == (TRIAGED in shown and not issue.has_label(TRIAGED)), where
            if issue.suggested_route == Route.TRANSFER:
                assert plan["transfer"], where  # G2: the transfer is the route `a` previews
            if "needs reproduction" in plan["add"]:
                assert plan["reply"] == ["request_self_contained_reproduction"], where  # G9: the skill's reply
            held = bool(plan["decide"])
            flagged = TRIAGE_REVIEW in shown or issue.has_label(TRIAGE_REVIEW)
            assert held == (TRIAGED not in shown and not flagged and bool(issue_g6_needs_human(issue))), where
            if not in_queue:
                walked["issues"] += 1
                walked["triaged"] += TRIAGED in plan["add"]
                walked["flagged"] += TRIAGE_REVIEW in plan["add"]
                walked["routed"] += bool(
                    plan["transfer"]
                    or plan["reply"]
                    or any(n.startswith("oncall:") and n != PT2_ONCALL for n in plan["add"])
                )
                walked["held"] += held
    print("demo walk:", walked)
    assert walked["issues"] + walked["refused"] == Issue.objects.in_queue().count() > 40


def issue_g6_needs_human(issue: Issue) -> str:
    item = next((i for i in issue.checklist if i.get("rule_id") == "G6"), {})
    return item.get("text", "") if item.get("state") == "needs_human" else ""


def test_it_never_offers_a_hand_off_the_skill_in_use_removed(client, demo_server, triager):
    # The demo GitHub serves the skill's labels.json, which has no `oncall: package/deploy` (the shipped catalog has).
    call_command("load_demo")
    sync_queue(full=True)
    client.force_login(triager)

    page = client.get(Issue.objects.get(number=170083).get_absolute_url()).content.decode()
    assert '<option value="oncall: export"' in page and "oncall: package/deploy" not in page
