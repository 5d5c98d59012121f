"""The triage flow without JavaScript (issue 36): a label the engine did not suggest, picked from the catalog (G7)
on the issue page, the bot correction and a group; the labels refreshed in place once GitHub has them; the queue
rows and the issue page's neighbours that `j` passes over; a Repro Agent comment's folds rendered as GitHub shows
them. The browser half is tests/browser/test_browser_flow.py."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from rubric_app.github.applying import apply_decision
from rubric_app.models import Comment, Issue, TriageDecision
from rubric_app.web.decision_forms import BotCorrectionForm
from rubric_app.web.markdown import render_markdown
from tests.factories import make_issue, make_suggestion

pytestmark = pytest.mark.django_db
HTMX = {"HX-Request": "true"}
Status = TriageDecision.Status


def _url(name: str, *args) -> str:
    return reverse(f"rubric_app:{name}", args=args)


def _post(issue: Issue, **fields) -> dict:
    return {"route": "pt2", "labels_seen": json.dumps(issue.label_names()), **fields}


@pytest.fixture
def suggested(synced) -> Issue:
    """#1001 (oncall: pt2, on the fake GitHub too) with one suggestion, module: dynamo, pre-selected."""
    make_suggestion(synced, "module: dynamo", "R1.2", confidence=0.9)
    return synced


# --- the label picker ---------------------------------------------------------------------------------------


def test_it_offers_the_catalog_with_descriptions_to_type_ahead_from(client, triager, suggested):
    client.force_login(triager)
    html = client.get(_url("issue", 1001)).content.decode()
    assert "data-label-picker" in html and 'name="add_labels"' in html and 'list="label-catalog"' in html
    datalist = re.search(r'<datalist id="label-catalog">(.*?)</datalist>', html, re.S).group(1)
    options = re.findall(r'<option value="([^"]*)" label="([^"]*)">', datalist)
    names = [name for name, _ in options]
    assert "module: inductor" in names and "module: dynamo" in names
    # The status flags and the oncall labels have their own controls (the review box, the route): not offered.
    assert not {"triaged", "triage review", "oncall: cpu inductor", "oncall: export"} & set(names)
    described = dict(options)
    assert described["module: inductor"] != "module: inductor"  # the catalog's description beside the name


def test_it_applies_a_label_the_engine_did_not_suggest(client, triager, suggested, fake_github):
    client.force_login(triager)
    # Without JS the picker is a text field: a name, or several comma-separated; "inductor" is short for the module.
    data = _post(suggested, labels=["module: dynamo"], add_labels="inductor")
    preview = client.post(_url("issue_preview", 1001), data).content.decode()
    assert "+ module: inductor" in preview and "+ module: dynamo" in preview
    assert '<input type="hidden" name="add_labels" value="module: inductor">' in preview  # Apply posts what it showed

    response = client.post(_url("issue_apply", 1001), {**data, "add_labels": ["module: inductor"]})

    assert response.status_code == 302
    decision = TriageDecision.objects.get()
    assert decision.labels_added == ["module: dynamo", "module: inductor", "triaged"]
    assert apply_decision(decision.pk).status == Status.APPLIED
    assert fake_github.labels_of(1001) == ["module: dynamo", "module: inductor", "oncall: pt2", "triaged"]


@pytest.mark.parametrize(
    "typed, why",
    [
        ("module: nonsense", "Not in the triage label catalog (G7): module: nonsense"),
        ("triage review", "the review box below (R11)"),
        ("triaged", "added by Apply itself"),
        ("oncall: export", "is a route: pick it under Route (G5)"),
    ],
)
def test_it_refuses_a_picked_label_the_catalog_lacks_or_another_control_owns(client, triager, suggested, typed, why):
    client.force_login(triager)
    html = client.post(_url("issue_preview", 1001), _post(suggested, add_labels=typed), headers=HTMX).content
    assert why in html.decode() and b"data-apply" not in html
    response = client.post(_url("issue_apply", 1001), _post(suggested, add_labels=typed))
    assert response.status_code == 400 and not TriageDecision.objects.exists()


def test_it_prefills_the_bot_correction_with_the_engines_pick(client, triager, bot_issue):  # noqa: F811
    make_suggestion(bot_issue, "module: dynamo", "R1.2", confidence=0.9)  # the bot said inductor
    make_suggestion(bot_issue, "module: dynamic shapes", "R1.1", confidence=0.4, preselected=False)
    client.force_login(triager)
    html = client.get(_url("issue", 1001)).content.decode()
    correction = html[html.index('id="bot-correct-form"') :]
    correction = correction[: correction.index("</form>")]
    # A type-ahead picker, not a multi-select of the whole catalog, with what the rubric pre-selects ticked.
    assert "<select" not in correction and 'list="label-catalog"' in correction
    assert '<input type="checkbox" name="add" value="module: dynamo" checked>' in correction
    assert 'value="module: dynamic shapes"' not in correction  # only possible: not pre-filled

    form = BotCorrectionForm(
        {"labels_seen": json.dumps(bot_issue.label_names()), "keep": ["bot-triaged", "oncall: pt2"], "add": ["nope"]},
        issue=bot_issue,
        allowed=frozenset({"module: dynamo", "module: inductor", "triaged"}),
    )
    assert not form.is_valid() and "Not in the triage label catalog (G7): nope" in str(form.errors)


# --- labels refreshed in place ----------------------------------------------------------------------------


def test_it_refreshes_the_labels_in_place_where_the_page_shows_them(client, triager, suggested):
    client.force_login(triager)
    decision = TriageDecision.objects.create(
        issue=suggested, user=triager, labels_seen=["oncall: pt2"], labels_added=["module: dynamo", "triaged"]
    )
    poll = _url("decision", decision.pk)
    on_issue_page = {**HTMX, "HX-Current-URL": "http://testserver/issues/1001"}
    assert "hx-swap-oob" not in client.get(poll, headers=on_issue_page).content.decode()  # still on its way

    assert apply_decision(decision.pk).status == Status.APPLIED
    header = client.get(poll, headers=on_issue_page)
    assert header.status_code == 286  # finished: polling stops
    oob = re.search(r'<p class="labels" id="issue-labels-1001" hx-swap-oob="true">(.*?)</p>', header.content.decode())
    assert oob and re.findall(r">([^<]+)</span>", oob.group(1)) == ["module: dynamo", "oncall: pt2", "triaged"]

    on_queue = {**HTMX, "HX-Current-URL": "http://testserver/?lane=all"}
    row = client.get(poll, headers=on_queue).content.decode()
    assert 'id="row-labels-1001" class="row-labels" hx-swap-oob="true"' in row and "issue-labels-1001" not in row
    elsewhere = {**HTMX, "HX-Current-URL": "http://testserver/meeting"}
    assert "hx-swap-oob" not in client.get(poll, headers=elsewhere).content.decode()


# --- what `j` passes over -----------------------------------------------------------------------------------


@pytest.fixture
def waiting(triager):
    """#3001 flagged for the meeting, #3002 with a decision on its way, #3003 waiting for nobody, #3004 with a
    decision done (applied): newest activity first, as the queue lists them."""
    now = timezone.now()
    flagged = make_issue(3001, labels=("oncall: pt2", "triage review"), updated_at=now)
    pending = make_issue(3002, updated_at=now - timedelta(minutes=1))
    make_issue(3003, updated_at=now - timedelta(minutes=2))
    done = make_issue(3004, updated_at=now - timedelta(minutes=3))
    TriageDecision.objects.create(issue=pending, user=triager, labels_added=["module: dynamo"])
    TriageDecision.objects.create(issue=done, user=triager, status=Status.APPLIED)
    return flagged


def test_it_marks_the_queue_rows_waiting_for_the_meeting_or_a_decision(client, triager, waiting):
    client.force_login(triager)
    html = client.get(_url("queue"), {"lane": "all"}, headers=HTMX).content.decode()
    marks = dict(re.findall(r'data-issue-row="(\d+)" data-href="[^"]*" data-waiting="(\w*)"', html))
    assert marks == {"3001": "meeting", "3002": "decision", "3003": "", "3004": ""}
    assert "waiting for the meeting (R11)" in html and "a decision is on its way to GitHub" in html
    # The triage review lane lists the flagged issues to be read: there they are not passed over.
    review = client.get(_url("queue"), {"lane": "review"}, headers=HTMX).content.decode()
    assert 'data-issue-row="3001" data-href="/issues/3001" data-waiting=""' in review


def test_it_takes_j_on_the_issue_page_past_the_waiting_issues(client, triager, waiting):
    client.force_login(triager)
    first = client.get(_url("issue", 3001)).content.decode()
    assert f'data-next="{_url("issue", 3003)}"' in first  # not #3002: its decision is on its way
    last = client.get(_url("issue", 3004)).content.decode()
    assert f'data-prev="{_url("issue", 3003)}"' in last


# --- automation comments as their Markdown ------------------------------------------------------------------


AGENT_COMMENT = """## PT2 Repro Agent

**Outcome:** Reproduced (3/3 runs)

<details><summary>Repro script</summary>

```python
import torch
print(torch.compile(lambda x: x + 1)(torch.ones(2)))
```
</details>

If this result is wrong, add the `repro:agent:h100:incorrect` label."""


def test_it_renders_a_repro_agent_comment_with_its_folds(client, viewer):
    issue = make_issue(4001)
    Comment.objects.create(issue=issue, github_id=1, author="pytorch-bot[bot]", body=AGENT_COMMENT)
    client.force_login(viewer)
    html = client.get(_url("issue", 4001)).content.decode()
    assert "<details><summary>Repro script</summary>" in html and "&lt;details&gt;" not in html
    assert 'class="kn">import</span>' in html  # the script inside the fold is still highlighted code


@pytest.mark.parametrize(
    "text, shown",
    [
        ("<details onclick=alert(1)><summary>x</summary>", "&lt;details onclick=alert(1)&gt;"),
        ('<details><summary>x</summary><img src=x onerror="alert(1)">', "&lt;img src=x"),
        ("<details open><summary><script>alert(1)</script></summary>", "&lt;script&gt;alert(1)"),
        ("a <summary>s</summary> <b>b</b>", "&lt;b&gt;b&lt;/b&gt;"),
    ],
)
def test_it_keeps_only_the_bare_fold_tags_of_raw_html(text, shown):
    html = str(render_markdown(text))
    assert shown in html  # the rest is shown as text, never dropped
    assert not re.search(r"<(img|script|b)\b", html) and not re.search(r"<[^>]*\bon\w+=", html)
