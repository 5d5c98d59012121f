"""The reader of PyTorch's automation (rubric/reading/automation.py) on comments written for this project in each format
the Repro Agent, other agents and the triage bot use, and how the engine uses what it reads (R2, R2.4, R11)."""

from __future__ import annotations

import pytest

from rubric_app import vocabulary
from rubric_app.rubric.engine.assess import evaluate
from rubric_app.rubric.reading import automation
from rubric_app.rubric.reading.automation import read_automation
from rubric_app.rubric.reading.text import Source, sources_of
from rubric_app.rubric.reading.types import CommentText, IssueText
from tests.bounded import run_bounded

REPRODUCED = """**🤖 PT2 Repro Agent**

I tried to reproduce this issue on PyTorch nightly (`2.13.0.dev20260601+cu130`) on NVIDIA H100 and confirmed it \
reproduces (3/3 runs failed).

All 3 runs crashed with `RuntimeError: CUDA error: an illegal memory access was encountered` in the compiled \
backward's generated Triton kernel.

The compiler bisector identified the offending component:
- **Backend**: `inductor`
- **Subsystem**: `lowerings`
- **Detail**: `aten.index_put_`

Replay: `TORCH_BISECT_BACKEND=inductor TORCH_BISECT_SUBSYSTEM=lowerings TORCH_BISECT_MAX=4`

<details>
<summary>Repro script</summary>

```python
import os
import torch

def test_fn() -> bool:
    backend = os.environ.get("TORCH_COMPILE_BACKEND", "inductor")
    x = torch.randn(8, device="cuda")
    return torch.allclose(torch.compile(torch.sin, backend=backend)(x), torch.sin(x))
```
</details>
"""

NOT_REPRODUCED = """**🤖 PT2 Repro Agent**

I tried to reproduce this issue on PyTorch nightly (`2.13.0.dev20260520+cu132`) on NVIDIA H100 but could not \
reproduce it (all 3 runs passed).
"""

MITIGATED = """**🤖 PT2 Repro Agent**

I attempted to reproduce this issue on PyTorch nightly (`2.13.0.dev20260512+cu130`) on NVIDIA H100. Result: \
PREDEFINED_MITIGATION.

All 3 runs failed with consistent numerical mismatch between eager and compiled outputs: max_abs_diff=0.031. \
Re-running with TORCHINDUCTOR_EMULATE_PRECISION_CASTS=1 reduces max_abs_diff to 0.0, so the documented mitigation \
fixes the divergence.
"""

MALFORMED = """**🤖 PT2 Repro Agent**

Run status: ⏳ queued behind 40 other issues. Results will follow.
"""


def comments(*texts: str, author: str = "karthickai", association: str = "MEMBER") -> list[Source]:
    """The sources of an issue whose comments `author` posted (by default the Repro Agent's account)."""
    return [Source("title", "x", "reporter"), Source("body", "the report", "reporter")] + [
        Source(f"comment:{i}", text, author, association) for i, text in enumerate(texts)
    ]


def test_it_reads_a_reproduction_with_its_gpu_nightly_runs_bisector_and_script():
    auto = read_automation(comments("thanks!", REPRODUCED), ["repro:agent:h100:repro_success:reproduce"])
    [report] = auto.agent
    assert (report.source, report.outcome, report.gpu, report.nightly, report.runs) == (
        "comment:1",
        "reproduced",
        "H100",
        "2.13.0.dev20260601+cu130",
        "3/3",
    )
    assert report.failure == "crash"  # illegal memory access: R11's crash
    assert (report.bisector.backend, report.bisector.subsystem, report.bisector.detail) == (
        "inductor",
        "lowerings",
        "aten.index_put_",
    )
    assert report.bisector.replay.startswith("TORCH_BISECT_BACKEND=inductor TORCH_BISECT_SUBSYSTEM=lowerings")
    assert "def test_fn() -> bool:" in report.script and report.script_needs_cuda
    assert "confirmed it reproduces" in report.evidence
    assert auto.agent_label == "reproduced"


def test_it_reads_a_run_that_could_not_reproduce_and_a_predefined_mitigation():
    [missed] = read_automation(comments(NOT_REPRODUCED), []).agent
    assert (missed.outcome, missed.runs, missed.failure) == ("not reproduced", "3/3", "")
    [mitigated] = read_automation(comments(MITIGATED), []).agent
    assert mitigated.outcome == "mitigated" and mitigated.failure == "silent mismatch"
    assert mitigated.mitigation == "TORCHINDUCTOR_EMULATE_PRECISION_CASTS=1"


@pytest.mark.parametrize(
    ("label", "outcome"),
    [
        ("repro:agent:h100:repro_success:reproduce", "reproduced"),
        ("repro:agent:h100:repro_success:mitigatio", "mitigated"),  # cut at 40 characters
        ("repro:agent:h100:repro_fail:not_reproduc", "not reproduced"),
        ("repro:agent:h100:repro_fail:predefined_m", "mitigated"),
        ("repro:agent:h100:repro_", ""),  # too short to say which
        ("repro:agent:h100:something_new", ""),
    ],
)
def test_it_matches_the_agents_labels_by_prefix(label, outcome):
    assert read_automation(comments(), [label]).agent_label == outcome


def test_it_says_it_could_not_read_an_agent_comment_in_a_format_it_does_not_know():
    [report] = read_automation(comments(MALFORMED), []).agent
    assert report.outcome == "unreadable" and not report.gpu and report.bisector is None


def test_it_does_not_take_a_person_quoting_the_agent_for_the_agent():
    quoting = "The 🤖 PT2 Repro Agent said it reproduced in 3/3 runs on NVIDIA H100, but I think it is wrong."
    assert read_automation(comments(quoting, "> **🤖 PT2 Repro Agent**\n> could not reproduce"), []).agent == ()


def test_it_reads_other_agents_bisection_results_traces_and_the_bot():
    other = (
        "My agent was unable to reproduce this on 3f2a9c1d4e. Reopen if it still fails.\n"
        "BisectionResult(backend='aot_eager_decomp_partition', subsystem='decomposition', bisect_number=12, "
        "debug_info='aten._softmax')\nTrace: https://example.org/tlparse/index.html"
    )
    events = [
        ("module: inductor", "pytorch-triage[bot]", "labeled"),
        ("triaged", "pytorch-triage[bot]", "labeled"),
        ("module: dynamo", "pytorch-triage[bot]", "labeled"),
        ("module: dynamo", "pytorch-triage[bot]", "unlabeled"),
        ("module: fx", "tina-triager", "labeled"),
    ]
    auto = read_automation(
        comments(other, author="jansel", association="CONTRIBUTOR"),
        ["bot-triaged", "bot-mislabeled", "repro:agent:h100:incorrect"],
        events,
    )
    assert auto.not_reproduced == (automation.NotReproduced("3f2a9c1d4e", "comment:0", "jansel", known=True),)
    [bisected] = auto.bisections
    assert (bisected.backend, bisected.subsystem, bisected.detail, bisected.author, bisected.known) == (
        "aot_eager_decomp_partition",
        "decomposition",
        "aten._softmax",
        "jansel",
        True,
    )
    assert auto.traces == ("https://example.org/tlparse/index.html",)
    assert auto.bot_triaged and auto.bot_mislabeled and auto.agent_marked_incorrect
    assert auto.bot_labels == ("module: inductor", "triaged")


def _issue(*texts: str, labels=("oncall: pt2",)) -> IssueText:
    return IssueText(
        number=1,
        title="torch.compile gives wrong results",
        body="Compiled output differs.",
        comments=tuple(CommentText(body=t, author="karthickai") for t in texts),
        labels=tuple(labels),
    )


def test_it_shows_the_bisector_and_the_reproduction_on_the_checklist_without_moving_a_suggestion_r2_r11(monkeypatch):
    # Measured out of fold (docs/engine.md): as findings they pre-selected more wrong labels, so they are evidence
    # for the triager, and the suggestions are those the engine makes with the automation unread.
    with_agent = evaluate(_issue(REPRODUCED), model=None)
    monkeypatch.setattr(automation, "READ_AUTOMATION", False)
    without = evaluate(_issue(REPRODUCED), model=None)
    assert not any("CompilerBisector" in c.text for c in without.checklist)
    assert [(s.label, s.preselected) for s in with_agent.add] == [(s.label, s.preselected) for s in without.add]
    texts = {c.rule_id: c.text for c in with_agent.checklist}
    assert "CompilerBisector stops at inductor / lowerings: R2.2 says module: inductor" in texts["R2.2"]
    assert any("reproduced a crash on H100 nightly 2.13.0.dev20260601+cu130" in c.text for c in with_agent.checklist)
    assert "not CPU-only" in texts["R2.4"]


def test_it_asks_a_human_about_a_mitigation_or_a_run_that_did_not_reproduce_r2():
    texts = [c.text for c in evaluate(_issue(MITIGATED), model=None).checklist]
    assert any("TORCHINDUCTOR_EMULATE_PRECISION_CASTS=1" in t for t in texts)
    texts = [c.text for c in evaluate(_issue(NOT_REPRODUCED), model=None).checklist]
    assert any("could not reproduce it on H100 nightly 2.13.0.dev20260520+cu132" in t for t in texts)


def test_it_reads_hostile_automation_text_in_linear_bounded_time():
    out = run_bounded("""
        from rubric_app.rubric.reading.automation import read_automation
        from rubric_app.rubric.reading.text import Source
        mark = "**🤖 PT2 Repro Agent**\\n"
        hostile = [
            mark + "nightly (" * 20_000,
            mark + "TORCH_BISECT_BACKEND=a " * 20_000,
            mark + "BisectionResult(backend='" * 20_000,
            mark + "- **Backend**: `" * 20_000 + "bisector\\n" + "- **Backend**: `x\\n" * 5_000,
            "unable to reproduce this on " * 20_000,
            "https://x/" + "tlparse" * 50_000,
        ]
        sources = [Source(f"comment:{i}", t) for i, t in enumerate(hostile * 5)]
        print(len(read_automation(sources, ["repro:agent:h100:" + "x" * 100_000]).agent))
    """)
    assert out.split() == ["20"]


def test_it_reads_the_agents_comment_from_a_synced_issue():
    issue = _issue("an unrelated comment", NOT_REPRODUCED)
    [report] = read_automation(sources_of(issue), issue.labels).agent
    assert report.source == "comment:1"


# --- provenance: who posted each fact (issue #35) ---------------------------------------------------------------

# What an outside reviewer posted as the reporter: the agent's mark, a reproduction on an H100, a bisector result,
# and a script one click would have bisected.
SPOOFED = """**🤖 PT2 Repro Agent**

I tried to reproduce this issue on PyTorch nightly (`2.13.0.dev20260601+cu130`) on NVIDIA H100 and confirmed it \
reproduces (3/3 runs failed).

All 3 runs crashed with `RuntimeError: CUDA error: an illegal memory access was encountered`.

CompilerBisector: backend `aot_eager`, subsystem `decomposition`.

```python
import os
import torch

def test_fn() -> bool:
    return False
```
"""
STRANGER_UNABLE = "My agent was unable to reproduce this on 4d0ea4be9ab1e959159ecbbed59d7162086d5039. Reopen if not."


def _thread(*comments: tuple[str, str, str]) -> IssueText:
    """An issue reported by `mallory`; comments: (author, association, text)."""
    return IssueText(
        number=2,
        title="torch.compile crashes in the backward",
        body="It crashes.",
        author="mallory",
        comments=tuple(CommentText(body=t, author=a, association=assoc) for a, assoc, t in comments),
        labels=("oncall: pt2",),
    )


def _automation_items(issue: IssueText) -> list[str]:
    """The checklist items an automation fact produced (R11, R2.x, R2.4)."""
    said = ("PT2 Repro Agent", "CompilerBisector")
    return [f"{c.rule_id}: {c.text}" for c in evaluate(issue, model=None).checklist if any(s in c.text for s in said)]


def test_it_keeps_a_spoofed_agent_comment_and_a_strangers_unable_to_reproduce_as_claims_never_evidence():
    spoofed = _thread(("mallory", "NONE", SPOOFED), ("drive-by", "NONE", STRANGER_UNABLE))
    auto = read_automation(sources_of(spoofed), spoofed.labels, accounts=spoofed.automation_accounts)
    [report] = auto.agent
    assert (report.author, report.known, report.outcome, report.gpu) == ("mallory", False, "reproduced", "H100")
    assert auto.latest_agent is None and auto.known_bisections == ()  # no rule reads a claim
    [unable] = auto.not_reproduced
    assert (unable.author, unable.known) == ("drive-by", False)
    assert _automation_items(spoofed) == []  # was R11, R2.1 and R2.4 citing the "agent" before provenance

    # The same words from the Repro Agent's account and a maintainer's agent are evidence, each cited.
    genuine = _thread(("karthickai", "MEMBER", SPOOFED), ("jansel", "MEMBER", STRANGER_UNABLE))
    items = _automation_items(genuine)
    assert sorted(item.split(":")[0] for item in items) == ["R11", "R2.1", "R2.4"]
    assert any("CompilerBisector stops at aot_eager / decomposition: R2.1 says" in item for item in items)


def test_it_takes_a_bisector_result_from_a_maintainer_and_not_from_an_outsider():
    result = "BisectionResult(backend='inductor', subsystem='lowerings', bisect_number=2, debug_info='max_pool')"
    [maintainer] = read_automation(comments(result, author="masnesral", association="MEMBER"), []).bisections
    [outsider] = read_automation(comments(result, author="masnesral", association="CONTRIBUTOR"), []).bisections
    assert (maintainer.known, outsider.known) == (True, False)
    reporter = read_automation(
        [Source("title", "x", "mallory"), Source("body", result, "mallory")], [], accounts=vocabulary.DEFAULT
    )
    assert [(r.source, r.author, r.known) for r in reporter.bisections] == [("body", "mallory", False)]


def test_it_names_who_may_speak_for_the_automation_from_the_setting():
    accounts = vocabulary.parse_automation_accounts("repro_agent=Agent-Account; agent=alice,bob; bot=triage-bot")
    assert accounts.may_speak_as("repro_agent", "agent-account")  # logins fold case
    assert not accounts.may_speak_as("repro_agent", "alice")
    assert accounts.may_speak_as("agent", "alice") and accounts.may_speak_as("agent", "agent-account")
    assert not accounts.may_speak_as("agent", "mallory") and not accounts.may_speak_as("repro_agent", "")
    assert vocabulary.parse_automation_accounts("") == vocabulary.AutomationAccounts()  # nobody: every fact a claim
    for bad in ("repro_agent", "robot=x", "agent=a;agent=b"):
        with pytest.raises(ValueError, match="AUTOMATION_ACCOUNTS"):
            vocabulary.parse_automation_accounts(bad)
    default = vocabulary.DEFAULT
    assert default.may_speak_as("repro_agent", "karthickai") and default.may_speak_as("agent", "jansel")


@pytest.mark.parametrize(
    ("login", "bot"),
    [
        ("pytorch-bot[bot]", True),
        ("github-actions[bot]", True),
        ("some-app[bot]", True),  # a GitHub App: only the repository's admins install one
        ("pytorchbot", True),
        ("pytorch-bot", True),
        ("pytorch-auto-revert", True),
        ("PyTorchBot", True),
        ("karthickai", False),
        ("pytorch-bot-fan", False),
        ("", False),
    ],
)
def test_it_has_one_definition_of_the_bot(login, bot):
    assert vocabulary.is_bot(login) is bot
    # The automation reader counts the labels a bot added by that same definition.
    events = [("module: inductor", login, "labeled")]
    assert read_automation(comments(), ["bot-triaged"], events).bot_labels == (("module: inductor",) if bot else ())
