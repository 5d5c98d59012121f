"""The thread reader (rubric/reading/thread.py): scope, attribution, transfer, question, the thread's conclusion and
the backend results it reports, as facts with evidence spans, and what the engine makes of them (G1, G2, G8,
R1, R2, R2.4, R5, R6.2, R7.2).

The reader's own tests pin the rules; the engine's run twice, on the rules alone (use_model=False, so
each pins the rule, not a trained weight) and with the shipped learned labeler, which must not outvote
what the thread says.
"""

from __future__ import annotations

from functools import partial

import pytest

from rubric_app.rubric.engine.assess import evaluate
from rubric_app.rubric.reading.text import Source, split_environment, split_thread_authored
from rubric_app.rubric.reading.thread import backend_results, conclusion, ladder, read_thread
from rubric_app.rubric.reading.types import BisectionEvidence, CommentText, IssueText
from rubric_app.vocabulary import is_module


def sources(body: str, *comments: str) -> list[Source]:
    return [Source("title", "t"), Source("body", body), *(Source(f"comment:{i}", c) for i, c in enumerate(comments))]


def kinds(facts, kind: str) -> list[tuple[str, str]]:
    return [(x.label, x.evidence) for x in facts if x.kind == kind]


def _assess(use_model: bool, title: str, body: str, *comments: tuple[str, str], reporter: str = "reporter"):
    issue = IssueText(
        1,
        title,
        body,
        tuple(CommentText(text, author=who) for who, text in comments),
        ("oncall: pt2",),
        author=reporter,
    )
    return evaluate(issue, use_model=use_model)


@pytest.fixture
def assess(use_model):
    """evaluate() on (title, body, *(author, comment)), by the rules alone or with the shipped model."""
    return partial(_assess, use_model)


@pytest.mark.parametrize(
    "text, label",
    [
        (
            "Fails on aot_eager_decomp_partition, passes on aot_eager, so it's the decomposition, not codegen.",
            "module: inductor",
        ),
        ("I bisected it: this isn't a dynamo bug, the guard is generated correctly.", "module: dynamo"),
        (
            "This has nothing to do with AOTAutograd; eager mode with the same hook also fails.",
            "module: pt2-dispatcher",
        ),
        ("Inductor is fine here, the graph handed to it is already wrong.", "module: inductor"),
    ],
)
def test_it_reads_a_negation_with_its_evidence(text, label):
    facts = read_thread(sources("Repro below.", text))
    negated = kinds(facts, "negated")
    assert [l for l, _ in negated] == [label]
    assert negated[0][1] in text


@pytest.mark.parametrize(
    "text",
    [
        "Not only inductor: aot_eager fails the same way.",
        "I'm not sure whether dynamo or inductor is at fault yet.",
        "The inductor output is not correct for the second call.",
    ],
)
def test_it_does_not_read_a_negation_where_there_is_none(text):
    assert kinds(read_thread(sources("Repro below.", text)), "negated") == []


@pytest.mark.parametrize(
    "text, label",
    [
        (
            "AOTAutograd is only the caller here; the meta function of the custom op returns the wrong stride.",
            "module: pt2-dispatcher",
        ),
        ("Dynamo is just where it surfaces, the real problem is the decomposition of aten.var_mean.", "module: dynamo"),
        ("The error is only raised in inductor because it is the first to check the strides.", "module: inductor"),
    ],
)
def test_it_reads_an_attribution(text, label):
    attributed = kinds(read_thread(sources("Repro below.", text)), "attributed")
    assert [l for l, _ in attributed] == [label]


def test_it_does_not_read_an_attribution_from_a_plain_mention():
    facts = read_thread(
        sources(
            "Repro below.", "AOTAutograd is the caller that lifts the mutation out of the graph, and it gets it wrong."
        )
    )
    assert kinds(facts, "attributed") == []


def test_it_takes_the_latest_diagnosis_of_someone_other_than_the_reporter():
    facts = read_thread(
        sources(
            "I think it's a dynamo bug.",
            "Looks like an inductor issue to me.",
            "Root caused to AOTAutograd: the view replay is wrong.",
        ),
        authors={"comment:0": "someone", "comment:1": "reporter"},
        reporter="reporter",
    )
    assert conclusion(facts).label == "module: inductor"
    assert conclusion(facts).source == "comment:0"


def test_it_drops_a_diagnosis_a_later_comment_rules_out():
    facts = read_thread(
        sources("Repro below.", "This looks like an inductor bug.", "No, it's not inductor: aot_eager fails too.")
    )
    assert conclusion(facts) is None


@pytest.mark.parametrize(
    "text, repo",
    [
        (
            "Thanks for the report. The fix belongs in pytorch/vision, roi_align's meta kernel lives there.",
            "pytorch/vision",
        ),
        ("This should be filed in torchaudio, their resampler calls an unsupported API.", "torchaudio"),
    ],
)
def test_it_reads_a_transfer(text, repo):
    [(found, evidence)] = kinds(read_thread(sources("Repro below.", text)), "transfer")
    assert found == repo and evidence in text and repo in evidence


def test_it_does_not_read_a_transfer_from_pytorch_itself_or_a_mention():
    facts = read_thread(
        sources("I use torchvision 0.20.", "The fix belongs in pytorch/pytorch, in the inductor lowering.")
    )
    assert kinds(facts, "transfer") == []


def test_it_reads_a_question_and_an_expected_behaviour_reply():
    facts = read_thread(
        sources(
            "How do I make torch.compile skip one function?",
            "You can wrap it in torch._dynamo.disable. This is expected behavior.",
        ),
        authors={"comment:0": "maintainer"},
        reporter="reporter",
    )
    assert [x.source for x in facts if x.kind == "question"] == ["body", "comment:0"]


def test_it_does_not_read_a_question_from_a_bug_report():
    facts = read_thread(
        sources("Compiling this model raises an InductorError.\n\nCould someone take a look?", "Thanks, taking a look.")
    )
    assert [x for x in facts if x.kind == "question"] == []


def test_it_keeps_the_authors_of_a_harvested_thread():
    body = (
        "# Title\n\nalice · description · 2025-01-02\nIt fails.\n\nbob · comment · 2025-01-03\nNot codegen.\n\n"
        "alice · comment · 2025-01-04\nThanks."
    )
    description, reporter, comments = split_thread_authored(body)
    assert reporter == "alice" and [a for a, _ in comments] == ["bob", "alice"] and "It fails." in description


def outcomes(*texts: str, title: str = "t") -> dict[str, str]:
    """The latest reported outcome per backend, as "fails"/"passes"."""
    found = ladder(backend_results([Source("title", title), *(Source(f"comment:{i}", t) for i, t in enumerate(texts))]))
    return {backend: "fails" if x.failed else "passes" for backend, x in found.items()}


@pytest.mark.parametrize(
    "text, expected",
    [
        # As reports write it: backticks, lists, "confirming", a negated failure.
        (
            "`aot_eager` produces correct results, confirming this is an Inductor codegen issue.",
            {"aot_eager": "passes"},
        ),
        (
            (
                "In that case, eager and `aot_eager` both run successfully, "
                "while Inductor with `dynamic=True` fails with the same lowering error."
            ),
            {"aot_eager": "passes", "inductor": "fails"},
        ),
        (
            "compile with `inductor` backend has this issue, aot_eager and eager backends do not have this issue",
            {"inductor": "fails", "aot_eager": "passes", "eager": "passes"},
        ),
        (
            "aot_eager, aot_eager_decomp_partition and inductor all fail with the same error.",
            {"aot_eager": "fails", "aot_eager_decomp_partition": "fails", "inductor": "fails"},
        ),
        (
            "Fails on aot_eager_decomp_partition, passes on aot_eager, so it's the decomposition.",
            {"aot_eager_decomp_partition": "fails", "aot_eager": "passes"},
        ),
        ("It doesn't work with `aot_eager` either.", {"aot_eager": "fails"}),
        ("No error with backend='aot_eager'.", {"aot_eager": "passes"}),
        ('Even backend="eager" fails with the same exception.', {"eager": "fails"}),
        ("Not only inductor: aot_eager fails the same way.", {"aot_eager": "fails"}),
    ],
)
def test_it_reads_backend_results_r2(text, expected):
    assert outcomes(text) == expected
    for x in backend_results([Source("comment:0", text)]):
        assert x.evidence in text


@pytest.mark.parametrize(
    "text",
    [
        # The reference a result is compared against is no result of its own; a bare "eager" is eager mode.
        "The upsample operator produces results that do not match the eager backend.",
        "The compiled output differs from eager by 1e-2.",
        "Inductor is 3x slower than eager.",
        # A backend named in code, or without an outcome, says nothing.
        "```python\nprint('aot_eager fails')\nopt = torch.compile(f, backend='aot_eager')\n```",
        "Outputs are compared to both eager and aot_eager backends.",
    ],
)
def test_it_reads_no_backend_result_where_there_is_none(text):
    assert {k: v for k, v in outcomes(text).items() if k != "inductor"} == {}


def test_it_reads_the_backend_results_a_repros_comments_report_r2():
    repro = (
        "```python\nref = f(x)\n# aot_eager: works\naot = torch.compile(f, backend='aot_eager')(x)  # OK\n"
        "out = torch.compile(f)(x)  # Inductor: CRASHES\n```"
    )
    assert outcomes(repro) == {"aot_eager": "passes", "inductor": "fails"}
    [line] = [x for x in backend_results([Source("body", repro)]) if "# OK" in x.evidence]
    assert line.evidence in repro and line.backend == "aot_eager"
    # Code is not a comment: commented-out code, a print, a `#` inside a string say nothing.
    quiet = (
        "```python\n#@torch.compile(fullgraph=True, backend=\"eager\")\nprint('aot_eager fails')\n"
        "color = '#fff'  # aot_eager fails here\n```"
    )
    assert outcomes(quiet) == {}


def test_it_reads_no_sentence_across_a_code_block():
    # Found by the invariants' property test: the prose around a code block was joined into one sentence, so the
    # evidence ("torch.compile  aot_eager fails") was no text of the issue.
    body = "torch.compile ```python\nx = 1\n``` aot_eager fails"
    for x in backend_results([Source("body", body)]):
        assert x.evidence in body
    negated = kinds(read_thread(sources("It is not ```python\nx = 1\n``` codegen.")), "negated")
    assert negated == []


def test_it_reads_a_backend_in_the_title_and_lets_a_later_comment_correct_an_earlier_one():
    assert outcomes(title="Bug: `torch.func.jacrev` fails with backend=`aot_eager`") == {"aot_eager": "fails"}
    assert outcomes(title="[aot_eager] retain_grad is ignored") == {"aot_eager": "fails"}
    assert outcomes(
        "aot_eager fails with the same error.", "Sorry, my mistake: aot_eager works, only inductor fails."
    ) == {"aot_eager": "passes", "inductor": "fails"}


# --- the engine with the thread's facts ---------------------------------------------------------------


def test_it_lets_the_thread_conclusion_beat_a_keyword_g8(assess):
    a = assess(
        "Wrong gradient of gelu under torch.compile",
        "x = torch.randn(3)\nprint(torch.compile(f)(x))",
        ("expert", "Fails on aot_eager_decomp_partition, passes on aot_eager, so it's the decomposition, not codegen."),
    )
    assert "module: decompositions" in a.labels()
    assert "module: inductor" not in a.labels()
    assert any(x.label == "module: inductor" and x.rule_id == "G8" for x in a.avoid)


def test_it_ranks_the_thread_conclusion_first_whatever_the_words_say_r2(assess):
    # The traceback runs through Inductor and the title names no component; a maintainer's reply
    # concludes it is the decomposition. That conclusion is the component `a` would apply.
    body = (
        "Second derivative differs from eager.\n```python\nh = torch.compile(d2)(x)\n```\n"
        'File "torch/_inductor/graph.py", line 900, in run\nAssertionError: mismatch on the GPU'
    )
    a = assess(
        "Compiled second derivative of silu is wrong",
        body,
        ("expert", "This is a decomposition bug: the decomposition of silu_backward treats sigmoid(x) as a constant."),
    )
    modules = [s for s in a.add if is_module(s.label)]
    assert modules[0].label == "module: decompositions" and modules[0].rule_id == "R2"
    assert "module: inductor" not in a.preselected()
    # The reporter's own guess is not a conclusion that outranks the evidence.
    guess = assess(
        "Compiled second derivative of silu is wrong", body, ("reporter", "This is a decomposition bug I think.")
    )
    assert not any(s.rule_id == "R2" and s.preselected for s in guess.add)


def test_it_avoids_pt2_dispatcher_when_aotautograd_is_only_the_caller_r5(assess):
    trace = (
        'File "torch/_functorch/_aot_autograd/runtime_wrappers.py", line 300\nRuntimeError: FakeTensor stride mismatch'
    )
    a = assess(
        "Compiled model raises a stride error",
        trace,
        ("expert", "AOTAutograd is only the caller; the custom op's meta kernel is wrong."),
    )
    assert "module: pt2-dispatcher" not in a.labels()
    before = assess("Compiled model raises a stride error", trace)
    assert "module: pt2-dispatcher" in before.labels()  # the keyword alone still suggests it


def test_it_transfers_when_the_fix_belongs_in_another_repo_g2(assess):
    a = assess(
        "roi_align gives wrong results under torch.compile",
        "torch.compile(model) and inductor output differs",
        ("expert", "The fix belongs in pytorch/vision: roi_align's meta kernel is wrong."),
    )
    assert a.route == "transfer"
    assert not [l for l in a.labels() if is_module(l) or l in ("triage review", "triaged")]
    assert any(c.rule_id == "G2" and c.state == "satisfied" for c in a.checklist)


def test_it_does_not_transfer_on_the_reporters_own_guess(assess):
    a = assess(
        "roi_align gives wrong results under torch.compile",
        "Maybe this belongs in pytorch/vision? torch.compile(model)",
        ("reporter", "Or maybe this is a bug in torchvision."),
    )
    assert a.route != "transfer"


def test_it_preselects_nothing_on_a_usage_question_g1(assess):
    a = assess(
        "How to make dynamo skip a function?",
        "I want torch.compile to skip one helper.",
        ("expert", "Use torch._dynamo.disable on it; this is expected behavior."),
    )
    assert any(c.rule_id == "G1" for c in a.checklist)
    assert not [l for l in a.preselected() if is_module(l)]
    assert "triaged" not in a.labels()


def test_it_does_not_route_to_cpu_from_a_cpu_build_string_r2_4(assess):
    env = "Collecting environment information...\nPyTorch version: 2.5.1+cpu\nIs CUDA available: False"
    a = assess("[inductor] wrong output of compiled layer norm", "The compiled output differs.\n" + env)
    assert a.route == "pt2"
    assert any(c.rule_id == "R2.4" and "+cpu" in c.evidence for c in a.checklist)
    cpu = assess("[inductor] wrong output of compiled layer norm", "It happens only on CPU; on CUDA it matches.")
    assert cpu.route == "cpu inductor"


# collect_env's report as the bug template's "### Versions" section has it: every synced issue carries one.
ENVIRONMENT = """### Versions

Collecting environment information...
PyTorch version: 2.5.1+cu124
Is debug build: False
CUDA used to build PyTorch: 12.4
ROCM used to build PyTorch: N/A
OS: Ubuntu 22.04.4 LTS (x86_64)
Python version: 3.11.9 (main, Apr 19 2024, 16:48:06) [GCC 11.2.0] (64-bit runtime)
Is CUDA available: True
GPU models and configuration: GPU 0: NVIDIA A100-SXM4-80GB
cuDNN version: Probably one of the following:
/usr/lib/x86_64-linux-gnu/libcudnn.so.9.1.0
CPU:
Architecture:                         x86_64
Model name:                           Intel(R) Xeon(R) Platinum 8358 CPU @ 2.60GHz
Flags:                                fpu vme sse sse2 avx avx2 avx512f avx512_bf16 amx_tile
Vulnerability Spectre v2:             Mitigation; Enhanced / Automatic IBRS

Versions of relevant libraries:
[pip3] numpy==1.26.4
[pip3] helion==0.2.1
[pip3] torch==2.5.1
[pip3] triton==3.1.0
[conda] mkl 2023.1.0 h213fc3f_46344

cc @chauhang @penguinwu"""


@pytest.mark.parametrize(
    "title, body",
    [
        (
            "Graph break on zip in a compiled loop",
            "```python\nfor a, b in zip(xs, ys):\n    out += a * b\n```\n"
            "torch._dynamo.exc.Unsupported: call_function BuiltinVariable(zip)",
        ),
        ("torch.compile gives wrong results for my model", "The outputs differ from eager by 1e-2."),
        ("Recompiles on every batch size", "Guard failed: L['x'].size()[0] == 8, dynamic=False fixes it."),
    ],
)
def test_it_reads_the_environment_report_as_what_was_installed_not_as_evidence(use_model, title, body):
    # Its "CUDA", "triton==3.1.0", "[pip3] helion", CPU flags and MKL are the reporter's machine: with the report
    # appended, the suggestions are the report's own (the labeled issues the labeler learned from rarely had one).
    bare = evaluate(IssueText(1, title, body, labels=("oncall: pt2",)), use_model=use_model)
    full = evaluate(
        IssueText(1, title, f"### 🐛 Describe the bug\n\n{body}\n\n{ENVIRONMENT}", labels=("oncall: pt2",)),
        use_model=use_model,
    )
    assert (full.labels(), full.preselected(), full.route) == (bare.labels(), bare.preselected(), bare.route)
    assert not {"module: helion", "oncall: cpu inductor"} & set(full.labels())
    assert all(s.evidence not in ENVIRONMENT for s in full.add if s.evidence_source == "body" and len(s.evidence) > 3)


def test_it_keeps_what_the_reporter_writes_under_the_versions_heading():
    kept, report = split_environment(
        "### Versions\n\nfailing since 6/22, was working on 6/19\n" + ENVIRONMENT.split("\n", 1)[1]
    )
    assert "failing since 6/22, was working on 6/19" in kept and "### Versions" in report  # the template's heading
    assert "Is CUDA available: True" in report and "[pip3] triton==3.1.0" in report and "Flags:" in report
    assert not any(word in kept for word in ("triton", "A100", "avx512", "Ubuntu", "mkl", "libcudnn"))
    for line in (
        "eager:    363.32 ms",
        "Model outputs differ: see below",
        "def fn(t0, ta):          # ta is a view",
        "max diff:     tensor(0.0010)",
        "OS-level threads: 8",
    ):
        assert split_environment(line) == (line, "")


def test_it_asks_about_cuda_from_the_environment_report_r2_4(assess):
    # A machine without CUDA ran it: R2.4's question, quoting the report's line (the body it was cut from).
    body = "The compiled output differs.\n\n" + ENVIRONMENT.replace(
        "Is CUDA available: True", "Is CUDA available: False"
    )
    a = assess("[inductor] wrong output of compiled layer norm", body)
    question = next(c for c in a.checklist if c.rule_id == "R2.4")
    assert question.evidence == "Is CUDA available: False" and question.evidence in body
    assert a.route == "pt2" and "oncall: cpu inductor" not in a.preselected()
    assert not any(
        c.rule_id == "R2.4"
        for c in assess(
            "[inductor] wrong output of compiled layer norm", "The compiled output differs.\n\n" + ENVIRONMENT
        ).checklist
    )


def test_it_does_not_preselect_the_cpu_route_a_bisection_did_not_show_r2_4(use_model):
    # The title's [CPU] tag suggests the CPU lane (R10), but the bisection ran Inductor on the CPU only:
    # "fails only on cpu" is unproven until a GPU run passes, so `a` must not move the issue.
    env = "PyTorch version: 2.5.1+cpu\nIs CUDA available: False"
    verdict = BisectionEvidence("module: inductor", "R2.2", "first failure: inductor on cpu; CUDA not checked", 7)
    issue = IssueText(
        1,
        "[inductor][CPU] wrong output of compiled layer norm",
        "The compiled output differs.\n" + env,
        labels=("oncall: pt2",),
        bisection=(verdict,),
    )
    a = evaluate(issue, use_model=use_model)
    assert "oncall: cpu inductor" not in a.preselected()
    assert "module: inductor" in a.preselected()  # the bisection's own verdict is ticked
    shown = evaluate(
        IssueText(
            1,
            issue.title,
            issue.body,
            labels=issue.labels,
            bisection=(
                verdict,
                BisectionEvidence("oncall: cpu inductor", "R2.4", "inductor fails on cpu and passes on cuda", 8),
            ),
        ),
        use_model=use_model,
    )
    assert "oncall: cpu inductor" in shown.preselected()


def test_it_does_not_add_dynamo_next_to_the_right_component_r1(assess):
    a = assess(
        "[dynamo] inductor generates a wrong kernel for cumsum", "The generated triton kernel loads the wrong index."
    )
    modules = [l for l in a.labels() if is_module(l)]
    assert modules == ["module: inductor"]


@pytest.mark.parametrize(
    "title, label",
    [
        ("Compile time of a 48-layer transformer went from 40s to 6 minutes", "module: compile-time"),
        ("[inductor] fused softmax kernel is 3x slower than eager after the last nightly", "module: performance"),
    ],
)
def test_it_labels_a_symptom_that_is_the_subject_next_to_the_component_r7_2(title, label, assess):
    a = assess(title, "torch.compile(model, mode='max-autotune') with inductor")
    assert label in a.labels()
    assert "module: inductor" in a.labels()


@pytest.mark.parametrize(
    "title, body",
    [
        (
            "DTensor under torch.compile raises an unhelpful error message",
            "torch.compile(model) with DTensor inputs gives a cryptic error.",
        ),
        (
            "Compiling DTensor matmul raises opaque AssertionError instead of the eager sharding error",
            (
                "Under torch.compile the same DTensor code fails with a bare `AssertionError` "
                "and no hint about placements."
            ),
        ),
    ],
)
def test_it_keeps_a_bad_error_message_under_compile_as_compile_ux_r6_2(title, body, assess):
    a = assess(title, body)
    assert "module: compile ux" in a.labels()
    assert a.route == "pt2"


def test_it_does_not_read_a_plain_assertion_as_a_ux_complaint_r6_2(assess):
    a = assess(
        "DTensor matmul under torch.compile fails",
        "torch.compile(f)(a, b) raises AssertionError: expected a TensorVariable",
    )
    assert "module: compile ux" not in a.labels()


def test_it_takes_the_component_from_the_backend_results_in_the_thread_r2(assess):
    # The title and traceback name Inductor; the thread's backend results put the bug before it.
    trace = 'File "torch/_inductor/graph.py", line 900, in run\nInductorError: LoweringException'
    upstream = assess(
        "[inductor] compiled jacrev raises a LoweringException",
        trace,
        ("expert", "It fails with backend=`aot_eager` too, and passes in eager."),
    )
    assert "module: pt2-dispatcher" in upstream.labels()
    assert "module: inductor" not in upstream.labels()
    # "`aot_eager` produces correct results" puts it in Inductor, decisively (R2.2).
    codegen = assess(
        "Compiled avg_pool1d backward is wrong",
        "The gradient differs from eager.",
        ("expert", "`aot_eager` produces the correct gradient, so this is in the generated code."),
    )
    [inductor] = [s for s in codegen.add if s.label == "module: inductor"]
    assert inductor.rule_id == "R2.2" and inductor.preselected and "aot_eager" in inductor.evidence


def test_it_does_not_read_the_eager_reference_as_a_failing_eager_backend_r2_3(assess):
    a = assess(
        "[inductor] upsample_nearest gives different results under torch.compile",
        "The operator produces results that do not match the eager backend.",
    )
    assert not any(s.rule_id == "R2.3" for s in a.add)
    assert "module: dynamo" not in a.preselected()


def test_it_cites_the_backend_result_a_comment_reports_as_read_r2():
    a = evaluate(
        IssueText(
            1,
            "Compiled where() on a mutated view is wrong",
            "torch.compile(f)(x) differs from eager.",
            (CommentText("Thanks! Checked the ladder: `backend='eager'` correct, `aot_eager` wrong."),),
            ("oncall: pt2",),
        ),
        use_model=False,
    )
    read = next(c for c in a.checklist if c.rule_id == "R2" and c.state == "satisfied" and "comment" in c.text)
    assert read.evidence == "`aot_eager` wrong"


def test_it_says_when_the_bisection_and_the_threads_backend_results_disagree_r2(use_model):
    verdict = BisectionEvidence("module: inductor", "R2.2", "first failure: inductor on cuda", 7)
    thread = (CommentText("On my machine it fails with backend=`aot_eager` too, and passes in eager."),)
    a = evaluate(
        IssueText(
            1,
            "Compiled layer norm returns wrong values",
            "torch.compile(f)(x) differs from eager.",
            thread,
            ("oncall: pt2",),
            bisection=(verdict,),
        ),
        use_model=use_model,
    )
    # A verdict the thread contradicts is weighed, not obeyed (issue #36): the reporter's backend result stands,
    # the run's component is not pre-selected, and the checklist says what each saw.
    assert "module: pt2-dispatcher" in a.labels() and "module: inductor" not in a.preselected()
    [disagree] = [c for c in a.checklist if "Bisection run 7 points at module: inductor" in c.text]
    assert (
        disagree.state == "needs_human"
        and disagree.rule_id == "R2.2"
        and 'comment 1 says module: pt2-dispatcher ("On my machine it fails with backend=`aot_eager` too'
        in disagree.text
        and "weighed as evidence beside the thread" in disagree.text
    )
    agreeing = evaluate(
        IssueText(
            2,
            "Compiled layer norm returns wrong values",
            "torch.compile(f)(x) differs from eager.",
            (CommentText("`aot_eager` produces correct results here."),),
            ("oncall: pt2",),
            bisection=(verdict,),
        ),
        use_model=use_model,
    )
    assert not [c for c in agreeing.checklist if "points at" in c.text]
    assert "module: inductor" in agreeing.preselected()  # where they agree, the verdict decides (R2)
    # Either way the backend results are there: the checklist never also asks to run the bisection.
    for assessed in (a, agreeing):
        assert not [c for c in assessed.checklist if c.text.startswith("No backend results yet")]
        assert [c for c in assessed.checklist if c.text == "Backend results decide the component."]
