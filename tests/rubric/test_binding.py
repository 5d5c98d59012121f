"""What the engine pre-selects for `a` (issue 43), on real issue texts (the training pool of tests/data, never the
held-out slice) and the demo's: `triaged` only where G6 holds and no rule still needs a human, R11's flag wherever it
binds however the report words it, G9's request where it concludes, the routes the rules conclude, the labels the
rubric names outright. Each rule on both sides.
"""

from __future__ import annotations

import json
from functools import cache

import pytest

from rubric_app.demo.github_seeds import DEMO_FILE
from rubric_app.rubric.engine.assess import evaluate
from rubric_app.rubric.offline.evaluation import is_held_out, issue_from_record, read_jsonl
from rubric_app.rubric.reading.types import Assessment, IssueText
from rubric_app.vocabulary import (
    CPU_INDUCTOR_ONCALL,
    CUDA_GRAPHS,
    EDGE_CASES,
    EXPORT_ONCALL,
    HELION,
    INDUCTOR,
    MODULE_CRASH,
    NEEDS_REPRODUCTION,
    TRIAGE_REVIEW,
    TRIAGED,
    Route,
)
from tests.helpers import ROOT


@cache
def _pool() -> dict[int, dict]:
    files = (ROOT / "tests/data/pt2_dev.jsonl", ROOT / "tests/data/pt2_train.jsonl")
    return {r["number"]: r for path in files for r in read_jsonl(path.open(encoding="utf-8"))}


def pool(number: int) -> IssueText:
    """A real PT2 issue of the training pool, its labels hidden (they are the answers)."""
    record = _pool()[number]
    assert not is_held_out(record), "the held-out slice is never read"
    return issue_from_record(record, use_labels=False)


@cache
def _demo() -> dict[int, dict]:
    return {i["number"]: i for i in json.loads(DEMO_FILE.read_text(encoding="utf-8"))["issues"]}


def demo(number: int, labels: tuple[str, ...] = ("oncall: pt2",)) -> IssueText:
    data = _demo()[number]
    return issue_from_record({**data, "comments": [c["body"] for c in data.get("comments", [])], "labels": labels})


def g6(a: Assessment):
    return next(c for c in a.checklist if c.rule_id == "G6")


# --- R11 binds: a silently wrong result or a regression, however it is worded -------------------------------------


@pytest.mark.parametrize(
    "issue",
    [
        pytest.param(lambda: pool(94778), id="returns a different value"),
        pytest.param(lambda: pool(182181), id="changes the output shape"),
        pytest.param(lambda: pool(145266), id="results become NaN"),
        pytest.param(lambda: pool(198333), id="since 2.13, corrupts"),
        pytest.param(lambda: pool(183610), id="floating point exception: a hard crash"),
        pytest.param(lambda: demo(170305), id="a mutation on a view is lost"),
        pytest.param(lambda: demo(170201), id="wrong sums, no error"),
        pytest.param(lambda: demo(170301), id="NaN logits"),
    ],
)
def test_it_flags_the_meeting_and_never_triages_a_silent_wrong_result_however_worded(issue):
    a = evaluate(issue())

    assert TRIAGE_REVIEW in a.preselected() and TRIAGED not in a.labels()
    assert g6(a).state == "not_applicable"


@pytest.mark.parametrize(
    "text",
    [
        "torch.compile raises a different error message than eager for a bad dtype",
        "nan_to_num under torch.compile raises TypeError",
        "the padding in the generated code is lost when printing it with TORCH_LOGS",
    ],
)
def test_it_does_not_read_an_error_or_a_name_as_a_silent_wrong_result(text):
    a = evaluate(IssueText(1, text, "```python\nimport torch\ntorch.compile(f)(x)\n```"))

    assert TRIAGE_REVIEW not in a.preselected()


# --- R11 needs a human: neither `triaged` nor the flag, and what to decide ---------------------------------------


@pytest.mark.parametrize(
    "issue, regressed",
    [
        pytest.param(lambda: demo(170086), True, id="a compile-time regression, 2.11 -> 2.12"),
        pytest.param(lambda: demo(170134, labels=("oncall: cpu inductor",)), False, id="2x slower than eager"),
        pytest.param(lambda: pool(190757), False, id="15x slower than eager"),
    ],
)
def test_it_leaves_a_performance_regression_to_the_triager_with_the_question(issue, regressed):
    a = evaluate(issue())

    assert TRIAGE_REVIEW in a.labels() and TRIAGE_REVIEW not in a.preselected()
    assert TRIAGED not in a.labels()  # never beside a flag, even one only offered (R11, G6)
    assert g6(a).state == "needs_human" and "10%" in g6(a).text
    # Slower than eager is a slowdown, not a regression: asked, never asserted (issue 53, #170134).
    assert ("A performance regression?" in g6(a).text) == regressed and ("A slowdown" in g6(a).text) != regressed


def test_it_triages_a_report_no_rule_holds():
    a = evaluate(pool(154652))  # a quadratic compile time in Inductor's fusion: no R11 clause, a component

    assert {INDUCTOR, TRIAGED} <= set(a.preselected()) and g6(a).state == "satisfied"


# --- G9: a reproduction nobody can run -------------------------------------------------------------------------


def test_it_asks_for_the_skills_reproduction_where_g9_concludes_and_never_triages():
    a = evaluate(demo(170301))  # the repro needs a fine-tuned checkpoint to download (G9.1)

    assert NEEDS_REPRODUCTION in a.preselected() and TRIAGED not in a.labels()


def test_it_waits_for_the_reproduction_a_label_already_asks_for():
    waiting = evaluate(demo(170122, labels=("oncall: pt2", "needs reproduction")))
    asked = demo(170122)

    assert TRIAGED not in waiting.preselected() and g6(waiting).state == "needs_human"
    assert "self-contained reproduction" in g6(waiting).text
    assert g6(evaluate(asked)).state != "satisfied"  # the checkpoint link: G9.1 asks, not triaged


# --- R12: a fuzzer's report that fails its criteria ----------------------------------------------------------


def test_it_holds_a_fuzzer_report_whose_criteria_fail_and_triages_one_that_meets_them():
    failing = evaluate(demo(170110, labels=("oncall: pt2", "topic: fuzzer")))  # own tolerances, no fp64 reference
    meeting = evaluate(demo(170303))  # default tolerances, an fp64 reference

    assert TRIAGED not in failing.preselected() and "fuzzer's criteria fail" in g6(failing).text
    assert TRIAGED in meeting.preselected() and g6(meeting).state == "satisfied"


# --- routes the rules conclude --------------------------------------------------------------------------------


def test_it_preselects_the_route_the_rules_conclude_with_its_evidence():
    cpu = evaluate(pool(143566))  # [Inductor] [CPU] [silent] bitwise_left_shift (R10's tag)
    export = evaluate(pool(171964))  # torch.export.export on an unflattened module (R6.3)
    distributed = evaluate(demo(170080))  # DTensor's own redistribute, no compile (R6.3)

    assert (cpu.route, CPU_INDUCTOR_ONCALL in cpu.preselected()) == (Route.CPU, True)
    assert next(s for s in cpu.add if s.label == CPU_INDUCTOR_ONCALL).evidence == "[CPU]"
    assert (export.route, export.preselected()) == (Route.HANDOFF, [EXPORT_ONCALL])
    assert (distributed.route, distributed.preselected()) == (Route.HANDOFF, ["oncall: distributed"])
    transfer = evaluate(demo(170116))
    assert transfer.route == Route.TRANSFER and transfer.checklist[0].rule_id == "G2"


def test_it_offers_without_preselecting_a_route_only_the_learned_labeler_sees():
    # "+cpu" build, no [CPU] tag: R2.4 asks whether it passes on CUDA; the labeler's route is no answer (G8).
    a = evaluate(demo(170137))

    assert CPU_INDUCTOR_ONCALL not in a.preselected() and a.route == Route.PT2


# --- labels the rubric names outright --------------------------------------------------------------------------


def test_it_preselects_the_labels_the_rubric_names_outright():
    cudagraph_segfault = evaluate(demo(170302))  # mode="reduce-overhead", cudagraph_trees.py, a segfault
    helion = evaluate(demo(170059))  # a Helion kernel miscompiled inside torch.compile (R8.3)
    flex = evaluate(demo(170068))  # "Flex attention template bug": Inductor's template codegen
    limit = evaluate(demo(170303))  # x * 2 / 2 at torch.finfo(torch.float16).max (G10)

    assert {CUDA_GRAPHS, MODULE_CRASH, TRIAGE_REVIEW} <= set(cudagraph_segfault.preselected())
    assert {HELION, INDUCTOR} <= set(helion.preselected())
    assert INDUCTOR in flex.preselected()
    assert EDGE_CASES in limit.preselected()


def test_it_does_not_call_an_exception_a_hard_crash():
    a = evaluate(pool(176591))  # "crashes with AssertionError": an exception, not a segfault (G11, R11)

    assert MODULE_CRASH not in a.labels() and TRIAGE_REVIEW not in a.preselected()


def test_it_reads_g9_2s_need_in_the_report_not_in_a_comment_that_ran_it():
    ran = evaluate(pool(146644))  # the PT2 Repro Agent's comment names its H100: no need of the report
    needs = evaluate(IssueText(1, "torch.compile hangs on our H100 nodes", "It hangs at the first step of training."))

    assert NEEDS_REPRODUCTION not in ran.labels() and g6(ran).state == "satisfied"
    assert NEEDS_REPRODUCTION in needs.labels() and NEEDS_REPRODUCTION not in needs.preselected()
    assert g6(needs).state == "needs_human" and "specific GPU" in g6(needs).text
