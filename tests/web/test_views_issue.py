"""The issue page: text, checklist, suggestions, preview/apply, decision polling, bisection polling."""

from __future__ import annotations

import json
import re
from html import unescape

import pytest
from django.urls import reverse

from rubric_app.bisection import extract_repro
from rubric_app.models import BisectionRun, Comment, Issue, TriageDecision
from rubric_app.triage import similar
from tests.factories import make_issue, make_label, make_suggestion

HTMX = {"HX-Request": "true"}


def _url(name: str, *args) -> str:
    return reverse(f"rubric_app:{name}", args=args)


@pytest.fixture
def triaged_issue(db):
    """A PT2 issue whose body shows a graph break, with the rubric's suggestions stored."""
    for name in ("module: dynamo", "module: dynamic shapes", "triage review", "triaged", "oncall: export"):
        make_label(name)
    issue = make_issue(
        2001,
        title="Graph break on tensor.item() under torch.compile",
        body="Calling `x.item()` causes a graph break.\n\n```python\nimport torch\ntorch.compile(f)(x)\n```",
        checklist=[
            {"rule_id": "G4", "text": "At least one module: label", "state": "violated", "evidence": ""},
            {"rule_id": "R1.4", "text": "Data-dependent op", "state": "satisfied", "evidence": ".item()"},
        ],
        suggested_route="pt2",
    )
    Comment.objects.create(issue=issue, github_id=1, author="bob", body="It passes with `dynamic=False`.")
    make_suggestion(
        issue,
        "module: dynamic shapes",
        "R1.4",
        confidence=0.9,
        evidence="causes a graph break",
        evidence_source="body",
        reason="data-dependent op",
    )
    make_suggestion(
        issue,
        "module: dynamic shapes",
        "R1.1",
        confidence=0.8,
        evidence="passes with",
        evidence_source="comment:0",
    )
    make_suggestion(issue, "compile-cache", "R7.2", confidence=0.4)
    make_suggestion(
        issue,
        "module: dynamo",
        kind="avoid",
        rule_id="R1.1",
        reason="the failure disappears with dynamic=False",
    )
    return issue


def _apply_data(issue, **overrides) -> dict:
    data = {
        "labels": ["module: dynamic shapes"],
        "route": "pt2",
        "handoff_to": "",
        "labels_seen": json.dumps(issue.label_names()),
    }
    return {**data, **overrides}


def test_it_forbids_outsiders_and_404s_unknown_issues(client, outsider, viewer, triaged_issue):
    client.force_login(outsider)
    assert client.get(_url("issue", 2001)).status_code == 403
    client.force_login(viewer)
    assert client.get(_url("issue", 9999)).status_code == 404


def test_it_shows_text_checklist_suggestions_and_avoids(client, viewer, triaged_issue):
    client.force_login(viewer)
    html = client.get(_url("issue", 2001)).content.decode()
    assert '<mark class="evidence">causes a graph break</mark>' in html  # body evidence highlighted
    assert '<mark class="evidence">passes with</mark>' in html  # comment 0's evidence, in the comment
    assert 'class="kn">import</span>' in html  # the code block went through Pygments
    assert "R1.4" in html and "90%" in html and "data-dependent op" in html
    assert "state-violated" in html and "At least one module: label" in html
    assert "not in the catalog (R7.4)" in html  # compile-cache is suggested but not in the catalog
    assert "the failure disappears with dynamic=False" in html
    # one checkbox for the label although two rules suggest it, pre-selected
    assert html.count('name="labels" value="module: dynamic shapes"') == 1
    assert 'value="module: dynamic shapes" id="label-1" data-suggested checked' in html


def test_it_previews_exactly_what_github_will_see(client, triager, triaged_issue):
    client.force_login(triager)
    response = client.post(_url("issue_preview", 2001), _apply_data(triaged_issue, review="on"), headers=HTMX)
    html = response.content.decode()
    assert "<html" not in html
    assert "+ module: dynamic shapes" in html and "+ triage review" in html
    assert "+ triaged" not in html  # R11: flagged for review, so not triaged
    assert "data-apply" in html
    assert not TriageDecision.objects.exists()  # a preview changes nothing


def _confirmed_fields(html: str, action: str) -> dict[str, list[str]]:
    """The hidden fields of the form posting to `action`: the previewed decision as it will be posted again."""
    form = html[html.index(f'action="{action}"') :]
    form = form[: form.index("</form>")]
    fields: dict[str, list[str]] = {}
    for name, value in re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', form):
        fields.setdefault(name, []).append(unescape(value))
    return fields


def test_it_posts_the_previewed_decision_back_as_it_was_validated(client, triager, triaged_issue):
    client.force_login(triager)
    preview = client.post(
        _url("issue_preview", 2001),
        _apply_data(triaged_issue, route="transfer", transfer_to="pytorch/vision"),
        headers=HTMX,
    ).content.decode()
    fields = _confirmed_fields(preview, _url("issue_apply", 2001))
    assert fields["route"] == ["transfer"] and fields["transfer_to"] == ["pytorch/vision"]
    client.post(_url("issue_apply", 2001), fields, headers=HTMX)
    assert TriageDecision.objects.get().transfer_to == "pytorch/vision"


def test_it_accepts_the_suggestions_from_the_queue(client, triager, triaged_issue):
    client.force_login(triager)
    html = client.post(_url("issue_preview", 2001), {"accept": "1", "in_queue": "1"}, headers=HTMX).content.decode()
    assert "+ module: dynamic shapes" in html and "+ triaged" in html
    assert "compile-cache" not in html  # never applied silently (R7.4)


def test_it_renders_the_whole_page_with_the_preview_without_javascript(client, triager, triaged_issue):
    client.force_login(triager)
    html = client.post(_url("issue_preview", 2001), _apply_data(triaged_issue)).content.decode()
    assert "<html" in html and "+ module: dynamic shapes" in html and "Apply to GitHub" in html


def test_it_requires_an_oncall_to_hand_off_to(client, triager, triaged_issue):
    client.force_login(triager)
    html = client.post(
        _url("issue_preview", 2001), _apply_data(triaged_issue, route="handoff"), headers=HTMX
    ).content.decode()
    assert "Choose the oncall to hand the issue off to (G5)" in html and "data-apply" not in html
    html = client.post(
        _url("issue_preview", 2001),
        _apply_data(triaged_issue, route="handoff", handoff_to="oncall: export"),
        headers=HTMX,
    ).content.decode()
    assert "+ oncall: export" in html and "− oncall: pt2" in html and "+ module: dynamic shapes" not in html  # G5


def test_it_lets_viewers_preview_but_not_apply(client, viewer, triaged_issue):
    client.force_login(viewer)
    html = client.post(_url("issue_preview", 2001), _apply_data(triaged_issue), headers=HTMX).content.decode()
    assert "data-apply" not in html
    assert client.post(_url("issue_apply", 2001), _apply_data(triaged_issue)).status_code == 403
    assert not TriageDecision.objects.exists()


def test_it_refuses_get_on_post_only_views(client, triager, triaged_issue):
    client.force_login(triager)
    for name in ("issue_preview", "issue_apply", "bisect"):
        assert client.get(_url(name, 2001)).status_code == 405


def test_it_records_a_pending_decision_and_redirects_without_javascript(client, triager, triaged_issue):
    client.force_login(triager)
    response = client.post(_url("issue_apply", 2001), _apply_data(triaged_issue))
    assert response.status_code == 302 and response["Location"] == _url("issue", 2001)
    decision = TriageDecision.objects.get()
    assert decision.status == "pending" and decision.user == triager
    assert decision.labels_added == ["module: dynamic shapes", "triaged"]
    assert decision.labels_seen == ["oncall: pt2"]
    assert "pending" in client.get(_url("issue", 2001)).content.decode()


def test_it_answers_htmx_apply_with_a_polling_fragment(client, triager, triaged_issue):
    client.force_login(triager)
    html = client.post(_url("issue_apply", 2001), _apply_data(triaged_issue), headers=HTMX).content.decode()
    decision = TriageDecision.objects.get()
    assert f'hx-get="{_url("decision", decision.pk)}" hx-trigger="every 1s"' in html
    assert 'id="apply-preview-2001"' in html and "<html" not in html


def test_it_shows_why_a_decision_was_refused(client, triager, triaged_issue):
    triaged_issue.is_pull_request = True
    triaged_issue.save(update_fields=["is_pull_request"])
    client.force_login(triager)
    html = client.post(_url("issue_apply", 2001), _apply_data(triaged_issue), headers=HTMX).content.decode()
    assert "refused" in html and "pull request" in html and "hx-trigger" not in html


def test_it_polls_a_decision_until_it_is_finished(client, viewer, triaged_issue, django_assert_num_queries):
    decision = TriageDecision.objects.create(issue=triaged_issue, labels_added=["triaged"], status="applying")
    client.force_login(viewer)
    # session, user, permissions (2), the decision with its issue and user
    with django_assert_num_queries(5):
        response = client.get(_url("decision", decision.pk), headers=HTMX)
    assert response.status_code == 200 and 'hx-trigger="every 1s"' in response.content.decode()
    TriageDecision.objects.filter(pk=decision.pk).update(status="conflict", result_message="Someone changed #2001")
    response = client.get(_url("decision", decision.pk), headers=HTMX)
    html = response.content.decode()
    assert response.status_code == 286  # htmx stops polling
    assert "conflict" in html and "Someone changed #2001" in html and "hx-trigger" not in html


def test_it_polls_a_bisection_until_the_run_ends(client, viewer, triaged_issue, django_assert_num_queries):
    run = BisectionRun.objects.create(
        issue=triaged_issue,
        repro_code="import torch",
        status="running",
        current_mode="aot_eager",
        results=[{"mode": "eager", "status": "passed", "phase": "run", "exception": "", "message": "", "wall_s": 0.5}],
    )
    client.force_login(viewer)
    # session, user, permissions (2), the run with its issue and requester
    with django_assert_num_queries(5):
        response = client.get(_url("bisection", run.pk), headers=HTMX)
    html = response.content.decode()
    assert (
        response.status_code == 200 and 'hx-trigger="every 1s"' in html and "now running <code>aot_eager</code>" in html
    )
    BisectionRun.objects.filter(pk=run.pk).update(
        status="done",
        current_mode="",
        verdict_summary="fails on inductor, passes on aot_eager (R2.2)",
        verdict_labels=[{"label": "module: inductor", "rule_id": "R2.2", "evidence": "inductor: raised"}],
        results=run.results
        + [
            {
                "mode": "inductor",
                "status": "raised",
                "phase": "compile",
                "exception": "LoweringException",
                "message": "boom",
                "wall_s": 3.2,
            }
        ],
    )
    response = client.get(_url("bisection", run.pk), headers=HTMX)
    html = response.content.decode()
    assert response.status_code == 286 and "hx-trigger" not in html
    assert "LoweringException" in html and "R2.2" in html and "module: inductor" in html


def test_it_redirects_plain_status_polls_to_the_issue(client, viewer, triaged_issue):
    run = BisectionRun.objects.create(issue=triaged_issue, repro_code="x")
    client.force_login(viewer)
    assert client.get(_url("bisection", run.pk))["Location"] == _url("issue", 2001) + "#bisection"


def test_it_lists_earlier_runs_and_shows_the_latest(client, viewer, triaged_issue):
    BisectionRun.objects.create(issue=triaged_issue, repro_code="x", status="failed", error="sandbox ran out of memory")
    BisectionRun.objects.create(issue=triaged_issue, repro_code="x", status="queued")
    client.force_login(viewer)
    html = client.get(_url("issue", 2001)).content.decode()
    assert "Earlier runs" in html and "sandbox ran out of memory" in html
    assert 'data-run-status="queued"' in html and 'hx-trigger="every 1s"' in html


def test_it_rejects_an_empty_repro(client, triager, triaged_issue):
    client.force_login(triager)
    response = client.post(_url("bisect", 2001), {"code": "  ", "device": "cpu"}, headers=HTMX)
    assert response["HX-Retarget"] == "#bisect-form"
    assert "Paste a repro to bisect." in response.content.decode()
    assert not BisectionRun.objects.exists()


def test_it_forbids_bisecting_to_viewers(client, viewer, triaged_issue):
    client.force_login(viewer)
    assert client.post(_url("bisect", 2001), {"code": "import torch", "device": "cpu"}).status_code == 403
    assert "data-bisect" not in client.get(_url("issue", 2001)).content.decode()


def test_it_makes_the_same_number_of_queries_however_long_the_issue(
    client, viewer, triaged_issue, django_assert_num_queries
):
    for number in (2002, 2003):  # similar issues, indexed as the sync indexes them
        make_issue(number, title=f"Graph break on tensor.item() again ({number})", body=triaged_issue.body)
    similar.reindex(Issue.objects.all())
    client.force_login(viewer)
    client.get(_url("issue", 2001))  # warm the per-process caches (catalog file)
    # session, user, permissions (2), issue, labels, comments, suggestions, runs, the triage skill's files (the labels'
    # descriptions), triage catalog, latest decision, previous and next issue in the queue, the workers' heartbeats;
    # similar issues: the issue's vector, candidates, their scores, the neighbours and their labels, the decisions that
    # closed any of them as its duplicate or the pairs the history recorded (the possible-duplicate mark's original
    # comes with the issue: no query), and the mark's threshold in use (issue 52)
    with django_assert_num_queries(22):
        client.get(_url("issue", 2001))
    for i in range(2, 12):
        Comment.objects.create(issue=triaged_issue, github_id=i, body=f"comment {i}")
        BisectionRun.objects.create(issue=triaged_issue, repro_code="x", status="done")
    with django_assert_num_queries(22):
        assert 'data-similar="2003"' in client.get(_url("issue", 2001)).content.decode()


def test_it_prefills_the_repro_from_the_issue_text(client, triager, triaged_issue):
    client.force_login(triager)
    html = client.get(_url("issue", 2001)).content.decode()
    textarea = unescape(html.split('name="code"')[1].split(">", 1)[1].split("</textarea>")[0])
    assert textarea.strip() == extract_repro([triaged_issue.body]).code.strip()  # the harness-ready repro
    assert "import torch" in textarea


def test_it_starts_a_bisection_with_the_edited_code(client, triager, triaged_issue):
    client.force_login(triager)
    code = "import torch\n\ndef f(x):\n    return x.sin()\n"
    html = client.post(_url("bisect", 2001), {"code": code, "device": "cpu"}, headers=HTMX).content.decode()
    run = BisectionRun.objects.get()
    assert run.repro_code == code and run.requested_by == triager and run.status == "queued"
    assert f'hx-get="{_url("bisection", run.pk)}" hx-trigger="every 1s"' in html and "<html" not in html
    response = client.post(_url("bisect", 2001), {"code": code, "device": "cpu"})
    assert response.status_code == 302 and response["Location"].endswith("#bisection-current")  # the run, in sight


def test_it_preselects_the_gpu_when_the_repro_names_cuda(client, triager, triaged_issue):
    client.force_login(triager)
    html = client.get(_url("issue", 2001)).content.decode()
    assert '<option value="cpu" selected>' in html and "data-repro-cuda" not in html
    triaged_issue.body = (
        "Fails on GPU:\n\n```python\nimport torch\nx = torch.randn(4, device='cuda')\ntorch.compile(torch.sin)(x)\n```"
    )
    triaged_issue.save(update_fields=["body"])
    html = client.get(_url("issue", 2001)).content.decode()
    assert '<option value="cuda" selected>' in html and "data-repro-cuda" in html


AGENT_COMMENT = """**🤖 PT2 Repro Agent**

I tried to reproduce this issue on PyTorch nightly (`2.13.0.dev20260601+cu130`) on NVIDIA H100 and confirmed it \
reproduces (3/3 runs failed).

All 3 runs failed with a numerical mismatch between eager and compiled outputs (max_abs_diff=0.25).

The compiler bisector identified the offending component:
- **Backend**: `inductor`
- **Subsystem**: `lowerings`

<details><summary>Repro script</summary>

```python
import os
import torch

def test_fn() -> bool:
    backend = os.environ.get("TORCH_COMPILE_BACKEND", "inductor")
    x = torch.randn(8)
    return torch.allclose(torch.compile(torch.cos, backend=backend)(x), torch.cos(x))
```
</details>
"""


def test_it_shows_what_the_automation_said_and_offers_the_agents_script_to_bisect(client, viewer, triager):
    issue = make_issue(7401, body="cos is wrong under compile", labels=("oncall: pt2", "bot-triaged"))
    Comment.objects.create(issue=issue, github_id=740101, author="karthickai", body=AGENT_COMMENT)
    client.force_login(viewer)
    html = client.get(_url("issue", 7401)).content.decode()
    panel = html[html.index('id="automation"') : html.index('id="bisection"')]
    assert 'data-agent="reproduced"' in panel and "(3/3 runs) on H100" in panel
    assert "2.13.0.dev20260601+cu130" in panel and "silent mismatch" in panel
    assert "backend <code>inductor</code>, subsystem <code>lowerings</code>" in panel
    assert 'href="#comment-0"' in panel and "triage bot labelled this issue" in panel
    assert "data-agent-bisect" not in panel  # viewers do not bisect
    client.force_login(triager)
    html = client.get(_url("issue", 7401)).content.decode()
    assert 'href="?repro=agent#bisection"' in html
    form = client.get(_url("issue", 7401) + "?repro=agent").content.decode()
    code = unescape(re.search(r"<textarea[^>]*>(.*?)</textarea>", form, re.S).group(1))
    assert "def test_fn() -> bool:" in code and "TORCH_COMPILE_BACKEND" in code  # the harness calls test_fn()


def test_it_shows_no_automation_panel_where_there_was_none(client, viewer, triaged_issue):
    client.force_login(viewer)
    assert 'id="automation"' not in client.get(_url("issue", triaged_issue.number)).content.decode()


def _row_preview(client, number: int, data: dict, target: str) -> str:
    """A queue row's preview as htmx asks for it: into the row's slot (`a`), or into its plan (a box changed)."""
    headers = {**HTMX, "HX-Target": target}
    return client.post(_url("issue_preview", number), {"in_queue": "1", **data}, headers=headers).content.decode()


def test_it_opens_a_queue_rows_preview_as_a_form_to_untick_or_add_a_label(
    client, triager, triaged_issue, django_assert_num_queries
):
    make_label("module: inductor")
    client.force_login(triager)
    # session, user, permissions (2), the issue and what its page prefetches (labels, comments, suggestions, runs);
    # the catalog and the skill's descriptions, twice: the posted form, then `a`'s (the suggestions as its data)
    with django_assert_num_queries(13):
        html = _row_preview(client, 2001, {"accept": "1"}, "apply-preview-2001")
    assert "data-queue-edit" in html and "+ module: dynamic shapes" in html and "+ triaged" in html
    # The suggested labels as boxes, ticked as `a` accepts them, with the row's own ids; the picker; the route kept.
    assert re.search(
        r'<input type="checkbox" name="labels" value="module: dynamic shapes" id="q2001-labels_0"[^>]*checked', html
    )
    assert 'id="q2001-add_labels"' in html and 'list="label-catalog"' in html
    assert '<input type="hidden" name="route" value="pt2">' in html and 'name="labels_seen"' in html
    assert '<datalist id="label-catalog" hx-swap-oob="true">' in html  # fills the queue's empty list
    assert 'value="module: inductor"' in html[html.index("<datalist") :]

    # Unticked and one added: what changed is previewed (the plan only: the boxes stay as the triager left them).
    data = {"route": "pt2", "add_labels": "inductor", "labels_seen": json.dumps(["oncall: pt2"])}
    with django_assert_num_queries(11):  # the form once
        html = _row_preview(client, 2001, data, "queue-plan-2001")
    plan = html[html.index('id="queue-plan-2001"') :]
    assert "+ module: inductor" in plan and "module: dynamic shapes" not in plan and "data-apply" in plan
    assert "<datalist" not in html
    # Enter posts the row's form to Apply: exactly what is ticked.
    client.post(_url("issue_apply", 2001), {"in_queue": "1", **data}, headers=HTMX)
    assert TriageDecision.objects.get().labels_added == ["module: inductor", "triaged"]


def test_it_says_why_a_rows_preview_is_refused_and_keeps_its_boxes(client, triager, triaged_issue):
    client.force_login(triager)
    data = {"route": "pt2", "labels_seen": json.dumps(["oncall: pt2"])}  # nothing ticked: triaged alone (G4)
    html = _row_preview(client, 2001, data, "queue-plan-2001")
    assert 'class="outcome refused"' in html and "data-form-errors" in html and "G4" in html
    assert "data-apply" not in html
    assert re.search(r'name="labels" value="module: dynamic shapes" id="q2001-labels_0"(?![^>]*checked)', html)


def test_it_keeps_a_queue_rows_accept_on_the_issue_page_without_javascript(client, triager, triaged_issue):
    """Without JS the row's Accept lands on the issue page: its triage form is the form to untick or add a label."""
    client.force_login(triager)
    html = client.post(_url("issue_preview", 2001), {"accept": "1", "in_queue": "1"}).content.decode()
    assert "<html" in html and 'id="triage-form"' in html and "+ module: dynamic shapes" in html
    assert "data-queue-edit" not in html and "Apply to GitHub" in html
