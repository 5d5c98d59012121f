"""Reviewing PyTorch's triage bot: the "bot-triaged, not reviewed" lane, confirming (a decision, no GitHub write)
and correcting (one audited write adding `bot-mislabeled`), and the feedback labels refused where the repo lacks them.
"""

from __future__ import annotations

import json

import pytest

from rubric_app.github.applying import apply_decision
from rubric_app.models import GitHubWrite, Issue, Label, TriageDecision
from rubric_app.triage.decisions import confirm_bot, correct_bot
from rubric_app.triage.followups import issues_changed
from tests.conftest import BOT_LABELS
from tests.factories import make_issue, make_label

pytestmark = pytest.mark.django_db
Status = TriageDecision.Status


def _writes(fake) -> list[tuple[str, str]]:
    return [(r.method, r.path) for r in fake.requests if r.method != "GET"]


def test_it_lists_bot_triaged_issues_no_decision_covers(bot_issue, triager):
    make_issue(1002, labels=("oncall: pt2", "bot-triaged"))  # the bot did not add triaged: listed too
    make_issue(1003, labels=("oncall: pt2", "triaged"))  # no bot
    refused = make_issue(1004, labels=("oncall: pt2", "bot-triaged"))
    TriageDecision.objects.create(issue=refused, user=triager, status=Status.REFUSED)
    covered = make_issue(1005, labels=("oncall: pt2", "bot-triaged"))
    TriageDecision.objects.create(issue=covered, user=triager, status=Status.APPLIED)

    assert sorted(Issue.objects.for_queue("bot").values_list("number", flat=True)) == [1001, 1002, 1004]
    assert "bot" in bot_issue.queue_lanes()


def test_it_reads_the_lane_in_constant_queries(bot_issue, django_assert_num_queries):
    for number in range(2000, 2020):
        make_issue(number, labels=("oncall: pt2", "bot-triaged", "module: inductor"))

    with django_assert_num_queries(3):  # the rows, their labels, their suggestions
        assert len(list(Issue.objects.for_queue("bot"))) == 21


def test_it_confirms_the_bots_labels_as_a_decision_with_no_github_write(bot_issue, triager, fake_github):
    decision = confirm_bot(issue=bot_issue, user=triager, labels_seen=bot_issue.label_names())

    assert (decision.status, decision.bot_review, decision.labels_added) == (Status.APPLIED, "confirmed", [])
    assert _writes(fake_github) == [] and not GitHubWrite.objects.exists()
    assert not Issue.objects.for_queue("bot").filter(pk=bot_issue.pk).exists()


@pytest.mark.parametrize("persona", ["viewer", "outsider"])
def test_it_refuses_a_confirmation_without_the_triager_role(bot_issue, persona, request):
    user = request.getfixturevalue(persona)

    decision = confirm_bot(issue=bot_issue, user=user, labels_seen=bot_issue.label_names())

    assert decision.status == Status.REFUSED and "triager role" in decision.result_message
    assert Issue.objects.for_queue("bot").filter(pk=bot_issue.pk).exists()


def test_it_refuses_to_confirm_an_issue_the_bot_did_not_label(db, triager):
    issue = make_issue(1009, labels=("oncall: pt2",))

    decision = confirm_bot(issue=issue, user=triager, labels_seen=issue.label_names())

    assert decision.status == Status.REFUSED and "bot-triaged" in decision.result_message


def test_it_corrects_the_bot_in_one_audited_decision(bot_issue, triager, fake_github):
    decision = correct_bot(
        issue=bot_issue,
        user=triager,
        add=["module: dynamo"],
        remove=["module: inductor"],
        labels_seen=bot_issue.label_names(),
        repro_incorrect=True,
    )
    assert decision.status == Status.PENDING, decision.result_message

    decision = apply_decision(decision.pk)

    assert decision.status == Status.APPLIED, decision.result_message
    assert decision.bot_review == "mislabeled"
    assert decision.labels_added == ["bot-mislabeled", "module: dynamo", "repro:agent:h100:incorrect"]
    assert fake_github.labels_of(1001) == [
        "bot-mislabeled",
        "bot-triaged",
        "module: dynamo",
        "oncall: pt2",
        "repro:agent:h100:incorrect",
        "triaged",
    ]
    audited = list(decision.writes.exclude(action__in=["read_labels", "read_label"]).values_list("action", "target"))
    assert audited == [
        ("add_label", "bot-mislabeled"),
        ("add_label", "module: dynamo"),
        ("add_label", "repro:agent:h100:incorrect"),
        ("remove_label", "module: inductor"),
    ]  # each write audited, one per HTTP call
    assert len(_writes(fake_github)) == len(audited)


@pytest.mark.parametrize("missing", ["bot-mislabeled", "repro:agent:h100:incorrect"])
def test_it_refuses_a_feedback_label_the_repository_lacks(bot_issue, triager, fake_github, missing):
    Label.objects.filter(name=missing).update(in_catalog=False)  # gone from GitHub at the last label sync

    decision = correct_bot(
        issue=bot_issue, user=triager, add=[], remove=[], labels_seen=bot_issue.label_names(), repro_incorrect=True
    )

    assert decision.status == Status.REFUSED and missing in decision.result_message
    assert _writes(fake_github) == []


def test_it_refuses_other_labels_outside_the_catalog(bot_issue, triager):
    make_label("topic: not suggested", allowed=False)

    decision = correct_bot(
        issue=bot_issue, user=triager, add=["topic: not suggested"], remove=[], labels_seen=bot_issue.label_names()
    )

    assert decision.status == Status.REFUSED and "catalog" in decision.result_message


# --- views ------------------------------------------------------------------------------------

HTMX = {"HX-Request": "true"}


def _queries(client, url, **kwargs) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as seen:
        assert client.get(url, **kwargs).status_code == 200
    return len(seen)


def test_it_shows_the_bot_lane_in_queries_constant_in_the_number_of_issues(client, triager, bot_issue):
    client.force_login(triager)
    few = _queries(client, "/?lane=bot")
    for number in range(3000, 3015):
        make_issue(number, title=f"<script>bad {number}</script>", labels=("oncall: pt2", "bot-triaged"))
    client.get("/?lane=all")  # any cache built against the smaller table is stale now

    many = _queries(client, "/?lane=bot&x=1")
    html = client.get("/?lane=bot").content.decode()

    assert many == few
    assert html.count("data-bot-confirm") == 16 and "<script>bad" not in html  # `a` keeps the bot's labels


def test_it_offers_no_confirmation_to_a_viewer_in_the_lane(client, viewer, bot_issue):
    client.force_login(viewer)
    html = client.get("/?lane=bot").content.decode()
    assert "#1001" in html and "data-bot-confirm" not in html


def test_it_confirms_from_the_queue_with_htmx_and_without_js(client, triager, bot_issue, fake_github):
    client.force_login(triager)
    seen = {"labels_seen": bot_issue.label_names()}

    html = client.post("/issues/1001/bot/confirm", seen, headers=HTMX).content.decode()

    assert 'data-bot-review="confirmed"' in html and "kept" in html and "<html" not in html
    assert _writes(fake_github) == []
    TriageDecision.objects.all().delete()
    response = client.post("/issues/1001/bot/confirm", seen)
    assert response.status_code == 302 and TriageDecision.objects.get().bot_review == "confirmed"


@pytest.mark.parametrize("persona", ["viewer", "outsider"])
def test_it_forbids_reviewing_the_bot_without_the_triager_role(client, bot_issue, persona, request):
    client.force_login(request.getfixturevalue(persona))
    for action in ("confirm", "correct"):
        assert client.post(f"/issues/1001/bot/{action}", {"labels_seen": "[]"}).status_code == 403
    assert not TriageDecision.objects.exists()


def test_it_shows_the_automation_panel_and_corrects_the_bot(client, triager, bot_issue, fake_github):
    client.force_login(triager)
    page = client.get("/issues/1001").content.decode()
    assert 'id="automation"' in page and "Not reviewed" in page and "data-bot-correct" in page
    data = {
        "labels_seen": json.dumps(bot_issue.label_names()),
        "keep": ["bot-triaged", "oncall: pt2", "triaged"],
        "add": ["module: dynamo"],
    }

    response = client.post("/issues/1001/bot/correct", data)

    decision = TriageDecision.objects.get()
    assert response.status_code == 302, response.content.decode()[:2000]
    assert (decision.bot_review, decision.labels_added, decision.labels_removed) == (
        "mislabeled",
        ["bot-mislabeled", "module: dynamo"],
        ["module: inductor"],
    )


def test_it_shows_no_automation_panel_without_the_bot(client, viewer, db):
    make_issue(1010, labels=("oncall: pt2",))
    client.force_login(viewer)
    assert 'id="automation"' not in client.get("/issues/1010").content.decode()


# --- rubric health ----------------------------------------------------------------------------


def test_it_counts_what_triagers_kept_and_removed_of_the_bots_labels(client, triager, chair, bot_issue, fake_github):
    client.force_login(chair)
    assert "No triager has reviewed the bot yet." in client.get("/rubric").content.decode()
    confirm_bot(issue=bot_issue, user=triager, labels_seen=bot_issue.label_names())
    other = make_issue(1011, labels=BOT_LABELS)
    fake_github.add_issue(1011, labels=list(BOT_LABELS))
    wrong = correct_bot(
        issue=other, user=triager, add=["module: dynamo"], remove=["module: inductor"], labels_seen=other.label_names()
    )
    apply_decision(wrong.pk)

    html = client.get("/rubric").content.decode()

    row = html.split('data-bot-label="module: inductor"')[1].split("</tr>")[0]
    assert '<td data-col="kept">1</td>' in row and '<td data-col="removed">1</td>' in row
    assert 'data-bot-label="bot-triaged"' not in html and 'data-bot-label="bot-mislabeled"' not in html
    triaged = html.split('data-bot-label="triaged"')[1].split("</tr>")[0]
    assert '<td data-col="kept">2</td>' in triaged and '<td data-col="removed">0</td>' in triaged


# --- the demo ---------------------------------------------------------------------------------


def test_it_ships_demo_issues_for_the_bot_lane_with_the_feedback_labels_on_the_repo(fake_github):
    from django.core.management import call_command

    from rubric_app.demo.github_seeds import seed_demo
    from rubric_app.demo.github_server import FakeGitHub

    call_command("load_demo")
    fake = FakeGitHub("pytorch/pytorch")
    seed_demo(fake)

    assert sorted(Issue.objects.for_queue("bot").values_list("number", flat=True)) == [170201, 170202, 170203]
    assert Label.objects.feedback_catalog() == {"bot-mislabeled", "repro:agent:h100:incorrect"}
    assert not {"bot-mislabeled", "repro:agent:h100:incorrect"} & Label.objects.triage_catalog()  # never suggested
    assert {"bot-mislabeled", "repro:agent:h100:incorrect"} <= set(fake.labels)
    agent = Issue.objects.get(number=170201).comments.get().body
    assert agent.startswith("## 🤖 PT2 Repro Agent") and "def test_fn() -> bool:" in agent


# --- sync: label events where automation labelled the issue, counted in the request budget ------------


def test_it_reads_label_events_only_for_issues_automation_labelled(fake_github):
    from rubric_app.github.sync import sync_queue
    from rubric_app.models import LabelEvent

    for number in range(1, 21):
        fake_github.add_issue(number, labels=["oncall: pt2"], comments=["c"])
    fake_github.add_issue(
        30, labels=["oncall: pt2", "module: inductor", "bot-triaged"], labelled_by="github-actions[bot]"
    )
    fake_github.add_issue(31, labels=["oncall: pt2", "repro:agent:h100:repro_success:reproduce"], user="reporter")
    fake_github.set_labels(30, ["oncall: pt2", "bot-triaged"], actor="tri-ager")  # a person took a label off

    report = sync_queue(on_changed=issues_changed, full=True)

    events = fake_github.requests_to(r"/issues/\d+/events$", "GET")
    assert sorted(r.path.split("/")[-2] for r in events) == ["30", "31"]  # never for the 20 without automation
    # The floor: a list page per queue label (2), 20 comment pages (30 and 31 have none), the catalog (1), the triage
    # skill's two files and latest release (3); plus one events page for each of the two issues automation labelled.
    assert report.requests == len(fake_github.requests) == 2 + 20 + 1 + 3 + 2
    bot = [(e.action, e.label, e.actor) for e in LabelEvent.objects.filter(issue__number=30)]
    assert ("labeled", "bot-triaged", "github-actions[bot]") in bot
    assert ("unlabeled", "module: inductor", "tri-ager") in bot
    report = sync_queue(on_changed=issues_changed, full=True)  # nothing changed: no event is read again
    assert len(fake_github.requests_to(r"/issues/\d+/events$", "GET")) == 2


def test_it_shows_what_the_bot_labelled_from_the_label_events(client, viewer, bot_issue):
    from django.utils import timezone

    from rubric_app.models import LabelEvent

    for label, actor in (("module: inductor", "github-actions[bot]"), ("oncall: pt2", "<b>reporter</b>")):
        LabelEvent.objects.create(
            issue=bot_issue, label=label, action="labeled", actor=actor, created_at=timezone.now()
        )
    client.force_login(viewer)

    html = client.get("/issues/1001").content.decode()

    shown = html.split("data-bot-labelled>")[1].split("</p>")[0]
    assert "module: inductor" in shown and "github-actions[bot]" in shown and "oncall: pt2" not in shown
    assert "data-bot-correct" not in html  # a viewer sees the panel, not the actions


def test_it_offers_the_repro_agents_script_for_bisection_in_one_click(client, triager, bot_issue):
    from django.utils import timezone

    from rubric_app.models import Comment

    body = (
        "## 🤖 PT2 Repro Agent\n\n**Outcome:** ✅ Reproduced (3/3 runs)\n\n<details><summary>Repro script</summary>\n\n"
        "```python\nimport os\nimport torch\n\n\ndef test_fn() -> bool:\n"
        '    x = torch.ones(2, device="cuda")\n'
        "    return bool(x.sum() == 2)  # </textarea><script>x</script>\n```\n</details>"
    )
    Comment.objects.create(issue=bot_issue, github_id=1, author="karthickai", body=body, created_at=timezone.now())
    client.force_login(triager)
    page = client.get("/issues/1001").content.decode()
    assert "data-agent-bisect" in page and "data-agent-cuda" in page  # the script needs CUDA: said so

    page = client.get("/issues/1001?repro=agent").content.decode()

    form = page.split('id="bisect-form"')[1].split("</form>")[0]
    assert "def test_fn() -&gt; bool:" in form and "<script>x" not in form


# --- provenance: who may speak as the automation (issue #35) ----------------------------------------------------

SPOOFED_AGENT = (
    "**🤖 PT2 Repro Agent**\n\nI tried to reproduce this issue on PyTorch nightly (`2.13.0.dev20260601+cu130`) on "
    "NVIDIA H100 and confirmed it reproduces (3/3 runs failed).\n\nAll 3 runs crashed with a segmentation fault.\n\n"
    "CompilerBisector: backend `aot_eager`, subsystem `decomposition`.\n\n"
    "```python\nimport os\nimport torch\n\n\ndef test_fn() -> bool:\n    return False\n```\n"
)
UNABLE = "My agent was unable to reproduce this on 4d0ea4be9ab1e959159ecbbed59d7162086d5039. Reopen if you see it."


@pytest.mark.parametrize(
    ("poster", "association", "unable_by", "spoofed"),
    [("mallory", "NONE", "drive-by", True), ("karthickai", "MEMBER", "jansel", False)],
)
def test_it_shows_who_posted_each_automation_fact_and_uses_only_the_automations_own(
    client, triager, fake_github, settings, poster, association, unable_by, spoofed
):
    # Through the real sync: PyGithub reads the issue, its comments and their author_association over HTTP.
    settings.AUTO_BISECT = "off"
    make_label("oncall: pt2")
    fake_github.add_issue(1020, title="Crash in the compiled backward", body="It crashes.", user="mallory")
    fake_github.add_comment(1020, SPOOFED_AGENT, user=poster, association=association)
    fake_github.add_comment(1020, UNABLE, user=unable_by, association=association)
    from rubric_app.github.sync import sync_queue

    sync_queue(on_changed=issues_changed, full=True)
    issue = Issue.objects.get(number=1020)
    assert sorted(issue.comments.values_list("author", "author_association")) == sorted(
        [(poster, association), (unable_by, association)]
    )
    client.force_login(triager)

    page = client.get("/issues/1020").content.decode()

    panel = page.split('id="automation"')[1].split("</section>")[0]
    cited = [c for c in issue.checklist if "PT2 Repro Agent" in c["text"] or "CompilerBisector" in c["text"]]
    if spoofed:
        assert f"claimed by @{poster}, not a known automation account" in panel
        assert f"claimed by @{unable_by}, not a known automation account" in panel
        assert "data-poster" not in panel and "data-agent-bisect" not in page  # no one-click script from a claim
        assert cited == []  # no checklist item (R11, R2.1, R2.4) cites a claim
    else:
        assert f'data-poster="{poster}">posted by @{poster}' in panel and f"posted by @{unable_by}" in panel
        assert "data-claimed" not in panel and "data-agent-bisect" in page
        assert {c["rule_id"] for c in cited} == {"R11", "R2.1", "R2.4"}


def test_it_names_who_added_the_repro_agents_label_from_the_label_events(client, viewer, db):
    from django.utils import timezone

    from rubric_app.models import LabelEvent

    label = "repro:agent:h100:repro_success:reproduce"
    issue = make_issue(1030, labels=("oncall: pt2", label))
    LabelEvent.objects.create(issue=issue, label=label, action="labeled", actor="karthickai", created_at=timezone.now())
    client.force_login(viewer)

    html = client.get("/issues/1030").content.decode()

    line = html.split("data-agent-label>")[1].split("</li>")[0]
    assert "reproduced" in line and 'data-labelled-by="karthickai">labelled by @karthickai' in line
