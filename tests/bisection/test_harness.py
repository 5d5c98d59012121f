"""The harness with real torch: one small repro per outcome (tests/repros/), asserting the verdict labels.

Each repro injects its own bug (a wrong fake kernel, decomposition or lowering, a
crash, a hang...) so the expected first failing mode is known. They share this
process's warm fork server; only the inductor cases pay a compile (~6-13 s here).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rubric_app.bisection import Limits, bisect, detect_style, extract_repro, names_cuda
from rubric_app.bisection.extract import fenced_blocks
from rubric_app.bisection.sandbox import UID_BASE
from rubric_app.bisection.verdict import decide
from tests.bounded import run_bounded
from tests.helpers import processes_with_cmdline

pytestmark = pytest.mark.torch
REPROS = Path(__file__).parent.parent / "repros"


def run(name: str, device: str = "cpu", timeout_s: float = 60):
    """Bisect tests/repros/<name>.py; return (results by mode, results, [(label, rule_id)], the Report)."""
    report = bisect((REPROS / f"{name}.py").read_text(), device=device, limits=Limits(timeout_s=timeout_s))
    assert report.sandbox["netns"] and report.sandbox["uid"] >= UID_BASE and report.sandbox["root"], report.sandbox
    return (
        {r["mode"]: r for r in report.results},
        report.results,
        [(x["label"], x["rule_id"]) for x in report.labels],
        report,
    )


def statuses(results: list[dict]) -> list[str]:
    return [r["status"] for r in results]


def test_it_blames_dynamo_for_a_failure_while_tracing():
    by_mode, results, labels, report = run("dynamo_graph_break")
    assert statuses(results) == ["passed", "raised", "skipped", "skipped", "skipped", "skipped"]
    failure = by_mode["dynamo_eager"]
    assert (failure["phase"], failure["exception"]) == ("dynamo_tracing", "torch._dynamo.exc.Unsupported")
    assert failure["probes"] == {"fullgraph=False": "passed"}
    assert labels == [("module: dynamo", "R2.3")]
    assert "graph break made fatal by fullgraph=True (R1.2)" in report.summary


def test_it_blames_the_dispatcher_when_aot_eager_fails_and_dynamo_passes():
    by_mode, results, labels, _ = run("fake_shape_autograd")
    assert statuses(results)[:3] == ["passed", "passed", "raised"]
    failure = by_mode["aot_eager"]
    assert failure["phase"] == "backend_compile"
    assert failure["exception"] == "torch._dynamo.exc.BackendCompilerFailed"
    assert "invalid gradient" in failure["message"]  # the inner exception BackendCompilerFailed hides
    assert labels == [("module: pt2-dispatcher", "R2.1")]


def test_it_blames_the_dispatcher_for_a_custom_op_without_a_fake_impl_though_dynamo_raised_it_r5():
    # The first failing mode alone says Dynamo (R2.3); the exception says the op's registration lacks a fake
    # implementation, which pt2-dispatcher owns (R5).
    by_mode, results, labels, report = run("custom_op_without_fake")
    assert statuses(results)[:2] == ["passed", "raised"]
    assert by_mode["dynamo_eager"]["phase"] == "dynamo_tracing"
    assert labels == [("module: pt2-dispatcher", "R5")]
    assert "custom op's registration failed" in report.labels[0]["evidence"]


def test_it_blames_decompositions_when_only_the_inductor_table_diverges():
    by_mode, results, labels, _ = run("bad_decomposition")
    assert statuses(results)[:4] == ["passed", "passed", "passed", "diverged"]
    assert by_mode["aot_eager_decomp_partition"]["phase"] == "compare"
    assert "float64 reference" in by_mode["aot_eager_decomp_partition"]["message"]
    assert labels == [("module: decompositions", "R2.5"), ("triage review", "R11")]


def test_it_blames_inductor_for_a_wrong_lowering_and_flags_the_silent_divergence():
    by_mode, results, labels, report = run("inductor_lowering")
    assert statuses(results) == ["passed"] * 5 + ["diverged"]
    assert labels == [("module: inductor", "R2.2"), ("triage review", "R11")]
    # No GPU checked here, so no "oncall: cpu inductor" (R2.4) yet: it needs a passing CUDA run.
    assert "CUDA not checked" in report.summary
    # torch's CompilerBisector, run inside the sandbox, finds the overridden lowering.
    assert by_mode["inductor"]["narrowed"]["subsystem"] == "lowerings"
    assert "sigmoid" in by_mode["inductor"]["narrowed"]["debug_info"]
    assert "narrows it to inductor / lowerings" in report.summary


def test_it_says_dynamic_shapes_only_when_dynamic_false_makes_it_pass():
    by_mode, results, labels, _ = run("dynamic_only")
    assert by_mode["dynamo_eager"]["probes"]["dynamic=False"] == "passed"
    assert labels == [("module: dynamic shapes", "R1.1")]  # and not module: dynamo (R1.1)


def test_it_contains_a_segfault_in_inductor_and_flags_the_crash():
    by_mode, results, labels, _ = run("segfault_in_inductor")
    crash = by_mode["inductor"]
    assert (crash["status"], crash["phase"]) == ("crashed", "backend_compile")
    assert "SIGSEGV" in crash["message"]
    assert crash["probes"] == {"repeat": "crashed"}  # deterministic, not a flaky memory corruption
    assert labels == [("module: inductor", "R2.2"), ("triage review", "R11")]


def test_it_kills_an_endless_compile_and_everything_it_started():
    # A short wall clock: the earlier modes take well under a second each here.
    by_mode, results, labels, _ = run("endless_inductor", timeout_s=8)
    hung = by_mode["inductor"]
    assert (hung["status"], hung["phase"]) == ("timeout", "backend_compile")
    assert labels == [("module: inductor", "R2.2")]
    assert not processes_with_cmdline(b"sleep\x001000\x00")  # the pid namespace took its child down too


def test_it_says_a_repro_broken_in_eager_is_not_a_compile_bug():
    by_mode, results, labels, report = run("broken_in_eager")
    assert statuses(results) == ["raised"] + ["skipped"] * 5
    assert by_mode["eager"]["exception"] == "RuntimeError"
    assert labels == []
    assert "not a compile bug" in report.summary


def test_it_redirects_a_scripts_own_backend_mode_by_mode():
    code = (REPROS / "script_inductor_accuracy.py").read_text()
    assert detect_style(code) == "script"
    by_mode, results, labels, report = run("script_inductor_accuracy")
    # The script asks for backend="inductor" itself; only the inductor mode may see the injected bug.
    assert statuses(results) == ["passed"] * 5 + ["diverged"]
    assert "tensor(" in report.log  # the script's own print, captured
    assert labels == [("module: inductor", "R2.2"), ("triage review", "R11")]


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="on a GPU machine the cuda repro runs")
def test_it_says_a_cuda_repro_run_on_cpu_needs_a_gpu_and_suggests_nothing():
    code = (REPROS / "needs_cuda.py").read_text()
    assert names_cuda(code)
    by_mode, results, labels, report = run("needs_cuda")
    assert statuses(results) == ["raised"] + ["skipped"] * 5
    assert "CUDA" in by_mode["eager"]["message"] and by_mode["eager"]["probes"] == {}
    assert labels == []
    assert report.summary.startswith("needs a GPU: re-run on cuda")
    assert "not a compile bug" not in report.summary and "Fix the repro" not in report.summary


@pytest.mark.parametrize(
    "message",
    [
        "AssertionError: Torch not compiled with CUDA enabled",  # a CPU-only torch build
        "RuntimeError: No CUDA GPUs are available",  # a CUDA build on a machine without a GPU
        "RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU",
    ],
)
def test_it_tells_a_missing_gpu_from_a_broken_repro_in_any_mode(message):
    eager = {
        "mode": "eager",
        "status": "raised",
        "phase": "runtime",
        "exception": message.split(":")[0],
        "message": message,
    }
    verdict = decide([eager], "cpu")
    assert verdict.labels == [] and verdict.summary.startswith("needs a GPU: re-run on cuda")
    # A mode after eager that needs CUDA (a compile option, a cuda-only kernel) is no component either.
    passed = {"mode": "eager", "status": "passed", "phase": "", "exception": "", "message": ""}
    inductor = {**eager, "mode": "inductor", "phase": "backend_compile", "probes": {}}
    verdict = decide([passed, {**passed, "mode": "dynamo_eager"}, inductor], "cpu")
    assert verdict.labels == [] and verdict.summary.startswith("needs a GPU")
    broken = {
        **eager,
        "exception": "RuntimeError",
        "message": "RuntimeError: mat1 and mat2 shapes cannot be multiplied",
    }
    assert "not a compile bug" in decide([broken], "cpu").summary


def test_it_sees_which_repros_name_cuda():
    for code in ('x = torch.randn(3, device="cuda")', "model.cuda()", 'd = torch.device("cuda:0")', 'x.to("cuda")'):
        assert names_cuda(code), code
    for code in ("# was slow on cuda\nx = torch.randn(3)", '"""Seen on cuda."""\nx = 1', "torch.cuda.is_available()"):
        assert not names_cuda(code), code


needs_gpu = pytest.mark.skipif(not os.path.exists("/dev/nvidiactl"), reason="needs a CUDA GPU")


@needs_gpu
def test_it_bisects_on_cuda():
    by_mode, results, labels, report = run("inductor_lowering", device="cuda")
    assert statuses(results) == ["passed"] * 5 + ["diverged"]
    assert labels == [("module: inductor", "R2.2"), ("triage review", "R11")]
    assert "RLIMIT_AS" not in report.sandbox["rlimits"]  # CUDA cannot start under an address-space limit


@needs_gpu
def test_it_routes_an_inductor_bug_that_passes_on_cuda_to_cpu_inductor():
    by_mode, results, labels, _ = run("cpu_only_inductor", device="cpu")
    assert by_mode["inductor"]["probes"]["device=cuda"] == "passed"
    assert labels == [("module: inductor", "R2.2"), ("oncall: cpu inductor", "R2.4"), ("triage review", "R11")]


def test_it_extracts_the_best_repro_from_body_and_comments():
    body = (
        'It crashes:\n```\nTraceback (most recent call last):\n  File "x.py", line 1\n```\n'
        "```bash\npip install torch\n```\n"
    )
    comment_a = "Smaller:\n```python\nimport numpy as np\nprint(np.ones(3))\n```"
    comment_b = (
        "Repro:\n```py\nimport torch\n\ndef f(x):\n    return x.sin()\n\n"
        "print(torch.compile(f)(torch.randn(3)))\n```\nthanks"
    )
    found = extract_repro([body, comment_a, comment_b])
    assert found.source == 2
    assert found.original.startswith("import torch\n") and "torch.compile(f)" in found.original
    # Simple enough to convert to the convention, which gets a float64 reference.
    assert found.style == "module" and detect_style(found.code) == "module"
    assert "fn = f\n" in found.code and "return [(torch.randn(3),)]" in found.code
    module = (
        "```python\nimport torch\ndef fn(x):\n    return x + 1\ndef make_inputs():\n    return (torch.ones(2),)\n```"
    )
    assert extract_repro([module]).style == "module" and extract_repro([module]).original == ""
    assert extract_repro(["no code here", "```python\nprint('hi')\n```"]) is None


def test_it_keeps_a_script_it_cannot_convert_as_a_script():
    two_sites = "```python\nimport torch\na = torch.compile(f)\nb = torch.compile(g)\nprint(a(1), b(2))\n```"
    assert extract_repro([two_sites]).style == "script"
    keywords = "```python\nimport torch\nopt = torch.compile(f)\nopt(torch.ones(2), scale=2)\n```"
    assert extract_repro([keywords]).style == "script"


# Code ast cannot take, each a class: too deep to parse (MemoryError, RecursionError from the
# parser) and parsed but too deep to unparse in the conversion (RecursionError). 12 KB each.
TOO_DEEP = {
    "unary minus": "import torch\nx = " + "-" * 12_000 + "1\n",
    "not": "import torch\nx = " + "not " * 3_000 + "1\n",
    "converted call argument": "import torch\ndef f(x):\n    return x\nopt = torch.compile(f)\nopt("
    + "-" * 900
    + "torch.randn(3))\n",
}


@pytest.mark.parametrize("code", TOO_DEEP.values(), ids=TOO_DEEP.keys())
def test_it_survives_code_too_deeply_nested_for_ast(code):
    found = extract_repro(["Repro:", f"```python\n{code}```"])

    assert found is None or (found.style, found.code) == ("script", code)  # never converted, never raised
    assert detect_style(code) == "script"


def test_it_reads_fences_as_commonmark_does():
    # Closed by a longer fence, indented up to three spaces, tildes, and one never closed (runs to the end).
    code = "import torch\nprint(torch.compile(lambda x: x)(torch.randn(2)))\n"
    for text in (f"````python\n{code}``````\n", f"   ```py\n{code}   ```", f"~~~\n{code}~~~", f"```python\n{code}"):
        found = extract_repro([text])
        assert (found.original or found.code) == code, text
    # A shorter fence or the other character does not close; an inline ``` span does not open.
    assert list(fenced_blocks("````py\na\n```\n~~~~\nb\n````\n```x``` y\n")) == [("py", "a\n```\n~~~~\nb")]


def test_it_extracts_in_linear_bounded_time_from_hostile_text():
    # Each input took quadratic time before (measured: 4,000 unclosed fences 2.6 s, 20,000 blank lines
    # 1.2-5.5 s in one regex); at these sizes that is hours. Linear and capped, each takes milliseconds.
    out = run_bounded("""
        from rubric_app.bisection import detect_style, extract_repro
        unclosed = "```x\\n" * 200_000  # every line opens a fence that never closes
        blank = "```python\\nimport torch\\n" + "\\n" * 1_000_000 + "x = torch.compile(f)\\n```"
        # f defined: a snippet reading an undefined name stays as posted (extract.undefined_names), never converted.
        head = "```python\\nimport torch\\ndef f(x):\\n    return x\\n"
        spaces = head + " \\n" * 9_000 + "print(torch.compile(f)(torch.randn(2)))\\n```"
        ticks = "`" * 1_000_000 + "\\n" + "``` " * 250_000
        print(extract_repro([unclosed, blank, ticks] * 3), extract_repro([spaces]).style, detect_style("\\n" * 100_000))
    """)
    assert out.split() == ["None", "module", "script"]


def test_it_bisects_a_converted_script_with_a_float64_reference():
    # Without max-autotune: its CPU autotuning would only make this test slower.
    script = (REPROS / "script_inductor_accuracy.py").read_text().replace(', mode="max-autotune-no-cudagraphs"', "")
    found = extract_repro([f"```python\n{script}```"])
    assert found.style == "module" and "COMPILE_KWARGS = {}" in found.code
    report = bisect(found.code, limits=Limits(timeout_s=60), narrow=False)
    assert [r["status"] for r in report.results] == ["passed"] * 5 + ["diverged"]
    assert "(float64 reference)" in report.results[-1]["message"]
    assert [x["label"] for x in report.labels] == ["module: inductor", "triage review"]


def test_it_runs_the_repro_agents_test_fn_with_each_backend():
    by_mode, results, _, _ = run("agent_test_fn")

    assert by_mode["eager"]["status"] == "passed" and by_mode["aot_eager"]["status"] == "passed"
    assert by_mode["inductor"]["status"] != "passed"
    assert "test_fn() returned False" in by_mode["inductor"]["message"]


# Fast in eager; every compiled mode sleeps just under the timeout, so each one "passes" at its limit.
STALLS_EACH_COMPILED_MODE = """import time
import torch

def fn(x):
    if torch.compiler.is_compiling():
        time.sleep(5)
    return x + 1

def make_inputs():
    return (torch.ones(2),)
"""


def test_it_bounds_an_automatic_run_to_one_timeout_after_eager_however_each_mode_stalls():
    """Issue 35, attack 6: such a repro cost one timeout per mode (five in all); with the automatic run's budget the
    compile modes share one, the mode that reaches it is a timeout marked as the budget's, and no label is read from
    where it stopped."""
    limit = 6.0
    report = bisect(STALLS_EACH_COMPILED_MODE, limits=Limits(timeout_s=limit), budget_s=limit)
    ran = [r for r in report.results if r["status"] != "skipped"]
    eager = ran[0]
    assert eager["mode"] == "eager" and eager["status"] == "passed"
    stopped = ran[-1]
    assert stopped["status"] == "timeout" and stopped["budget_s"] == limit and "budget" in stopped["message"]
    assert statuses(report.results)[len(ran) :] == ["skipped"] * (len(report.results) - len(ran))
    assert sum(r["wall_s"] for r in ran[1:]) <= limit + 2.0  # one timeout after eager, not one per mode
    assert report.labels == [] and "budget" in report.summary and "no verdict" in report.summary
