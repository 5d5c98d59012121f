"""Demo mode (no GITHUB_TOKEN): the local demo GitHub takes the whole flow; elsewhere nothing is sent."""

from __future__ import annotations

import html
import json
import urllib.error
import urllib.request

import pytest
from django.core.management import call_command
from django.urls import reverse

from rubric_app.github import applying, connect
from rubric_app.github import client as github
from rubric_app.github.sync import sync_queue
from rubric_app.models import Issue, Label, TriageDecision
from rubric_app.triage import decisions
from rubric_app.triage.followups import issues_changed
from tests.factories import make_issue, make_label

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("url", ["https://api.github.com", "http://10.0.0.5:8080", "https://github.example.org/api/v3"])
def test_it_sends_nothing_without_a_token_unless_the_api_is_on_this_machine(settings, triager, url):
    settings.GITHUB_TOKEN, settings.GITHUB_API_URL = "", url
    assert connect.mode() == "off"
    with pytest.raises(github.GitHubError, match="GitHub is off"):
        connect.client()
    issue = make_issue(7001)
    make_label("module: dynamo")
    decision = decisions.request_decision(
        issue=issue, user=triager, plan=decisions.Plan(["module: dynamo"]), labels_seen=["oncall: pt2"]
    )
    assert decision.status == TriageDecision.Status.REFUSED
    assert "Apply is disabled: no GITHUB_TOKEN" in decision.result_message


def test_it_fails_a_queued_decision_with_the_reason_when_github_is_off(settings, triager):
    # Queued while a token was set, applied after it was removed: it ends failed with why, sending nothing.
    issue = make_issue(7002)
    decision = TriageDecision.objects.create(
        issue=issue, user=triager, labels_seen=["oncall: pt2"], labels_added=["module: dynamo"], labels_removed=[]
    )
    settings.GITHUB_TOKEN, settings.GITHUB_API_URL = "", "https://api.github.com"
    decision = applying.apply_decision(decision.pk)
    assert decision.status == TriageDecision.Status.FAILED
    assert "GitHub is off" in decision.result_message


def test_it_disables_apply_with_the_reason_on_every_page_when_github_is_off(client, settings, triager):
    settings.GITHUB_TOKEN, settings.GITHUB_API_URL = "", "https://api.github.com"
    issue = make_issue(7003)
    client.force_login(triager)
    queue = client.get(reverse("rubric_app:queue")).content.decode()
    assert "GitHub is off, Apply is disabled" in queue
    preview = client.post(
        reverse("rubric_app:issue_preview", args=[issue.number]),
        {"route": "pt2", "labels_seen": json.dumps(issue.label_names())},
    ).content.decode()
    assert "Apply is disabled: no GITHUB_TOKEN" in preview and "data-apply>" not in preview


def test_it_applies_demo_decisions_on_the_local_demo_github_and_resyncs(client, demo_server, triager):
    assert connect.mode() == "demo"
    call_command("load_demo")
    assert (
        sync_queue(on_changed=issues_changed, full=True).issues_changed == 0
    )  # the demo GitHub serves what load_demo loaded
    issue = Issue.objects.get(
        number=next(
            n
            for n, i in demo_server.issues.items()
            if i["state"] == "open" and "oncall: pt2" in i["labels"] and "module: dynamo" not in i["labels"]
        )
    )
    client.force_login(triager)
    page = client.get(issue.get_absolute_url()).content.decode()
    assert f"Demo: the issues are the shipped demo set and GitHub is the local demo GitHub at {demo_server.url}" in page

    response = client.post(
        reverse("rubric_app:issue_preview", args=[issue.number]),
        {"route": "pt2", "review": "on", "labels_seen": json.dumps(issue.label_names())},
    )
    assert b"data-apply>" in response.content  # offered: the demo GitHub takes it
    decision = decisions.request_decision(
        issue=issue, user=triager, plan=decisions.Plan(["module: dynamo"]), labels_seen=issue.label_names()
    )
    decision = applying.apply_decision(decision.pk)  # what the github worker runs
    assert decision.status == TriageDecision.Status.APPLIED, decision.result_message
    assert "module: dynamo" in demo_server.labels_of(issue.number)
    writes = demo_server.requests_to(rf"/issues/{issue.number}/labels", method="POST")
    assert len(writes) == 1 and "authorization" not in writes[0].headers  # no token exists to send

    demo_server.set_labels(issue.number, demo_server.labels_of(issue.number) + ["needs reproduction"])
    sync_queue(on_changed=issues_changed)
    assert {"module: dynamo", "needs reproduction"} <= set(Issue.objects.get(pk=issue.pk).label_names())


def test_it_links_on_github_to_the_demo_githubs_own_page_of_the_issue(client, demo_server, settings, viewer):
    settings.GITHUB_URL = demo_server.url  # as run.sh sets it: the demo GitHub is the web side too
    number = next(n for n, i in demo_server.issues.items() if i["state"] == "open" and "oncall: pt2" in i["labels"])
    call_command("load_demo")
    client.force_login(viewer)
    page = client.get(reverse("rubric_app:issue", args=[number])).content.decode()
    link = f"{demo_server.url}/pytorch/pytorch/issues/{number}"
    assert f'<a href="{link}" rel="noopener noreferrer" data-github title="o">on the demo GitHub' in page
    assert "https://github.com/pytorch/pytorch/issues" not in page
    # The demo GitHub serves that page to a browser, without a token, escaped.
    with urllib.request.urlopen(link, timeout=10) as answer:
        shown = answer.read().decode()
    assert answer.status == 200 and html.escape(demo_server.issues[number]["title"]) in shown
    with pytest.raises(urllib.error.HTTPError, match="404"):
        urllib.request.urlopen(f"{demo_server.url}/pytorch/pytorch/issues/1", timeout=10)
    assert f'href="{demo_server.url}/pytorch/pytorch/issues/999999"' in client.get("/issues/999999").content.decode()


def test_it_links_on_github_to_github_com_with_a_token(client, settings, viewer):
    settings.GITHUB_TOKEN, settings.GITHUB_API_URL = "a-token", "https://api.github.com"
    make_issue(7004)
    client.force_login(viewer)
    page = client.get(reverse("rubric_app:issue", args=[7004])).content.decode()
    assert '<a href="https://github.com/pytorch/pytorch/issues/7004" rel="noopener noreferrer" data-github' in page


def test_it_shows_the_triage_skills_new_rules_on_the_demo(client, demo_server, triager):
    # The demo GitHub serves the skill's current files and a release: the sync reads them, and the demo issues
    # written for R5.1 and G9-G13 get what those rules say.
    call_command("load_demo")
    report = sync_queue(on_changed=issues_changed, full=True)

    def add(number):
        return {s.label: s for s in Issue.objects.get(number=number).suggestions.filter(kind="add")}

    def checklist(number):
        return {item["rule_id"]: item for item in Issue.objects.get(number=number).checklist}

    assert report.skill_changed and "release triage" in Label.objects.triage_catalog()
    assert "needs reproduction" in add(170301) and "triaged" not in add(170301)  # a checkpoint download (G9.1)
    crash = add(170302)  # a crash on the latest release: the meeting and the release manager's list
    assert crash["release triage"].rule_id == "G12.1" and "triage review" in crash and "module: crash" in crash
    assert {"module: edge cases", "topic: fuzzer"} <= set(add(170303))  # a fuzzer input at the dtype limit (G10)
    assert checklist(170304)["G13"]["state"] == "needs_human"  # the bot's run was stopped
    assert 170304 in Issue.objects.for_queue("blocked").values_list("number", flat=True)
    layer = add(170305)["module: functionalization"]  # R5.1: the layer beside the umbrella
    assert layer.rule_id == "R5.1" and "module: pt2-dispatcher" in add(170305)
    client.force_login(triager)
    assert "request_self_contained_reproduction" in client.get(reverse("rubric_app:rubric_health")).content.decode()
