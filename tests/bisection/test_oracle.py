"""Verdicts a triager can trust (issue 51), with real torch and real scripts: the repro judged by its own check,
gradients and input mutations compared, and a verdict that says what it could not run (RUBRIC.md R2, R3, G9).

The gradient and mutation bugs are made here (a wrong decomposition, a wrong backend under a mode's name): torch
2.13 has neither by itself, and a test must know which mode is the first to be wrong.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rubric_app.bisection import Limits, bisect, extract_repro
from rubric_app.bisection.verdict import CANNOT_RUN, EAGER_FAILS, FAILURE, NOT_RUNNABLE, outcome
from rubric_app.rubric.engine.assess import evaluate
from rubric_app.rubric.reading.types import BisectionEvidence, IssueText

pytestmark = pytest.mark.torch
REPROS = Path(__file__).parent.parent / "repros"


def posted(code: str):
    """Bisect code as the dashboard does with an issue's block: extracted (converted where it may be), then run."""
    repro = extract_repro([f"```python\n{code}```"])
    assert repro is not None
    return repro, bisect(repro.code, style=repro.style, limits=Limits(timeout_s=120), narrow=False)


def statuses(report) -> list[str]:
    return [r["status"] for r in report.results]


def labels(report) -> list[tuple[str, str]]:
    return [(x["label"], x["rule_id"]) for x in report.labels]


MISSING_PACKAGE = """import torch
import diffusers_not_installed_here as diffusers

pipe = diffusers.StableDiffusionPipeline()
out = torch.compile(pipe.unet)(torch.randn(1, 4, 64, 64))
print(out.shape)
"""


def test_it_says_a_repro_importing_a_package_the_runner_lacks_cannot_run_here_and_asks_for_a_repro_g9():
    """Priya, a triager, bisects a report whose script imports a package this runner does not have: the verdict
    names the package, blames no component and feeds G9, pre-selected as G9.1's request is."""
    _, report = posted(MISSING_PACKAGE)

    assert outcome(report.results) == CANNOT_RUN
    assert statuses(report) == ["raised"] + ["skipped"] * 5
    assert report.results[0]["blocker"]["name"] == "diffusers_not_installed_here"
    assert report.summary.startswith("Cannot run here: the repro imports diffusers_not_installed_here")
    assert "not a compile bug" not in report.summary
    assert labels(report) == [("needs reproduction", "G9")]

    issue = IssueText(
        number=7,
        title="torch.compile on the UNet of a diffusers pipeline fails",
        body=f"```python\n{MISSING_PACKAGE}```",
        labels=("oncall: pt2",),
        bisection=tuple(BisectionEvidence(x["label"], x["rule_id"], x["evidence"], run_id=1) for x in report.labels),
        bisected=(report.summary,),
    )
    a = evaluate(issue)
    assert "needs reproduction" in a.preselected() and "triaged" not in a.preselected()
    assert not [s for s in a.add if s.source == "bisection" and s.label.startswith("module:")]
    r2 = [c.text for c in a.checklist if c.rule_id == "R2"]
    assert any(t.startswith("The bisection ran and named no component: Cannot run here") for t in r2), r2
    assert not any("No backend results yet" in t for t in r2)


NAME_ERROR_SNIPPET = """import torch

x = torch.randn(4, 4)
out = torch.compile(model)(x)
print(out)
"""


def test_it_says_a_snippet_with_an_undefined_name_is_not_runnable_as_posted_with_its_line():
    """Bilal pastes half of his script: `model` is never defined. The verdict quotes the posted line."""
    repro, report = posted(NAME_ERROR_SNIPPET)

    assert repro.style == "script" and repro.code == NAME_ERROR_SNIPPET  # kept as posted: the line is the reporter's
    assert outcome(report.results) == NOT_RUNNABLE
    assert (
        "Not runnable as posted: NameError: name 'model' is not defined at line 4: `out = torch.compile(model)(x)`"
        in (report.summary)
    )
    assert labels(report) == [("needs reproduction", "G9")]


def test_it_no_longer_calls_the_demos_diagonal_scatter_backward_report_not_a_compile_bug():
    """#170162: the script passes in plain python with this torch; the harness used to lose x2.grad converting it
    and blamed the repro. Run as written, its own assertion and the gradients are what decide."""
    code = (REPROS / "demo_170162_diagonal_scatter_grad.py").read_text()
    repro, report = posted(code)

    assert repro.style == "script"
    assert outcome(report.results) not in (EAGER_FAILS, NOT_RUNNABLE, CANNOT_RUN)
    assert "not a compile bug" not in report.summary
    assert report.results[0]["status"] == "passed"
    assert "gradients of the inputs and parameters" in report.summary
    assert "the script's own checks" in report.summary


# Inductor's decomposition of sigmoid's backward made wrong: aot_eager is right, aot_eager_decomp_partition (which
# uses Inductor's table) and inductor are wrong, in the gradient only.
WRONG_SIGMOID_BACKWARD = """import torch
import torch._inductor.decomposition as decomposition

decomposition.decompositions[torch.ops.aten.sigmoid_backward.default] = lambda grad, y: grad * y
"""


def test_it_reports_a_scripts_own_assertion_failing_only_compiled_at_the_first_mode_where_it_fails():
    """Its outputs match everywhere; only its own check on the gradient fails, first on aot_eager_decomp_partition."""
    script = WRONG_SIGMOID_BACKWARD + (
        "\n\ndef f(x):\n    return torch.sigmoid(x).sum()\n\n\n"
        "x = torch.randn(16, requires_grad=True)\n"
        "f(x).backward()\n"
        "expected = x.grad.clone()\n"
        "x.grad = None\n"
        "torch.compile(f)(x).backward()\n"
        'assert torch.allclose(x.grad, expected), "compiled gradient differs"\n'
    )
    _, report = posted(script)

    assert statuses(report) == ["passed", "passed", "passed", "raised", "skipped", "skipped"]
    failed = report.results[3]
    assert failed["exception"] == "AssertionError" and "compiled gradient differs" in failed["message"]
    assert outcome(report.results) == FAILURE
    assert labels(report)[0] == ("module: decompositions", "R2.5")
    assert report.summary.startswith("First failure: aot_eager_decomp_partition (raised)")


def test_it_finds_a_gradient_mismatch_the_outputs_do_not_show():
    module_style = WRONG_SIGMOID_BACKWARD + (
        "\n\ndef fn(x):\n    return torch.sigmoid(x) * 2\n\n\n"
        "def make_inputs():\n    return (torch.randn(16, requires_grad=True),)\n\n\nBACKWARD = True\n"
    )
    report = bisect(module_style, limits=Limits(timeout_s=120), narrow=False)

    assert statuses(report)[:4] == ["passed", "passed", "passed", "diverged"]
    failed = report.results[3]
    assert failed["differed"] == "gradients" and "gradients differ (outputs match)" in failed["message"]
    assert "float64 reference" in failed["message"]
    assert "gradients differ first" in report.summary
    assert labels(report)[0] == ("module: decompositions", "R2.5")


# A backend registered under aot_eager's name that runs the graph on copies of its inputs: what it returns is right,
# the caller's tensor never sees the in-place write (the bug class of #170305).
LOSES_MUTATIONS = """import torch
import torch._dynamo
from torch._dynamo.backends import registry

torch._dynamo.list_backends(exclude_tags=())  # registers the built-in backends first


def on_copies(gm, example_inputs):
    return lambda *args: gm(*[a.clone() if isinstance(a, torch.Tensor) else a for a in args])


registry._COMPILER_FNS["aot_eager"] = on_copies


def f(x):
    x.add_(1)
    return x.sum()


x = torch.zeros(3)
print(torch.compile(f)(x))
"""


def test_it_finds_an_input_mutation_lost_under_a_mode_though_outputs_match():
    repro, report = posted(LOSES_MUTATIONS)

    assert repro.style == "script"  # an in-place op: run as written
    assert statuses(report)[:3] == ["passed", "passed", "diverged"]
    failed = report.results[2]
    assert failed["differed"] == "mutations" and "a lost or extra mutation" in failed["message"]
    assert report.summary.startswith("First failure: aot_eager (diverged, mutations differ first)")
