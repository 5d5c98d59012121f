"""What PyTorch's triage skill added to the rubric (R5.1, G9-G13), each on realistic issue texts and both ways of
each gate, through the rules and through evaluate()."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from rubric_app.rubric.engine.assess import evaluate, facts_of
from rubric_app.rubric.engine.skill import Skill, parse_labels, parse_templates, shipped
from rubric_app.rubric.reading.types import BisectionEvidence, CommentText, IssueText
from rubric_app.rubric.rules.skill_additions import (
    bot_breaches,
    g9_1_download,
    g9_2_no_script,
    g10_edge_cases,
    g11_commonly_missed,
    never_applied,
    parse_release,
    parse_version,
    release_gate,
    reproduction_reply,
)

DATA = Path(__file__).resolve().parents[2] / "rubric_app" / "data"
# The skill as PyTorch's repository has it now: its catalog has `release triage`.
CURRENT = Skill(
    parse_labels((DATA / "skill_labels.json").read_text()), parse_templates((DATA / "skill_templates.json").read_text())
)
CATALOG = CURRENT.names()
ENV_2_13 = (
    "\n\n### Versions\nCollecting environment information...\nPyTorch version: 2.13.0+cu128\nIs debug build: False\n"
    "CUDA used to build PyTorch: 12.8\nOS: Ubuntu 22.04.4 LTS (x86_64)\n"
)
REPRO = "```python\nimport torch\n\n@torch.compile\ndef f(x):\n    return x.sin() + 1\n\nprint(f(torch.randn(8)))\n```"


def issue(title, body="", comments=(), labels=("oncall: pt2",), release="", labelled_by=(), bisection=()):
    return IssueText(
        number=7,
        title=title,
        body=body,
        comments=tuple(CommentText(c, author="maintainer") for c in comments),
        labels=labels,
        release=release,
        labelled_by=labelled_by,
        bisection=bisection,
        author="reporter",
    )


def suggested(a, label):
    return next((s for s in a.add if s.label == label), None)


def item(a, rule_id):
    return next((c for c in a.checklist if c.rule_id == rule_id), None)


# --- R5.1: the umbrella and its layer ---------------------------------------------------------------

FUNCTIONALIZATION_BUG = issue(
    "x.add_ on a view is lost under torch.compile(backend='aot_eager')",
    "```python\nimport torch\ndef f(x):\n    y = x.view(-1)\n    y.add_(1)\n    return x\n"
    "print(torch.compile(f, backend='aot_eager')(torch.zeros(2, 2)))\n```\naot_eager gives zeros; eager gives ones.",
    comments=("This is a functionalization bug: the mutation of the view is never replayed onto the base.",),
)


def test_it_adds_the_layer_the_threads_diagnosis_names_next_to_the_umbrella_r5_1():
    a = evaluate(FUNCTIONALIZATION_BUG)

    umbrella, layer = suggested(a, "module: pt2-dispatcher"), suggested(a, "module: functionalization")
    assert umbrella is not None and layer is not None
    assert layer.rule_id == "R5.1" and "functionalization bug" in layer.evidence
    assert layer.preselected == umbrella.preselected and layer.confidence == umbrella.confidence
    assert item(a, "R5.1").state == "satisfied" and "thread's diagnosis" in item(a, "R5.1").text


def test_it_reads_the_layer_off_the_failing_frame_r5_1():
    trace = (
        "```\nTraceback (most recent call last):\n"
        '  File "/usr/lib/python3.12/site-packages/torch/_functorch/_aot_autograd/dispatch_and_compile_graph.py", '
        "line 180, in aot_dispatch_base_graph\n"
        '  File "/usr/lib/python3.12/site-packages/torch/_subclasses/fake_tensor.py", line 2310, in dispatch\n'
        "torch._subclasses.fake_tensor.UnsupportedOperatorException: aten.nonzero_static.default\n```"
    )
    a = evaluate(issue("[aot_eager] FakeTensor raises on nonzero_static", trace))

    layer = suggested(a, "module: fakeTensor")
    assert suggested(a, "module: pt2-dispatcher") is not None and layer is not None
    assert layer.evidence == "torch/_subclasses/fake_tensor.py:dispatch" and "failing frame" in layer.reason


def test_it_names_custom_operators_for_a_custom_ops_registration_r5_1():
    body = (
        "```python\n@torch.library.custom_op('mylib::scale', mutates_args=())\ndef scale(x: torch.Tensor) -> "
        "torch.Tensor:\n    return x * 2\n```\nCompiling it fails: no fake impl was registered with register_fake."
    )
    a = evaluate(issue("torch.compile of a custom op fails without register_fake", body))

    assert suggested(a, "module: pt2-dispatcher") is not None
    assert suggested(a, "module: custom-operators").rule_id == "R5.1"


def test_it_takes_the_layer_from_a_bisection_verdict_r5_1():
    verdict = BisectionEvidence(
        "module: pt2-dispatcher",
        "R5",
        "a custom op's fake implementation disagrees with its real kernel (crossref), passes on "
        "aot_eager_decomp_partition",
        41,
    )
    a = evaluate(issue("Wrong shape from my op under compile", "The output shape differs.", bisection=(verdict,)))

    layer = suggested(a, "module: custom-operators")
    assert layer is not None and layer.evidence_source == "bisection:41" and "verdict" in layer.reason


def test_it_asks_which_layer_when_nothing_names_one_r5_1():
    a = evaluate(issue("while_loop fails under torch.compile", "torch._higher_order_ops.while_loop raises in AOT."))

    assert suggested(a, "module: pt2-dispatcher") is not None
    assert not any(suggested(a, layer) for layer in ("module: aotdispatch", "module: fakeTensor"))
    assert item(a, "R5.1").state == "needs_human" and "Which layer?" in item(a, "R5.1").text


def test_it_adds_the_umbrella_next_to_a_layer_label_the_issue_carries_r5_1():
    a = evaluate(issue("Graph break on zip", "Unsupported: zip", labels=("oncall: pt2", "module: aotdispatch")))

    umbrella = suggested(a, "module: pt2-dispatcher")
    assert umbrella is not None and umbrella.rule_id == "R5.1" and umbrella.evidence == "module: aotdispatch"


def test_it_adds_no_layer_where_r5_avoids_the_umbrella_r5_1():
    trace = (
        "```\nTraceback (most recent call last):\n"
        '  File "torch/_functorch/_aot_autograd/runtime_wrappers.py", line 340, in runtime_wrapper\n'
        '  File "torch/_inductor/codegen/triton.py", line 900, in codegen_kernel\n'
        "torch._inductor.exc.InductorError: LoweringException: AssertionError\n```"
    )
    a = evaluate(issue("[inductor] LoweringException for aten.cumsum", trace))

    labels = a.labels()
    assert "module: inductor" in labels and "module: pt2-dispatcher" not in labels
    assert not {"module: aotdispatch", "module: fakeTensor", "module: functionalization"} & set(labels)
    assert item(a, "R5.1") is None


# --- G9: no self-contained reproduction ----------------------------------------------------------------


@pytest.mark.parametrize(
    "case",
    [
        issue(
            "Compiled model gives NaN after loading the checkpoint",
            "```python\nmodel.load_state_dict(torch.load('ckpt_step_9000.pt'))\nout = torch.compile(model)(batch)\n```"
            "\nCheckpoint: https://www.dropbox.com/s/abc/ckpt_step_9000.pt",
        ),
        issue("torch.compile fails on our exported model", "Repro attached: repro_bundle.zip (model and inputs)."),
        issue(
            "Inductor miscompiles Llama weights",
            "model = AutoModel.from_pretrained(path) with the weights from "
            "https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/model.safetensors",
        ),
    ],
)
def test_it_asks_for_a_self_contained_reproduction_when_reproducing_needs_a_download_g9_1(case):
    found = g9_1_download(facts_of(case))
    a = evaluate(case)

    assert found and found[0].label == "needs reproduction" and found[0].evidence in case.body
    assert "needs reproduction" in a.labels() and "triaged" not in a.labels()
    assert item(a, "G9.1").state == "needs_human" and "do not mark it triaged" in item(a, "G9.1").text


@pytest.mark.parametrize(
    "case",
    [
        issue("torch.compile is slow on H100", "Our step time doubled with max-autotune on an H100. No script yet."),
        issue("Compiled model diverges", "Our internal model diverges after 2k steps under torch.compile."),
        issue("torch.compile broke after upgrading", "After upgrading to 2.13 our pipeline fails in compile."),
        issue("NCCL timeout with compiled FSDP", "Our training job on 16 nodes (slurm) times out at step 10."),
    ],
)
def test_it_asks_for_a_self_contained_reproduction_without_a_script_g9_2(case):
    found = g9_2_no_script(facts_of(case))
    a = evaluate(case)

    assert found and found[0].rule_id == "G9.2" and "triaged" not in a.labels()
    # A judgement: the G9.2 item and G6's say the same two answers, neither forbids what the other offers.
    assert item(a, "G9.2").text.startswith("Reproducing it may need") and ": if it does, ask" in item(a, "G9.2").text
    assert "or mark it triaged if it runs as posted" in item(a, "G6").text


@pytest.mark.parametrize(
    "case",
    [
        issue("torch.compile is slow on H100", "An H100 runs this 2x slower than eager:\n" + REPRO),
        issue("torch.compile broke after upgrading", "After upgrading to 2.13 this fails:\n" + REPRO),
        issue("Saving a compiled model", "We save results as out.pt but the repro loads nothing:\n" + REPRO),
    ],
)
def test_it_leaves_a_self_contained_reproduction_alone_g9(case):
    facts = facts_of(case)

    assert not g9_1_download(facts) and not g9_2_no_script(facts)
    assert "needs reproduction" not in evaluate(case).labels()


def test_it_replies_with_the_self_contained_reproduction_template_or_falls_back_g9():
    assert reproduction_reply(CURRENT.replies()) == "request_self_contained_reproduction"
    assert reproduction_reply(shipped().replies()) == "needs_reproduction"  # the shipped copy has no such reply


# --- G10: edge cases and numerical accuracy ----------------------------------------------------------------

FUZZER_EDGE = issue(
    "[Fuzzer] torch.compile returns inf where eager returns finfo.max for float16",
    "Found by our fuzzer.\n```python\nimport torch\nx = torch.full((4,), torch.finfo(torch.float16).max, "
    "dtype=torch.float16)\nprint(torch.compile(lambda x: x * 2 / 2)(x))  # inf; eager: 65504\n```",
)


def test_it_labels_an_edge_case_at_the_dtype_limit_with_the_fuzzer_topic_g10():
    found = g10_edge_cases(facts_of(FUZZER_EDGE))
    a = evaluate(FUZZER_EDGE)

    assert {x.label for x in found if x.kind == "add"} == {"module: edge cases", "topic: fuzzer"}
    assert suggested(a, "module: edge cases").rule_id == "G10"
    assert "numerical_accuracy" in item(a, "G10").text


@pytest.mark.parametrize(
    "case",
    [
        issue("fp32 vs fp16 results differ for softmax under compile", "The fp16 output differs by 1e-3."),
        issue(
            "log_softmax returns NaN for very large inputs under compile",
            "With inputs around 1e38 the compiled kernel returns NaN; eager gives -inf.",
        ),
    ],
)
def test_it_reads_precision_and_extreme_inputs_as_edge_cases_g10(case):
    assert any(x.label == "module: edge cases" for x in g10_edge_cases(facts_of(case)))


@pytest.mark.parametrize(
    "case",
    [
        issue("allclose(equal_nan=True) differs under compile", "`torch.allclose(a, b, equal_nan=True)` is False."),
        issue("nan_to_num is slow under compile", "torch.nan_to_num takes 3x longer compiled."),
        issue("test_nanmean fails on ROCm", "python test/test_reductions.py -k test_nanmean fails."),
    ],
)
def test_it_does_not_read_nan_in_a_name_as_a_nan_bug_g10(case):
    assert not any(x.kind == "add" for x in g10_edge_cases(facts_of(case)))


def test_it_makes_a_test_failing_on_its_tolerance_module_tests_not_numerical_stability_g10():
    case = issue(
        "test_conv_numerical_stability_fp16 fails",
        "python test/inductor/test_torchinductor.py -k test_conv\nAssertionError: Tensor-likes are not close!\n"
        "Mismatched elements: 3 / 64\nGreatest absolute difference: 0.004",
    )
    a = evaluate(case)

    assert any(x.label == "module: numerical-stability" and x.rule_id == "G10" for x in a.avoid)
    assert "module: numerical-stability" not in a.labels()
    assert any(c.rule_id == "G11" and "module: tests" in c.text for c in a.checklist)


# --- G11: labels triagers often miss -----------------------------------------------------------------


def test_it_checks_each_commonly_missed_label_g11():
    cases = {
        "module: crash": issue("Segmentation fault in compiled flex_attention backward", "Fatal Python error"),
        "module: windows": issue("torch.compile fails on Windows with MSVC", "cl.exe: error C2065"),
        "module: regression": issue("torch.compile regression: graph breaks on zip since 2.13", "It used to work."),
        "module: tests": issue("test_cudagraph_trees fails on main", "test/inductor/test_cudagraph_trees.py fails"),
        "module: autograd": issue(
            "Wrong gradients from torch.cumprod", "Eager too: the grad is wrong without compile."
        ),
    }
    for label, case in cases.items():
        found = g11_commonly_missed(facts_of(case))
        assert any(x.kind == "check" and x.label == label for x in found), label
        assert any(x.kind == "add" and x.label == label for x in found), label


def test_it_keeps_autograd_off_a_gradient_compile_got_wrong_r3_3_g11():
    case = issue("Wrong gradients under torch.compile", "torch.compile gives wrong gradients; eager is right.")
    found = g11_commonly_missed(facts_of(case))

    assert not any(x.kind == "add" and x.label == "module: autograd" for x in found)
    assert any(x.kind == "check" and "R3.3" in x.reason for x in found)
    assert "module: autograd" not in evaluate(case).labels()


def test_it_adds_has_workaround_only_for_a_real_one_g11():
    real = issue(
        "Recompilations on every step",
        "Workaround: torch._dynamo.config.cache_size_limit = 64 keeps it compiled.",
    )
    mirror = issue("Wrong strides for non-contiguous input", "A workaround is calling .contiguous() before the op.")

    assert any(x.kind == "add" and x.label == "has workaround" for x in g11_commonly_missed(facts_of(real)))
    found = g11_commonly_missed(facts_of(mirror))
    assert any(x.kind == "avoid" and x.label == "has workaround" for x in found)
    assert not any(x.kind == "add" and x.label == "has workaround" for x in found)


def test_it_marks_a_commonly_missed_label_the_issue_carries_as_checked_g11():
    case = issue("Segfault in compiled sort", "Segmentation fault", labels=("oncall: pt2", "module: crash"))

    assert next(c for c in evaluate(case).checklist if c.rule_id == "G11").state == "satisfied"


# --- G12: release triage through its gates -------------------------------------------------------------


def _with(case: IssueText, release: str = "v2.13.0", **changes) -> IssueText:
    """The case with the repository's latest release known (and other fields changed)."""
    return replace(case, release=release, **changes)


CRASH_ON_RELEASE = issue("Segfault in torch.compile of a masked sum", "Segmentation fault (core dumped)\n" + ENV_2_13)


def test_it_flags_release_triage_for_the_latest_released_minor_g12_1():
    a = evaluate(_with(CRASH_ON_RELEASE), CATALOG)

    flag = suggested(a, "release triage")
    assert flag is not None and flag.rule_id == "G12.1" and flag.preselected
    assert flag.evidence == "states 2.13.0+cu128; the latest release is v2.13.0"
    # Its own flag beside R11's: the crash goes to the meeting too.
    assert "triage review" in a.labels() and item(a, "G12").state == "satisfied"


@pytest.mark.parametrize(
    "words, states",
    [
        ("pip install torch==2.13.1 --index-url https://download.pytorch.org/whl/cu128", "states 2.13.1"),
        ("It fails on PyTorch 2.13.0 and worked on 2.12.1.", "states 2.13.0"),
    ],
)
def test_it_reads_the_version_from_a_pip_line_or_the_reporter_g12_1(words, states):
    gate = release_gate(facts_of(_with(issue("Wrong results from compiled cumsum", words))))

    assert gate.gate == "G12.1" and gate.evidence.startswith(states)


@pytest.mark.parametrize(
    "env, why",
    [
        ("PyTorch version: 2.14.0.dev20261201+cu128", "a nightly"),
        ("PyTorch version: 2.13.0rc3", "a release candidate"),
        ("PyTorch version: 2.13.0a0+git1234abc", "a source build"),
        ("PyTorch version: 2.12.1+cu126", "older than the latest minor 2.13"),
    ],
)
def test_it_leaves_release_triage_off_anything_but_the_latest_released_minor_g12_1(env, why):
    case = _with(issue("Segfault in torch.compile of a masked sum", f"Segmentation fault\n\n### Versions\n{env}\n"))
    a = evaluate(case, CATALOG)

    assert "release triage" not in a.labels()
    assert why in item(a, "G12").text and item(a, "G12").state == "not_applicable"
    assert "triage review" in a.labels()  # severity alone clears no gate: the meeting still sees the crash (R11)


def test_it_never_guesses_the_latest_release_g12():
    no_release = evaluate(CRASH_ON_RELEASE, CATALOG)
    no_version = evaluate(_with(issue("Segfault in torch.compile of a masked sum", "Segmentation fault")), CATALOG)
    high_but_unknown = evaluate(
        issue("Graph break on zip", "Unsupported: zip", labels=("oncall: pt2", "high priority")), CATALOG
    )

    assert "release triage" not in no_release.labels() and "unknown" in item(no_release, "G12").text
    assert "release triage" not in no_version.labels() and "no torch version" in item(no_version, "G12").text
    assert "release triage" not in high_but_unknown.labels()


def test_it_flags_release_triage_where_a_human_said_high_priority_g12_2():
    by_human = _with(
        issue("Graph break on zip", "Unsupported: zip", labels=("oncall: pt2", "high priority")),
        labelled_by=(("high priority", "malfet"),),
    )
    by_bot = _with(by_human, labelled_by=(("high priority", "pytorch-bot[bot]"),))

    flag = suggested(evaluate(by_human, CATALOG), "release triage")
    assert flag is not None and flag.rule_id == "G12.2" and flag.evidence == "high priority, added by @malfet"
    assert "release triage" not in evaluate(by_bot, CATALOG).labels()


@pytest.mark.parametrize(
    "case",
    [
        issue("[Feature request] torch.compile support for generators", "### 🚀 The feature, motivation and pitch\n"),
        issue("Docs for torch.compile modes are wrong", "### 📚 The doc issue\nThe documentation is wrong."),
        issue("Make max-autotune faster", "It works, it could be faster.", labels=("oncall: pt2", "enhancement")),
    ],
)
def test_it_never_flags_a_feature_an_enhancement_or_docs_for_release_triage_g12(case):
    case = _with(case, body=case.body + ENV_2_13, labels=(*case.labels, "high priority"))

    assert "release triage" not in evaluate(case, CATALOG).labels()


def test_it_shows_release_triage_as_outside_a_catalog_that_lacks_it_r7_4():
    a = evaluate(_with(CRASH_ON_RELEASE))  # the shipped catalog, from before the label

    assert "release triage" not in a.labels()
    assert any(x.label == "release triage" and x.rule_id == "R7.4" for x in a.avoid)


def test_it_reads_versions_and_release_tags():
    assert parse_version("2.13.0+cu128").kind == "release"
    assert parse_version("2.14.0.dev20261201").kind == "nightly"
    assert parse_version("2.13.0rc1").kind == "release candidate"
    assert parse_release("v2.13.0").minor_key == (2, 13)
    assert parse_release("ciflow/trunk/123") is None and parse_release("v2.14.0-rc1") is None


# --- G13: the bot's lane and its restrictions ---------------------------------------------------------


def test_it_asks_a_human_to_triage_what_the_bot_left_blocked_g13():
    a = evaluate(issue("Graph break on zip", "Unsupported: zip", labels=("oncall: pt2", "bot-triage-blocked")))

    assert item(a, "G13").state == "needs_human" and "stopped" in item(a, "G13").text


def test_it_never_suggests_releng_or_a_distributed_sub_queue_g13():
    assert "module: ci" in never_applied("oncall: releng")
    assert "oncall: distributed" in never_applied("oncall: distributed checkpointing")
    assert never_applied("oncall: distributed") == "" and never_applied("needs reproduction") == ""


def test_it_lists_what_the_bot_did_that_it_may_not_g13():
    breaches = bot_breaches(["module: dynamo", "needs reproduction", "oncall: releng"], ["module: inductor"])

    assert [b.evidence for b in breaches] == ["needs reproduction", "oncall: releng", "module: inductor"]
    assert all(b.rule_id == "G13" and b.state == "violated" for b in breaches)
    assert bot_breaches(["module: dynamo", "triaged"], []) == []


def test_it_keeps_the_human_only_labels_available_to_humans_g13():
    assert "needs reproduction" not in {i["name"] for i in CURRENT.labels}  # the skill's bot may not add it
    assert {"actionable", "needs design", "needs reproduction", "needs research"} <= CURRENT.names()


def test_it_keeps_the_skills_label_checks_out_of_what_the_labeler_learns():
    from rubric_app.rubric.engine.assess import read

    features = read(_with(CRASH_ON_RELEASE, labels=("oncall: pt2", "bot-triage-blocked"))).features()

    assert not any(name.startswith(("rule:G10", "rule:G11", "rule:G12", "rule:G13", "check:G11")) for name in features)
    assert (
        "rule:G9.1:flag:needs reproduction"
        in read(issue("Compiled detector gives NaN", "model.load_state_dict(torch.load('a.pth'))")).features()
    )
