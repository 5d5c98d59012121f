"""PyTorch's triage skill read from the repository by the sync (rubric_app/github/skill_files.py): its labels.json and
templates.json through the contents API, the latest release through the releases API, all through PyGithub over
HTTP against the fake GitHub (tests/fakegithub.py). Unchanged: nothing read again; changed: the new labels and
replies in use and /rubric shows what changed; broken: the last good copy stays and the page says why. And the
rules that read them: the release gate (G12), the reply of a request for a reproduction (G9), the bot's lane (G13).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.urls import reverse

from rubric_app.demo.github_seeds import DEMO_RELEASE, SKILL_LABELS, SKILL_TEMPLATES, seed_skill
from rubric_app.demo.github_server import blob_sha
from rubric_app.github import skill_files
from rubric_app.github.sync import sync_queue
from rubric_app.lanes import LANE_BY_CODE
from rubric_app.models import Issue, Label, LabelEvent, SkillFile, Suggestion
from rubric_app.rubric.engine.skill import shipped
from rubric_app.rubric.reading.catalog import catalog_names
from rubric_app.triage.decisions import plan_changes
from rubric_app.triage.followups import issues_changed
from rubric_app.vocabulary import Route
from rubric_app.web.decision_forms import TriageForm
from rubric_app.web.labels import handoff_oncalls
from tests.factories import make_issue, make_label

pytestmark = pytest.mark.django_db
DATA = Path(__file__).resolve().parents[2] / "rubric_app" / "data"
CURRENT_LABELS = (DATA / "skill_labels.json").read_text()
CURRENT_TEMPLATES = (DATA / "skill_templates.json").read_text()
ENV_2_13 = "### Versions\nCollecting environment information...\nPyTorch version: 2.13.0+cu128\nIs debug build: False\n"
RUBRIC = reverse("rubric_app:rubric_health")


def _skill_requests(fake) -> list[tuple[str, int]]:
    return [(r.path.rsplit("/", 1)[-1], r.status) for r in fake.requests_to(r"/(contents/.+|releases/latest)$")]


def _change(html: str, kind: str) -> str:
    """The /rubric page's list item of one kind of change."""
    return html.split(f'data-change="{kind}">', 1)[1].split("</li>", 1)[0]


def _labels_with(fake, add=(), drop=()) -> str:
    """A new labels.json on the fake: the current one with labels added (name, description) and some dropped."""
    data = json.loads(CURRENT_LABELS)
    data["labels"] = [item for item in data["labels"] if item["name"] not in drop]
    data["labels"] += [{"name": name, "description": description} for name, description in add]
    return json.dumps(data, indent=2)


# --- reading the files ----------------------------------------------------------------------------------


def test_it_reads_the_skill_and_the_release_and_the_catalog_follows(fake_github):
    seed_skill(fake_github)
    for name in ("release triage", "oncall: releng", "needs reproduction", "module: dynamo"):
        fake_github.add_label(name)

    report = sync_queue(on_changed=issues_changed, full=True)

    rows = SkillFile.objects.by_name()
    assert rows["labels.json"].sha == blob_sha(CURRENT_LABELS) and rows["labels.json"].error == ""
    assert rows["templates.json"].sha == blob_sha(CURRENT_TEMPLATES)
    assert rows["release"].content["tag"] == DEMO_RELEASE and report.skill_changed
    current = skill_files.in_use()
    assert current.release == DEMO_RELEASE and "request_self_contained_reproduction" in current.replies()
    allowed = Label.objects.triage_catalog()
    assert {"release triage", "needs reproduction", "module: dynamo"} <= allowed  # needs reproduction: humans may (G13)
    assert "oncall: releng" not in allowed  # the skill's catalog left it out


def test_it_reads_nothing_again_while_the_files_are_unchanged(fake_github):
    seed_skill(fake_github)
    sync_queue(on_changed=issues_changed, full=True)
    read_at = SkillFile.objects.get(name="labels.json").read_at
    fake_github.requests.clear()

    report = sync_queue(on_changed=issues_changed)

    assert _skill_requests(fake_github) == [("labels.json", 304), ("templates.json", 304), ("latest", 304)]
    assert all(r.headers["if-none-match"] for r in fake_github.requests_to(r"/contents/"))
    assert not report.skill_changed and SkillFile.objects.get(name="labels.json").read_at == read_at
    assert SkillFile.objects.get(name="labels.json").checked_at > read_at


def test_it_uses_new_labels_and_replies_once_the_skill_changes_and_says_so_on_rubric(
    fake_github, client, viewer, triager
):
    seed_skill(fake_github)
    fake_github.add_issue(1, title="Graph break on zip", body="torch._dynamo.exc.Unsupported: zip")
    fake_github.add_label("module: pt2 startup")
    sync_queue(on_changed=issues_changed, full=True)
    templates = json.loads(CURRENT_TEMPLATES)
    templates["templates"]["request_more_info"]["comment"] = "Please send a repro script and collect_env's output."
    templates["templates"]["close_expected_behavior"] = {"action": "Close", "use_when": "", "comment": "As documented."}
    fake_github.put_file(SKILL_TEMPLATES, json.dumps(templates))
    new_labels = _labels_with(fake_github, add=[("module: pt2 startup", "Time to the first compiled step")])
    labels_sha = fake_github.put_file(SKILL_LABELS, new_labels.replace('"module: vllm"', '"module: vllm-gone"'))

    report = sync_queue(on_changed=issues_changed, full=True)

    assert report.skill_changed
    assert "module: pt2 startup" in Label.objects.triage_catalog()
    assert skill_files.replies()["request_more_info"]["comment"].startswith("Please send a repro script")
    issue = Issue.objects.get(number=1)
    assert plan_changes(issue, chosen=[], route="more info", review=False).comment.startswith("Please send")
    client.force_login(viewer)
    html = client.get(RUBRIC).content.decode()
    assert f"sha <code>{labels_sha[:12]}</code>" in html
    added, removed = _change(html, "labels-added"), _change(html, "labels-removed")
    assert "<code>module: pt2 startup</code>" in added and "<code>release triage</code>" in added
    assert "<code>module: vllm</code>," in removed and "<code>oncall: releng</code>" in removed
    assert 'data-change="replies-added">Replies added: <code>close_expected_behavior</code>' in html
    assert "<code>request_self_contained_reproduction</code>" in html
    assert 'data-change="replies-changed">Replies changed: <code>request_more_info</code>' in html


@pytest.mark.parametrize(
    "path, text, why",
    [
        (SKILL_LABELS, '{"labels": [{"name": "module: dynamo"', "labels.json is not JSON"),
        (SKILL_LABELS, '{"labels": [{"description": "no name"}]}', "label 1 has no name"),
        (
            SKILL_TEMPLATES,
            '{"templates": {"redirect_to_forum": {"comment": "Ask on the forum.", "close": true}}}',
            "keys the dashboard does not know: close",
        ),
    ],
)
def test_it_keeps_the_last_good_copy_of_a_file_it_cannot_parse(fake_github, client, viewer, path, text, why):
    seed_skill(fake_github)
    sync_queue(on_changed=issues_changed, full=True)
    before = skill_files.in_use()
    fake_github.put_file(path, text)

    report = sync_queue(on_changed=issues_changed)

    assert not report.skill_changed and skill_files.in_use() == before
    row = SkillFile.objects.get(name=path.rsplit("/", 1)[-1])
    assert why in row.error and row.error.endswith("the last good copy stays")
    fake_github.requests.clear()
    sync_queue(on_changed=issues_changed)  # the broken file is not read again while it stays broken
    assert (path.rsplit("/", 1)[-1], 304) in _skill_requests(fake_github)
    client.force_login(viewer)
    assert why in client.get(RUBRIC).content.decode()


def test_it_keeps_the_last_release_when_the_tag_is_no_version_or_github_fails(fake_github, client, viewer):
    seed_skill(fake_github)
    sync_queue(on_changed=issues_changed, full=True)
    fake_github.publish_release("nightly-build-20261201")
    sync_queue(on_changed=issues_changed)
    row = SkillFile.objects.get(name="release")
    assert row.content["tag"] == DEMO_RELEASE and "is not a released version" in row.error

    fake_github.inject("error", path=r"/contents/", status=502, times=20)
    report = sync_queue(on_changed=issues_changed)

    assert not report.skill_changed and skill_files.in_use().release == DEMO_RELEASE
    assert (
        "could not read .agents/skills/triaging-issues/labels.json" in SkillFile.objects.get(name="labels.json").error
    )
    client.force_login(viewer)
    assert client.get(RUBRIC).status_code == 200


def test_it_uses_the_shipped_copies_where_the_repository_has_no_skill(fake_github, client, viewer):
    sync_queue(on_changed=issues_changed, full=True)

    assert skill_files.in_use().labels == shipped().labels and skill_files.in_use().release == ""
    assert "the shipped copy is in use" in SkillFile.objects.get(name="labels.json").error
    client.force_login(viewer)
    html = client.get(RUBRIC).content.decode()
    assert "the shipped copy" in html and "No change: the skill in use is the shipped copy." in html


# --- G12 with the release read from GitHub -----------------------------------------------------------------


def test_it_gates_release_triage_on_the_release_read_from_github_g12(fake_github):
    seed_skill(fake_github)
    fake_github.add_label("release triage")
    fake_github.add_issue(1, title="Segfault in compiled masked sum", body="Segmentation fault\n\n" + ENV_2_13)
    nightly = ENV_2_13.replace("2.13.0+cu128", "2.14.0.dev20261201+cu128")
    fake_github.add_issue(2, title="Segfault in compiled cumsum", body="Segmentation fault\n\n" + nightly)

    sync_queue(on_changed=issues_changed, full=True)

    flag = Suggestion.objects.get(issue__number=1, label="release triage")
    assert flag.rule_id == "G12.1" and flag.evidence == "states 2.13.0+cu128; the latest release is v2.13.0"
    assert flag.preselected and not Suggestion.objects.filter(issue__number=2, label="release triage").exists()

    fake_github.publish_release("v2.14.0")  # a new minor: 2.13 is no longer the latest
    report = sync_queue(on_changed=issues_changed)

    assert report.skill_changed and not Suggestion.objects.filter(label="release triage").exists()
    item = next(i for i in Issue.objects.get(number=1).checklist if i["rule_id"] == "G12")
    assert "older than the latest minor 2.14" in item["text"]


def test_it_reads_who_added_high_priority_for_g12_2(fake_github):
    seed_skill(fake_github)
    fake_github.add_label("release triage")
    fake_github.add_issue(1, title="Graph break on zip", labels=["oncall: pt2", "high priority"], labelled_by="malfet")

    sync_queue(on_changed=issues_changed, full=True)

    assert LabelEvent.objects.filter(issue__number=1, label="high priority", actor="malfet").exists()
    flag = Suggestion.objects.get(issue__number=1, label="release triage")
    assert flag.rule_id == "G12.2" and flag.evidence == "high priority, added by @malfet"


# --- G9 and G10 in decisions: the replies in use ---------------------------------------------------------


def test_it_asks_for_a_self_contained_reproduction_with_the_skills_reply_and_never_triaged_g9(fake_github):
    issue = make_issue(1, labels=("oncall: pt2",))
    for name in ("needs reproduction", "module: dynamo"):
        make_label(name)

    offline = plan_changes(issue, chosen=["module: dynamo"], route=Route.REPRODUCTION, review=False)
    seed_skill(fake_github)
    fake_github.add_label("oncall: pt2")  # the issue's label: one GitHub lacks would leave it at the catalog's sync
    sync_queue(on_changed=issues_changed, full=True)
    read = plan_changes(issue, chosen=["module: dynamo"], route=Route.REPRODUCTION, review=False)
    ticked = plan_changes(issue, chosen=["needs reproduction"], route="pt2", review=False)

    assert offline.reply == "needs_reproduction"  # the shipped templates have no self-contained reply
    assert read.add == ["module: dynamo", "needs reproduction"] and read.reply == "request_self_contained_reproduction"
    assert "triaged" not in read.add and "triaged" not in ticked.add
    assert read.comment.startswith("Thanks for the report! To investigate, we need a reproduction")


def test_it_closes_expected_numerics_with_the_numerical_accuracy_reply_g10(fake_github):
    issue = make_issue(1, labels=("oncall: pt2",))
    make_label("module: edge cases")

    plan = plan_changes(issue, chosen=[], route=Route.EXPECTED_NUMERICS, review=False)
    labelled = plan_changes(issue, chosen=["module: edge cases"], route="pt2", review=False)

    assert plan.add == ["module: edge cases"] and plan.close_reason == "not_planned"
    assert plan.reply == labelled.reply == "numerical_accuracy" and "Numerical Accuracy" in plan.comment


# --- where a triager picks a label: the descriptions ------------------------------------------------------


def test_it_shows_the_skills_description_where_a_triager_picks_a_label(fake_github, client, triager):
    seed_skill(fake_github)
    fake_github.add_label("module: pt2-dispatcher")
    fake_github.add_label("module: functionalization")
    fake_github.add_issue(
        1,
        title="[functionalization] x.add_ on a view is lost under torch.compile",
        body="aot_eager gives zeros; eager gives ones.",
        comments=[{"body": "This looks like a functionalization bug.", "user": "bdhirsh"}],
    )
    sync_queue(on_changed=issues_changed, full=True)
    client.force_login(triager)

    html = client.get(reverse("rubric_app:issue", args=[1])).content.decode()

    assert "Umbrella label for PT2 dispatcher-layer issues" in html  # the skill's words, not the shipped copy's
    assert "used for issues that are specific to functionalization" in html
    assert html.count("data-description") >= 2


def test_it_offers_the_g9_route_and_the_g10_route_only_where_it_reads_an_edge_case(db):
    plain = make_issue(1)
    edge = make_issue(2, checklist=[{"rule_id": "G10", "text": "An edge case", "state": "needs_human"}])

    routes = {
        i.number: [c[0] for c in TriageForm(issue=i, suggestions=[], allowed=frozenset()).fields["route"].choices]
        for i in (plain, edge)
    }

    assert Route.REPRODUCTION in routes[1] and Route.EXPECTED_NUMERICS not in routes[1]
    assert Route.EXPECTED_NUMERICS in routes[2]


# --- G13: the blocked bot's lane; what humans may still do ---------------------------------------------------


def test_it_lists_an_issue_the_bot_left_blocked_until_a_human_triages_it_g13(client, triager):
    blocked = make_issue(1, labels=("oncall: pt2", "bot-triaged", "bot-triage-blocked"))
    make_issue(2, labels=("oncall: pt2", "bot-triaged"))
    make_issue(3, labels=("oncall: pt2", "bot-triage-blocked", "triaged"))
    client.force_login(triager)

    html = client.get(reverse("rubric_app:queue") + "?lane=blocked").content.decode()

    assert list(Issue.objects.for_queue("blocked")) == [blocked]
    assert LANE_BY_CODE["blocked"].lists(set(blocked.label_names()))
    assert 'href="/issues/1"' in html and 'href="/issues/2"' not in html


def test_it_never_hands_off_to_releng_or_a_distributed_sub_queue_g13():
    oncalls = handoff_oncalls(catalog_names())

    assert "oncall: distributed" in oncalls and "oncall: export" in oncalls
    assert "oncall: releng" not in oncalls and "oncall: distributed checkpointing" not in oncalls


def test_it_shows_what_the_bot_did_that_it_may_not_g13(client, triager):
    issue = make_issue(1, labels=("oncall: pt2", "bot-triaged", "needs reproduction"))
    for label in ("bot-triaged", "needs reproduction"):
        LabelEvent.objects.create(
            issue=issue, label=label, action="labeled", actor="github-actions[bot]", created_at=issue.created_at
        )
    client.force_login(triager)

    html = client.get(reverse("rubric_app:issue", args=[1])).content.decode()

    assert "data-bot-breaches" in html and "The bot added needs reproduction: only a human adds it" in html
