"""Weighing the evidence before `a` pre-selects (rubric/engine/weighing.py, rubric/engine/settled.py), on real issue
texts: the demo's reports (#170032, #170059, #170068, #170122, #170203, #170014/#170140) and the training pool's
(tests/data; never the held-out slice). R11 binds; R11's evidence is never a file name; a verdict that contradicts
the thread or rests on a harness limit is weighed, not obeyed; issues sharing a failure share their evidence.

Each engine test runs on the rules alone and with the shipped learned labeler, which must not undo any of it.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest

from rubric_app.rubric.engine.assess import evaluate, shipped_model
from rubric_app.rubric.engine.settled import run_notes, settled, shared_among
from rubric_app.rubric.engine.weighing import in_file_name, limitation
from rubric_app.rubric.offline.evaluation import is_held_out, issue_from_record
from rubric_app.rubric.reading.types import BisectionEvidence, CommentText, IssueText

ROOT = Path(__file__).resolve().parents[2]
DEMO_FILE = ROOT / "rubric_app" / "demo" / "demo_issues.json"
POOL_FILES = (ROOT / "tests" / "data" / "pt2_dev.jsonl", ROOT / "tests" / "data" / "pt2_train.jsonl")

# What a CPU bisection of #170032's repro on torch 2.13.0+cpu concluded (`manage.py bisect_repro`: eager and the
# eager backend pass, aot_eager raises): the harness's aot backends cannot run a double backward at all.
DOUBLE_BACKWARD = (
    "fails on aot_eager, passes on backend=eager: RuntimeError: torch.compile with aot_autograd does not currently "
    "support double backward [runtime]"
)


@cache
def _demo() -> dict[int, dict]:
    return {item["number"]: item for item in json.loads(DEMO_FILE.read_text())["issues"]}


def demo(number: int, **changes) -> IssueText:
    """A demo issue as the engine reads a synced one: its text, comments with authors, labels."""
    item = _demo()[number]
    text = IssueText(
        number=number,
        title=item["title"],
        body=item["body"],
        comments=tuple(CommentText(c["body"], author=c["author"]) for c in item.get("comments", [])),
        labels=tuple(item["labels"]),
        author=item["author"],
    )
    return replace(text, **changes)


@cache
def _pool() -> dict[int, dict]:
    records = [json.loads(line) for path in POOL_FILES for line in path.read_text().splitlines() if line.strip()]
    return {r["number"]: r for r in records if not is_held_out(r)}  # the held-out slice's issues are never read


def pool(number: int) -> IssueText:
    """A training-pool issue, its labels hidden (they are the humans' answer)."""
    return issue_from_record(_pool()[number], use_labels=False)


def review(a):
    return next(s for s in a.add if s.label == "triage review")


# --- R11 binds --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "source, number, evidence",
    [
        ("demo", 170068, "wrong outputs"),  # a silently wrong result named in the title
        ("demo", 170059, "output wrong"),  # "... output wrong inside torch.compile region; correct when called eagerly"
        ("demo", 170032, "gradient of `F.silu` is wrong"),
        ("demo", 170137, "Segmentation fault"),
        ("demo", 170092, "illegal memory access"),
        ("demo", 170098, "Regression"),  # "... fails; worked in 2.5"
        ("demo", 170101, "Flaky"),
        ("pool", 113740, "segmentation fault"),
        ("pool", 117627, "core dumped"),
        ("pool", 133571, "after upgrading"),
        ("pool", 100075, "does not match eager"),  # "[compile] output does not match eager mode"
    ],
)
def test_it_preselects_triage_review_and_never_triaged_where_r11_binds(use_model, source, number, evidence):
    a = evaluate(demo(number) if source == "demo" else pool(number), use_model=use_model)
    assert "triage review" in a.preselected(), a.preselected()
    assert "triaged" not in a.labels()  # so `a` cannot apply it (decisions.plan_changes flags instead)
    assert evidence in review(a).evidence and review(a).rule_id == "R11"
    [item] = [c for c in a.checklist if c.rule_id == "R11"]
    assert item.state == "satisfied"


def test_it_never_lets_the_learned_score_remove_a_flag_a_rule_found():
    # A model whose review bar nothing reaches: it may add a flag, never remove R11's (#170068's wrong outputs).
    strict = replace(shipped_model(), thresholds={**shipped_model().thresholds, "review": 1.0})
    a = evaluate(demo(170068), model=strict)
    assert "triage review" in a.preselected() and "triaged" not in a.labels()
    # A flag the learned score alone raised is offered, not ticked, and the checklist asks (#170122).
    learned = evaluate(demo(170122), model=lenient())
    assert review(learned).source == "model" and not review(learned).preselected
    [item] = [c for c in learned.checklist if c.rule_id == "R11"]
    assert item.state == "needs_human" and "learned score" in item.text


def test_it_leaves_a_performance_regression_to_the_meetings_judgement(use_model):
    # #170086: a compile-time regression, R11's "important model, more than 10%" clause: offered, not bound.
    a = evaluate(demo(170086), use_model=use_model)
    flag = [s for s in a.add if s.label == "triage review"]
    assert not flag or not flag[0].preselected
    assert all(s.reason.startswith("a performance regression") for s in flag)


def test_it_reads_a_verdicts_crash_as_binding(use_model):
    verdict = BisectionEvidence("triage review", "R11", "crash on inductor", 12)
    a = evaluate(demo(170140, bisection=(verdict,)), use_model=use_model)
    assert "triage review" in a.preselected() and "triaged" not in a.labels()


# --- R11's evidence is the issue's text, never a file name ----------------------------------------------


@pytest.mark.parametrize(
    "text, word, named",
    [
        ("python segfault.py", "segfault", True),
        ('File "/home/ana/crash.py", line 3', "crash", True),
        ("see https://example.com/segfault-report", "segfault", True),
        ("it dies with a segfault.", "segfault", False),
        ("[torch.compile] Clarification/regression: Dynamo cache lookup", "regression", False),  # pool #185886
        ("a fused kernel ~15x slower than eager", "15x", False),
        ("~/repro/crash_it.py", "repro", True),
        ("Segmentation fault (core dumped)", "Segmentation fault", False),
    ],
)
def test_it_tells_a_file_name_from_the_text(text, word, named):
    start = text.index(word)
    assert in_file_name(text, start, start + len(word)) is named


def test_it_cites_r11_from_the_text_never_from_a_repro_file_name(use_model):
    body = (
        "Running the attached repro:\n\n```\n$ python segfault.py\nTraceback (most recent call last):\n"
        '  File "segfault.py", line 4, in <module>\nRuntimeError: shape mismatch\n```\n'
    )
    named = evaluate(
        IssueText(1, "torch.compile fails on my model", body, labels=("oncall: pt2",)), use_model=use_model
    )
    assert not [s for s in named.add if s.label == "triage review" and s.source == "rule"]
    said = body + "\nOn the GPU the process dies with a segmentation fault.\n"
    flag = review(evaluate(IssueText(2, "torch.compile fails on my model", said), use_model=use_model))
    assert flag.preselected and "segfault.py" not in flag.evidence and "segmentation fault" in flag.evidence
    assert flag.evidence in said  # an exact span of the text it cites


def lenient():
    """The shipped model with a review bar every score reaches. #170122's checkpoint is G9.1's finding now (G1's
    before, issue 37), a feature name the shipped model was not trained on, so its learned flag falls under the
    shipped bar; the flag's handling is what these tests are about, not its score."""
    return replace(shipped_model(), thresholds={**shipped_model().thresholds, "review": 0.0})


def test_it_cites_no_file_name_for_a_learned_flag():
    # #170122: the learned flag's top feature is the checkpoint's finding, whose evidence is det_model_full.pt.
    flag = review(evaluate(demo(170122), model=lenient()))
    assert ".pt" not in flag.evidence and flag.evidence_source == ""


# --- verdicts weighed, not obeyed -----------------------------------------------------------------------


def test_it_weighs_a_verdict_that_rests_on_a_harness_limit_and_contradicts_the_maintainer(use_model):
    # #170032: the harness's aot_eager cannot run a double backward; the thread says plain aot_eager is right and
    # the decomposition table is at fault (R4.2, R2.5).
    verdict = BisectionEvidence("module: pt2-dispatcher", "R2.1", DOUBLE_BACKWARD, 41)
    a = evaluate(demo(170032, bisection=(verdict,)), use_model=use_model)
    assert "module: decompositions" in (a.preselected() if use_model else a.labels())  # the rules' bar is 0.85
    assert "module: pt2-dispatcher" not in a.preselected()
    assert all(s.confidence < 1.0 for s in a.add if s.label == "module: pt2-dispatcher")
    [item] = [c for c in a.checklist if c.text.startswith("Bisection run 41 points at module: pt2-dispatcher")]
    assert item.state == "needs_human" and "AOTAutograd does not support double backward" in item.text
    assert "nfortier-decomp (comment 1) says module: decompositions" in item.text


def test_it_weighs_a_verdict_the_reporters_backend_results_contradict(use_model):
    # Pool #174187: "aot_eager and eager backends do not have this issue ... Only torch.compile with inductor".
    verdict = BisectionEvidence("module: pt2-dispatcher", "R2.1", "fails on aot_eager, passes on backend=eager", 7)
    a = evaluate(replace(pool(174187), bisection=(verdict,)), use_model=use_model)
    assert "module: pt2-dispatcher" not in a.preselected() and "module: inductor" in a.labels()
    [item] = [c for c in a.checklist if c.text.startswith("Bisection run 7 points at")]
    assert "says aot_eager passes" in item.text and "this run saw aot_eager fail" in item.text


def test_it_weighs_a_verdict_a_quoted_compiler_bisector_contradicts(use_model):
    # #170203: the thread quotes BisectionResult(..., subsystem='decomposition'); a run blaming the dispatcher is
    # weighed beside it.
    verdict = BisectionEvidence("module: pt2-dispatcher", "R2.1", "fails on aot_eager, passes on backend=eager", 9)
    a = evaluate(demo(170203, bisection=(verdict,)), use_model=use_model)
    assert "module: pt2-dispatcher" not in a.preselected()
    [item] = [c for c in a.checklist if c.text.startswith("Bisection run 9 points at")]
    assert "CompilerBisector" in item.text and "module: decompositions" in item.text


def test_it_still_follows_a_verdict_the_thread_does_not_contradict(use_model):
    verdict = BisectionEvidence(
        "module: inductor", "R2.2", "fails on inductor, passes on aot_eager_decomp_partition", 3
    )
    a = evaluate(replace(pool(174187), bisection=(verdict,)), use_model=use_model)
    assert "module: inductor" in a.preselected()
    assert not [c for c in a.checklist if "points at" in c.text]


@pytest.mark.parametrize(
    "evidence, why",
    [
        (DOUBLE_BACKWARD, "double backward"),
        (
            "fails on inductor, passes on aot_eager_decomp_partition: ModuleNotFoundError: No module named 'triton'",
            "module",
        ),
        (
            "fails on inductor, passes on aot_eager_decomp_partition: timeout: no result within 120 s wall clock",
            "timeout",
        ),
        (
            "fails on aot_eager, passes on backend=eager: oom: the run's memory budget of 4096 MB was exhausted",
            "memory",
        ),
    ],
)
def test_it_never_preselects_a_verdict_from_a_harness_limit_at_full_confidence(use_model, evidence, why):
    assert why in limitation(evidence)
    label = "module: inductor" if "inductor" in evidence.split(",")[0] else "module: pt2-dispatcher"
    verdict = BisectionEvidence(label, "R2.2" if label == "module: inductor" else "R2.1", evidence, 5)
    a = evaluate(demo(170059, bisection=(verdict,)), use_model=use_model)
    run = [s for s in a.add if s.evidence_source == "run:5"]
    assert all(s.confidence < 1.0 and s.source != "bisection" for s in run)
    assert [c for c in a.checklist if c.text.startswith("Bisection run 5 points at") and why in c.text]


# --- issues sharing a failure share their evidence ---------------------------------------------------------


def test_it_gives_issues_sharing_a_failure_their_components_from_the_same_evidence(use_model):
    # #170014, #170140 and #170143 share the constant_pad_nd lowering assertion; #170014's and #170143's threads
    # say dynamic=False makes it pass (R1.1). #170140 alone reads as Inductor from its words.
    alone = evaluate(demo(170140), use_model=use_model)
    assert "module: inductor" in alone.preselected()
    group = {n: settled(demo(n)) for n in (170014, 170140, 170143)}
    assert group[170140] == () and {e.label for e in group[170014]} == {"module: dynamic shapes"}
    shared = shared_among(group)
    a = evaluate(demo(170140, shared=shared[170140]), use_model=use_model)
    assert "module: dynamic shapes" in a.preselected() and "module: inductor" not in a.preselected()
    cited = next(s for s in a.add if s.label == "module: dynamic shapes")
    assert cited.evidence_source in ("issue:170014", "issue:170143") and "dynamic=False" in cited.evidence


def test_it_asks_where_an_issue_of_the_group_settles_another_component(use_model):
    # #170014 settles dynamic shapes; give #170140 its own backend result pointing at Inductor instead.
    own = demo(170140, comments=(CommentText("eager and `aot_eager` both run fine, inductor fails.", "someone"),))
    shared = shared_among({170014: settled(demo(170014)), 170140: settled(own)})
    a = evaluate(replace(own, shared=shared[170140]), use_model=use_model)
    assert "module: dynamic shapes" not in a.preselected()
    assert [c for c in a.checklist if c.text.startswith("#170014 has the same failure signature")]


def test_it_shares_the_strongest_evidence_per_label_and_never_an_issues_own():
    from rubric_app.rubric.reading.types import SharedEvidence

    a = SharedEvidence(1, "module: inductor", "R2.2", "aot_eager passes", weight=0.9)
    b = SharedEvidence(2, "module: inductor", "R2.2", "aot_eager works", weight=0.95)
    shared = shared_among({1: (a,), 2: (b,), 3: ()})
    assert shared == {1: (b,), 2: (a,), 3: (b,)}


# --- what the page says beside a run -----------------------------------------------------------------------


def test_it_says_what_the_reporter_says_and_what_this_run_saw():
    text = IssueText(
        1,
        "[aot_eager] retain_grad is ignored under torch.compile",
        "The gradient is missing with `backend='aot_eager'`: fails on aot_eager, passes in eager.",
        author="reporter",
    )
    results = [{"mode": m, "status": "passed"} for m in ("eager", "dynamo_eager", "aot_eager", "inductor")]
    notes = run_notes(text, results, [], 8)
    assert any(n.startswith("The reporter says aot_eager fails") and "this run saw aot_eager pass" in n for n in notes)
    verdict = [{"label": "module: pt2-dispatcher", "rule_id": "R2.1", "evidence": DOUBLE_BACKWARD}]
    raised = [{"mode": "eager", "status": "passed"}, {"mode": "aot_eager", "status": "raised"}]
    weighed = run_notes(demo(170032), raised, verdict, 41)
    assert any("Bisection run 41 points at module: pt2-dispatcher" in n for n in weighed)


def test_it_never_capitalises_a_login_at_the_start_of_a_note():
    """Issue 53: "Dvargas-dispatch says" named nobody; a login is written as GitHub spells it."""
    text = IssueText(
        1,
        "[aot_eager] retain_grad is ignored under torch.compile",
        "The gradient is missing under torch.compile.",
        author="reporter",
        comments=(CommentText("I tried it: fails on aot_eager, passes in eager.", author="dvargas-dispatch"),),
    )
    results = [{"mode": m, "status": "passed"} for m in ("eager", "dynamo_eager", "aot_eager", "inductor")]
    notes = run_notes(text, results, [], 8)
    assert any(n.startswith("On the thread, dvargas-dispatch (comment 1) says aot_eager fails") for n in notes), notes
