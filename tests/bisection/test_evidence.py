"""When runs say "may be fixed" (issue #36) and whose runs count (issue #35): bisection/evidence.py on plain data.

The same rules with real runs through the harness are in tests/runs/test_build_checks.py."""

from __future__ import annotations

import pytest

from rubric_app.bisection import evidence
from rubric_app.bisection.evidence import Repro, Run, checks_result, decide, read_report
from tests.factories import INDUCTOR_RAISED, PASSED

EPYC = {"device": "cpu", "cpu": "AMD EPYC", "isa": ["avx2", "avx512f"], "gpu": ""}
PRINTS = "import torch\n\ndef f(x):\n    return torch.cos(x)\n\nprint(torch.compile(f)(torch.randn(4)))\n"


def run(run_id: int, version: str, results=PASSED, device="cpu", hardware=EPYC) -> Run:
    return Run(run_id, "", version, device, results, hardware)


def report(title: str, body: str = "PyTorch version: 2.12.0\n", repro: str = PRINTS) -> evidence.Report:
    return read_report(title, body, repro)


@pytest.mark.parametrize(
    ("title", "kind"),
    [
        ("[Inductor][CPU] `F.embedding_bag(mode='sum')` 2x slower with torch.compile than eager", "performance"),
        ("Compile time regression: decoder block went from 48s to 3m10s", "compile time"),
        ("torch.compile(dynamic=True) on nn.GRU recompiles on every new sequence length", "recompilation"),
        ("[Dynamo] `itertools.groupby` in forward causes graph break", "graph break"),
        ("Typo in backend name only errors on first call, with a 40-line traceback", "UX"),
        ("Segmentation fault when calling a compiled cumsum over a masked tensor", ""),
    ],
)
def test_it_reads_the_kinds_of_report_a_pass_says_nothing_about(title, kind):
    assert report(title).kind == kind


def test_it_reads_the_reports_device_and_the_hardware_it_names_but_not_collect_envs():
    body = (
        "Wrong tail with the AVX512 kernel; fine on AVX2.\n\n```\nPyTorch version: 2.12.0+cpu\n"
        "GPU models and configuration: GPU 0: NVIDIA H100 80GB HBM3\nFlags: fpu amx_tile amx_bf16\n```\n"
    )
    read = report("[Inductor][CPU][bfloat16] Vectorized cumsum", body)
    assert (read.device, read.hardware, read.reported) == ("cpu", (("avx2", "AVX2"), ("avx512f", "AVX512")), "2.12.0")
    assert report("[CUDA] index_put_ wrong on the GPU").device == "cuda"
    assert report("index_put_ wrong", repro=PRINTS.replace("torch.randn(4)", 'torch.randn(4, device="cuda")')).device
    on_h100 = report("Illegal memory access in the Inductor kernel on H100")
    assert (on_h100.device, on_h100.hardware) == ("cuda", (("gpu", "H100"),))


def test_it_says_which_repros_check_their_own_result():
    assert not checks_result(PRINTS, "script")  # prints a wrong value: passing shows nothing
    assert checks_result(PRINTS, "script", raises=True)  # an exception report: the script raises on the bug
    assert checks_result(PRINTS.replace("print(", "assert torch.allclose(f(x), "), "script")
    assert checks_result("import torch\n\ndef test_fn() -> bool:\n    return True\n", "script")
    assert checks_result("def fn(x):\n    return x\n\ndef make_inputs():\n    return (1,)\n", "module")
    # Converted to the harness's convention: only what it compares (the compiled call's outputs) is checked.
    assert checks_result("converted", "module", original=PRINTS)
    backward = PRINTS.replace("print(torch.compile(f)(torch.randn(4)))", "torch.compile(f)(x).sum().backward()")
    assert not checks_result("converted", "module", original=backward)
    looped = PRINTS.replace("print(", "for _ in range(3):\n    print(")
    assert not checks_result("converted", "module", original=looped)


def reporters(*runs: Run, checks=True, counts=True, author="reporter", code="a") -> Repro:
    return Repro(code, tuple(runs), author, counts, by_reporter=author == "reporter", checks_result=checks)


def test_it_calls_may_be_fixed_on_our_own_runs_and_states_the_evidence():
    ours = decide(report("cos miscompiles"), [reporters(run(57, "2.13.0"), run(41, "2.12.0", INDUCTOR_RAISED))])
    assert (ours.kind, ours.summary) == (
        "may_be_fixed",
        "reproduced on 2.12.0 (run 41), passes on 2.13.0 (run 57), same repro, CPU",
    )
    reported = decide(report("cos raises"), [reporters(run(57, "2.13.0"))])
    assert reported.summary == (
        "reported failing on 2.12.0 by @reporter (its repro checks its result), passes on 2.13.0 (run 57), same "
        "repro, CPU"
    )


@pytest.mark.parametrize(
    ("title", "repros", "held"),
    [
        ("embedding_bag 2x slower", [reporters(run(2, "2.13.0"))], "a performance report"),
        (
            "[CUDA] cos wrong on the GPU",
            [reporters(run(2, "2.13.0"))],
            "our runs were on CPU, the report is about CUDA",
        ),
        ("cos wrong with AMX", [reporters(run(2, "2.13.0"))], "the report names AMX, which run 2 did not have"),
        ("cos wrong", [reporters(run(2, "2.13.0"), checks=False)], "the repro does not check the reported failure"),
        (
            "cos wrong",
            [reporters(run(2, "2.13.0"), run(1, "2.12.0", INDUCTOR_RAISED), author="drive-by", counts=False)],
            "only @drive-by's repro passes, another commenter's",
        ),
        (
            "cos wrong",
            [
                reporters(run(3, "2.13.0", INDUCTOR_RAISED), code="theirs"),
                reporters(run(2, "2.13.0"), run(1, "2.12.0", INDUCTOR_RAISED), author="", code="typed"),
            ],
            "@reporter's repro still fails on 2.13.0 (run 3)",
        ),
    ],
)
def test_it_holds_back_a_pass_that_is_not_evidence_and_says_why(title, repros, held):
    comparison = decide(report(title), repros)
    assert comparison.kind != "may_be_fixed" and comparison.held_back.startswith(held), comparison


def test_it_calls_a_regression_only_on_a_repro_that_counts():
    regressed = (run(2, "2.13.0", INDUCTOR_RAISED), run(1, "2.12.0"))
    assert decide(report("sin fails"), [reporters(*regressed)]).kind == "regression"
    stranger = decide(report("sin fails"), [reporters(*regressed, author="drive-by", counts=False)])
    assert stranger.kind == "regression_unconfirmed"  # shown, never a finding (R11 stays off)


def test_it_reads_the_cpus_model_and_isa_from_proc_cpuinfo_for_the_heartbeat():
    from rubric_app.runs import hardware

    cpuinfo = (
        "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
        "flags\t\t: fpu vme sse4_2 avx avx2 avx512f avx512_bf16 amx_tile amx_bf16 made_up_flag\n\nprocessor\t: 1\n"
    )
    model, isa = hardware.read_cpuinfo(cpuinfo)
    assert (model, isa) == (
        "Intel(R) Xeon(R) Platinum 8480+",
        ["amx_bf16", "amx_tile", "avx", "avx2", "avx512_bf16", "avx512f", "sse4_2"],
    )
    assert hardware.read_cpuinfo("Features\t: fp asimd sve sve2\nHardware\t: Graviton\n") == (
        "Graviton",
        ["asimd", "sve", "sve2"],
    )
    assert hardware.describe({"device": "cuda", "gpu": "NVIDIA H100 80GB HBM3"}) == "GPU (NVIDIA H100 80GB HBM3)"
    assert hardware.describe({"device": "cpu", "cpu": "AMD EPYC", "isa": ["avx2", "sse4_2"]}) == "CPU (AMD EPYC; avx2)"
    this = hardware.this_machine()  # what this machine's heartbeat reports
    assert set(this) == {"cpu", "isa", "gpu"} and set(this["isa"]) <= hardware.ISA_FLAGS


XEON_8480 = (
    "Wrong output with freezing on CPU.\n\n```\nPyTorch version: 2.12.0+cpu\n"
    "CPU: Intel(R) Xeon(R) Platinum 8480+\n```\n"
)


def test_it_reads_the_dispatch_isa_of_the_reporters_cpu_from_its_flags_or_its_model():
    by_model = report("[Inductor][CPU] Wrong output from fused MKLDNN conv", XEON_8480)
    by_flags = report("wrong on CPU", "```\nModel name: Some CPU\nFlags: fpu avx2 avx512f avx512_vnni amx_tile\n```")
    epyc = report("wrong on CPU", "```\nModel name: AMD EPYC 7763 64-Core Processor\n```")

    assert {flag for flag, _name in by_model.machine} >= {"amx_tile", "amx_bf16", "avx512f", "avx512_fp16"}
    assert {flag for flag, _name in by_flags.machine} == {"avx512f", "avx512_vnni", "amx_tile"}
    assert epyc.machine == ()  # Zen 3: AVX2 only, nothing to require
    assert report("[CUDA] wrong on the GPU", XEON_8480).machine == ()  # the CPU's kernels are not the bug's


def test_it_holds_back_a_pass_on_a_machine_lacking_the_reporters_dispatch_isa():
    reported = report("[Inductor][CPU] Wrong output from fused MKLDNN conv", XEON_8480)
    genoa = {"cpu": "AMD EPYC 9654", "isa": ["avx2", "avx512f", "avx512_vnni", "avx512_bf16"], "gpu": ""}
    sapphire = {**genoa, "isa": [*genoa["isa"], "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"]}

    on_genoa = decide(reported, [reporters(run(57, "2.13.0", hardware=genoa))])
    assert on_genoa.kind != "may_be_fixed"
    assert on_genoa.held_back.startswith("the reporter's CPU has AMX (Intel(R) Xeon(R) Platinum 8480+)")
    assert decide(reported, [reporters(run(57, "2.13.0", hardware=sapphire))]).kind == "may_be_fixed"
