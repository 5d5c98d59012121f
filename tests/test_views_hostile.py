"""Issue text is untrusted: scripts, event handlers, javascript: links and raw HTML must render inert."""

from __future__ import annotations

import re

import pytest
from django.test import override_settings
from django.urls import reverse

from rubric_app.markdown import render_markdown
from rubric_app.models import Comment, Label, Meeting, Suggestion, TriageDecision
from tests.conftest import make_issue

HOSTILE = [
    "<script>alert('x')</script>",
    '<img src=x onerror="alert(1)">',
    "[click me](javascript:alert(1))",
    '<a href="javascript:alert(2)">raw link</a>',
    '<iframe src="https://evil.example"></iframe>',
    '<div style="position:fixed" onmouseover="alert(3)">hover</div>',
    "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "<svg onload=alert(4)>",
]
BODY = "\n\n".join(HOSTILE) + "\n\n```\n<script>in code</script>\n```\n\n[fine](https://github.com/pytorch/pytorch)"


def _assert_inert(html: str) -> None:
    """No executable markup from the issue text: the page's own scripts are the only <script> tags."""
    scripts = re.findall(r"<script\b[^>]*>", html, flags=re.I)
    assert all("src=" in tag and "/static/" in tag for tag in scripts), scripts
    assert not re.search(r"<[^>]+\son\w+\s*=", html, flags=re.I), "an event-handler attribute got through"
    assert not re.search(r"""<[^>]*\s(href|src)\s*=\s*["']?\s*(javascript|data):""", html, flags=re.I)
    assert not re.search(r"<(iframe|img)\b", html, flags=re.I)
    # The only <svg> allowed is the dashboard's own chart (charts.py, queue health on the meeting page).
    assert not re.search(r'<svg\b(?! class="chart" data-chart="[a-z]+" )', html, flags=re.I)


@pytest.fixture
def hostile_issue(db):
    label = Label.objects.create(name='<script>alert("label")</script>', color='"><i>', allowed_for_triage=True)
    issue = make_issue(3001, title="<img src=x onerror=alert('title')> <script>alert('t')</script>", body=BODY,
                       labels=("oncall: pt2", "triage review"))
    issue.labels.add(label)
    Comment.objects.create(issue=issue, github_id=77, author="<b>mallory</b>", body=BODY)
    Suggestion.objects.create(issue=issue, label="<script>s()</script>", rule_id="<i>R1</i>", reason="<svg onload=x>",
                              evidence="<script>alert('x')</script>", evidence_source="body")
    return issue


def test_it_renders_markdown_without_raw_html_and_with_safe_links():
    html = render_markdown(BODY)
    _assert_inert(html)
    assert "&lt;script&gt;" in html  # shown as text, not dropped silently
    assert '<a href="https://github.com/pytorch/pytorch" rel="noopener noreferrer nofollow">fine</a>' in html


def test_it_keeps_evidence_highlighting_from_injecting_markup():
    html = render_markdown("a <b>bold</b> claim", evidence=['<b>bold</b>', '"><script>x()</script>'])
    _assert_inert(html)
    assert '<mark class="evidence">&lt;b&gt;bold&lt;/b&gt;</mark>' in html


@pytest.mark.parametrize("page", ["queue", "issue", "meeting", "audit", "bisections"])
def test_it_renders_hostile_text_inert_on_every_page(client, chair, hostile_issue, page):
    Meeting.objects.create(chair=chair)
    TriageDecision.objects.create(issue=hostile_issue, user=chair, labels_added=['<script>alert("added")</script>'],
                                  result_message="<img src=x onerror=alert(9)>", status="failed")
    hostile_issue.bisection_runs.create(repro_code="<script>", status="done", verdict_summary="<script>v()</script>",
                                        verdict_labels=[{"label": "<svg onload=y>", "rule_id": "R2.2", "evidence": "<img>"}],
                                        results=[{"mode": "<b>eager</b>", "status": "raised", "exception": "<script>e</script>",
                                                  "message": "<img src=x onerror=1>", "phase": "run", "wall_s": 1}])
    client.force_login(chair)
    url = reverse(f"rubric_app:{page}", args=[3001] if page == "issue" else [])
    html = client.get(url, {"lane": "review"} if page == "queue" else {}).content.decode()
    _assert_inert(html)
    assert "&lt;script&gt;" in html  # the hostile text is visible as text


def test_it_never_puts_the_github_token_in_a_page(client, triager, hostile_issue):
    secret = "ghp_never-in-a-page-0123456789"
    client.force_login(triager)
    with override_settings(GITHUB_TOKEN=secret):
        for url in (reverse("rubric_app:queue"), reverse("rubric_app:issue", args=[3001]), reverse("rubric_app:meeting")):
            assert secret not in client.get(url).content.decode()


def test_it_keeps_a_bad_label_colour_out_of_the_style_attribute(client, viewer, hostile_issue):
    client.force_login(viewer)
    html = client.get(reverse("rubric_app:issue", args=[3001])).content.decode()
    assert '"><i>' not in html and "background:#ededed" in html
