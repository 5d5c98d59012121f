"""The verdict's outcomes read from per-mode results, without running anything (issue 51): what a snippet is, what a
runner lacks, what was compared (RUBRIC.md G9, R2)."""

from __future__ import annotations

import pytest

from rubric_app.bisection.compare import compare_all
from rubric_app.bisection.extract import has_own_check, undefined_names
from rubric_app.bisection.oracle import NUMBER, TIMING
from rubric_app.bisection.verdict import CANNOT_RUN, EAGER_FAILS, NO_FAILURE, decide, outcome

SKIPPED = [{"mode": m, "status": "skipped", "phase": "", "exception": "", "message": ""} for m in ("dynamo_eager",)]


def eager(**fields) -> dict:
    return {"mode": "eager", "status": "raised", "phase": "runtime", "exception": "", "message": "", **fields}


def test_it_names_a_package_missing_from_the_runners_installed_list():
    results = [
        eager(
            exception="ModuleNotFoundError",
            message="ModuleNotFoundError: No module named 'timm'",
            blocker={"kind": "missing_module", "name": "timm.models", "line": 0, "text": ""},
        )
    ] + SKIPPED
    decided = decide(results, "cpu", packages=("torch", "sympy", "numpy"))

    assert outcome(results) == CANNOT_RUN
    assert "this runner lacks the package timm (not among the 3 packages it has installed)" in decided.summary
    assert [(x["label"], x["rule_id"]) for x in decided.labels] == [("needs reproduction", "G9")]


def test_it_asks_for_nothing_when_the_module_missing_is_torchs_own():
    results = [eager(blocker={"kind": "missing_module", "name": "torch._inductor.old_place", "line": 0, "text": ""})]
    decided = decide(results, "cpu")

    assert decided.labels == [] and "this runner's torch has no module torch._inductor.old_place" in decided.summary


def test_it_keeps_fails_in_plain_eager_for_a_real_eager_error_with_the_error():
    results = [eager(exception="RuntimeError", message="RuntimeError: mat1 and mat2 must have the same dtype")]
    decided = decide(results, "cpu")

    assert outcome(results) == EAGER_FAILS and decided.labels == []
    assert "Fails in plain eager, without torch.compile (raised: RuntimeError: mat1 and mat2" in decided.summary


def test_it_says_what_a_run_without_a_failure_compared():
    passed = {"status": "passed", "phase": "", "exception": "", "message": ""}
    results = [{**passed, "mode": "eager", "compared": "the outputs of 1 compiled call(s). Not compared: gradients"}]

    assert outcome(results) == NO_FAILURE
    assert "Compared: the outputs of 1 compiled call(s). Not compared: gradients." in decide(results, "cpu").summary


def test_it_tells_a_snippet_from_a_program_and_a_script_with_its_own_check():
    assert undefined_names("import torch\nout = torch.compile(model)(x)\n") == {"model", "x"}
    assert (
        undefined_names("class A:\n    def f(self, y):\n        return y\n\n\nprint(A, [i for i in range(2)])") == set()
    )
    assert has_own_check("y = f(x)\nassert torch.allclose(y, f(x))\n")
    assert has_own_check("loss = f(x).sum()\nloss.backward()\nprint(x.grad)\n")
    assert not has_own_check("print(torch.compile(f)(x))\n")


@pytest.mark.torch
def test_it_names_the_first_of_outputs_gradients_mutations_that_differs():
    import torch

    ref = {"outputs": [torch.ones(2)], "grads": [torch.ones(2)], "mutations": [[torch.zeros(2)]]}
    wrong_grad = {**ref, "grads": [torch.zeros(2)]}
    lost_write = {**ref, "mutations": [[torch.ones(2)]]}

    assert compare_all(ref, ref, 1e-4) == ("", "")
    assert compare_all(ref, wrong_grad, 1e-4)[0] == "gradients"
    assert compare_all(ref, lost_write, 1e-4)[0] == "mutations"
    assert compare_all(ref, {**lost_write, "outputs": [torch.zeros(2)]}, 1e-4)[0] == "outputs"


def test_it_reads_only_numbers_standing_alone_and_none_from_a_script_that_times_itself():
    assert NUMBER.findall("tensor([1.5, -2e-3]) <object at 0x7f3a9> conv2d torch 2.13.0 nan") == ["1.5", "-2e-3", "nan"]
    assert TIMING.search("import time\nt = time.time()\nprint(time.time() - t)\n")
    assert not TIMING.search("x = torch.randn(3)\nprint(torch.compile(f)(x))\n")
