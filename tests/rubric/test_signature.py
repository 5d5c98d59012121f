"""Failure signatures (rubric/likeness/signature.py): stable across run-specific details, different for different
failures, linear on hostile text."""

from __future__ import annotations

import pytest

from rubric_app.rubric.likeness.signature import normalize_message, pt2_frame, signature_of
from rubric_app.rubric.reading.types import CommentText, IssueText
from tests.bounded import run_bounded

LOWERING = """Traceback (most recent call last):
  File "{user}", line {n1}, in <module>
    frontend(torch.randn({b}, 8, {length}, device="cuda"), w)
  File "{site}/torch/_dynamo/eval_frame.py", line {n2}, in compile_wrapper
    raise e.with_traceback(None) from e.__cause__
  File "{site}/torch/_dynamo/output_graph.py", line {n3}, in _call_user_compiler
    raise BackendCompilerFailed(
torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:
InductorError: LoweringException: AssertionError: expected a static pad amount, got PythonMod(s{s}, {mod})
  target: aten.constant_pad_nd.default
  args[0]: TensorBox(StorageBox(InputBuffer(name='arg{s}_1', \
layout=FixedLayout('cuda:0', torch.float32, size=[{b}, 8, s{s}]))))

  File "{site}/torch/_inductor/lowering.py", line {n4}, in {fn}
    assert isinstance(p, int), f"expected a static pad amount, got {{p}}"
"""


def _issue(body: str, comments=()) -> IssueText:
    return IssueText(1, "t", body, tuple(CommentText(c) for c in comments))


def _lowering(**kwargs) -> str:
    values = dict(
        user="/home/ana/repro.py",
        site="/opt/conda/lib/python3.11/site-packages",
        n1=12,
        n2=842,
        n3=1902,
        n4=4418,
        b=3,
        length=103,
        s=1,
        mod=4,
        fn="constant_pad_nd",
    )
    return "```\n" + LOWERING.format(**{**values, **kwargs}) + "```\n"


def test_it_reads_the_exception_through_its_wrappers_and_the_innermost_pt2_frame():
    signature = signature_of(_issue("It fails on the second call.\n\n" + _lowering()))

    assert signature.exception == "AssertionError"
    assert signature.message == "expected a static pad amount, got pythonmod<shape>"
    # Inductor prints the lowering's frame under its message: it is the innermost one.
    assert signature.frames == (
        "torch/_inductor/lowering.py:constant_pad_nd",
        "torch/_dynamo/output_graph.py:_call_user_compiler",
        "torch/_dynamo/eval_frame.py:compile_wrapper",
    )
    assert signature.specific and signature.source == "body"
    assert signature.describe() == (
        "AssertionError: expected a static pad amount, got pythonmod<shape> "
        "in torch/_inductor/lowering.py:constant_pad_nd"
    )


@pytest.mark.parametrize(
    "changes",
    [
        dict(b=17, length=4099, s=7, mod=16),  # other shapes, sizes and symbols
        dict(n1=1, n2=2, n3=3, n4=4),  # other line numbers (another PyTorch version)
        dict(user=r"C:\Users\me\work\tts.py", site=r"C:\Python311\Lib\site-packages"),  # Windows paths
        dict(site="/data/users/me/pytorch"),  # a source checkout instead of site-packages
    ],
)
def test_it_gives_the_same_signature_whatever_the_run_specific_details(changes):
    assert signature_of(_issue(_lowering(**changes))).key == signature_of(_issue(_lowering())).key


def test_it_is_stable_across_cosmetic_differences_of_the_message():
    a = normalize_message('Expected size [2, 3, 4] but got torch.Size([s0, 16]) for "x" at 0x7f3a10 in /tmp/a/b.py')
    b = normalize_message(
        "expected  size [8, 1, 64]  but got torch.Size([s12, 32]) for 'x' at 0x55aa in /home/u/c/d.py"
    )
    assert a == b == "expected size <shape> but got <shape> for 'x' at <addr> in <path>"
    assert normalize_message("FakeTensor(..., size=(2, s1)) vs tensor([1., 2.])") == "<tensor> vs <tensor>"
    assert normalize_message("dtype float16 vs bfloat16, 2.5e-3 apart") == "dtype float16 vs bfloat16, n apart"


def test_it_tells_different_failures_apart():
    base = signature_of(_issue(_lowering())).key
    other_frame = _lowering(fn="pad_reflect")
    other_exception = _lowering().replace("AssertionError: expected", "RuntimeError: expected")
    other_message = _lowering().replace("a static pad amount", "a contiguous input")

    keys = {signature_of(_issue(text)).key for text in (other_frame, other_exception, other_message)}
    assert len(keys) == 3 and base not in keys


def test_it_takes_the_root_cause_of_a_chained_traceback():
    body = """```
Traceback (most recent call last):
  File "/x/site-packages/torch/fx/experimental/symbolic_shapes.py", line 6000, in _evaluate_expr
    raise GuardOnDataDependentSymNode(msg)
torch.fx.experimental.symbolic_shapes.GuardOnDataDependentSymNode: Could not guard on data-dependent expression u0 < 10

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "repro.py", line 9, in <module>
    f(x)
  File "/x/site-packages/torch/_dynamo/convert_frame.py", line 1200, in __call__
    raise InternalTorchDynamoError(...) from e
torch._dynamo.exc.InternalTorchDynamoError: GuardOnDataDependentSymNode: \
Could not guard on data-dependent expression u0 < 10
```"""
    signature = signature_of(_issue(body))

    assert signature.exception == "GuardOnDataDependentSymNode"
    assert (
        signature.frames[0] == "torch/fx/experimental/symbolic_shapes.py:_evaluate_expr"
    )  # the root's, not the wrapper's


def test_it_reads_the_comments_when_the_body_has_no_traceback_and_bare_error_lines_last():
    from_comment = signature_of(_issue("Compiling fails, log below.", comments=["thanks", _lowering()]))
    bare = signature_of(_issue("With fullgraph=True:\n\ntorch._dynamo.exc.Unsupported: Dynamic shape operator"))

    assert from_comment.source == "comment:1" and from_comment.exception == "AssertionError"
    assert (bare.exception, bare.message, bare.frames) == ("Unsupported", "dynamic shape operator", ())
    assert signature_of(_issue("Compiling is slow: 40 s for a small model. Note: it used to be fast.")) is None


def test_it_keeps_only_pt2_frames_and_groups_only_specific_signatures():
    assert pt2_frame("/home/me/model.py", "forward") == ""
    assert pt2_frame("/usr/lib/python3/site-packages/torch/nn/modules/module.py", "_call_impl") == ""
    assert pt2_frame("/home/torch/pytorch/torch/_inductor/ir.py", "create") == "torch/_inductor/ir.py:create"
    vague = signature_of(
        _issue('Traceback (most recent call last):\n  File "main.py", line 3, in <module>\nRuntimeError: boom\n')
    )
    assert vague.exception == "RuntimeError" and not vague.specific  # "boom" in user code says too little to group by


def test_it_costs_linear_bounded_time_on_hostile_text():
    # Each of these is 150,000 characters of what the scanner looks for (headers, frames, exception
    # lines, shapes, paths): quadratic code would take hours here; line by line and bounded, milliseconds.
    out = run_bounded("""
        from rubric_app.rubric.reading.types import CommentText, IssueText
        from rubric_app.rubric.likeness.signature import normalize_message, signature_of
        from rubric_app.rubric.likeness.neighbours import terms_of
        frame = '  File "' + "/a" * 240 + '", line 1, in f\\n'
        bodies = [
            "Traceback (most recent call last):\\n" * 5_000,
            frame * 300,
            ('  File "x' + "a" * 500 + "\\n") * 300,
            "Traceback (most recent call last):\\n" + frame * 100 + "AssertionError: " + "[1," * 20_000 + "\\n",
            "A.B.C.D.E.F.G.H.I.J.Error: " * 6_000,
            "ValueError: " + "(" * 60_000 + "tensor(" * 10_000,
            "\\n" * 150_000,
            "x" * 5_000_000,
        ]
        found = []
        for body in bodies:
            issue = IssueText(1, "Error: " * 1_000, body, tuple(CommentText(body) for _ in range(50)))
            s = signature_of(issue)
            terms_of(issue, s)
            found.append(s.exception if s else "-")
        print(*found, len(normalize_message("a/" * 500_000 + "[1, " * 100_000)) <= 200)
    """)
    assert out.split() == ["-", "-", "-", "AssertionError", "-", "ValueError", "-", "-", "True"]
