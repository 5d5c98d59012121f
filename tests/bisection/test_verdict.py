"""The verdict reads where a failure was raised, not only which mode failed (R5, R9.2, R4, R1.3; G8).

Results are written as the harness records them (child.py: exception, message, and a traceback tail
whose last frames are the root cause's), from failures seen on torch 2.13.
"""

from __future__ import annotations

from rubric_app.bisection.child import ROOT_CAUSE, root_cause, traceback_tail
from rubric_app.bisection.verdict import decide, innermost_frames, read_failure
from tests.bounded import run_bounded

SITE = "/usr/lib/python3.11/site-packages/"


def frames(*paths: str) -> str:
    return "Traceback (most recent call last):\n" + "".join(
        f'  File "{SITE}{path.split(":")[0]}", line 10, in {path.split(":")[1]}\n    x = y\n' for path in paths
    )


def result(mode: str, exception: str, message: str, traceback: str = "", status: str = "raised") -> dict:
    return {
        "mode": mode,
        "status": status,
        "phase": "backend_compile" if mode != "dynamo_eager" else "dynamo_tracing",
        "exception": exception,
        "message": message,
        "traceback": traceback,
        "probes": {},
        "wall_s": 1.0,
    }


def ladder(failure: dict) -> list[dict]:
    modes = ["eager", "dynamo_eager", "aot_eager", "aot_eager_decomp_partition", "inductor"]
    out = []
    for mode in modes:
        if mode == failure["mode"]:
            out.append(failure)
            break
        out.append({"mode": mode, "status": "passed", "phase": "", "exception": "", "message": "", "probes": {}})
    return out


def labels(failure: dict, read: bool = True) -> list[tuple[str, str]]:
    return [(x["label"], x["rule_id"]) for x in decide(ladder(failure), "cpu", read_failures=read).labels]


def test_it_calls_a_functionalization_bug_in_decomp_partition_pt2_dispatcher_r5():
    failure = result(
        "aot_eager_decomp_partition",
        "torch._dynamo.exc.BackendCompilerFailed",
        "inner: RuntimeError: false INTERNAL ASSERT FAILED: mutating a view of an input\n"
        "torch._dynamo.exc.BackendCompilerFailed: backend='aot_eager_decomp_partition' raised",
        frames(
            "torch/_dynamo/output_graph.py:call_user_compiler",
            "torch/_decomp/decompositions.py:slice_scatter",
            "torch/_subclasses/functional_tensor.py:__torch_dispatch__",
        ),
    )
    assert labels(failure, read=False) == [("module: decompositions", "R2.5")]
    assert labels(failure) == [("module: pt2-dispatcher", "R5")]
    evidence = decide(ladder(failure), "cpu").labels[0]["evidence"]
    assert "raised in torch/_subclasses/functional_tensor.py:__torch_dispatch__" in evidence


def test_it_calls_a_custom_op_registration_error_while_tracing_pt2_dispatcher_r5():
    failure = result(
        "dynamo_eager",
        "torch._dynamo.exc.TorchRuntimeError",
        "torch._dynamo.exc.TorchRuntimeError: RuntimeError when making fake tensor call\n"
        "  Explanation: got RuntimeError('There was no fake impl registered for <CustomOpDef(mylib::op)>.')",
        frames("torch/_dynamo/utils.py:get_fake_value", "torch/_library/custom_ops.py:__call__"),
    )
    assert labels(failure, read=False) == [("module: dynamo", "R2.3")]
    assert labels(failure) == [("module: pt2-dispatcher", "R5")]


def test_it_calls_a_functorch_higher_order_op_failure_functorch_even_while_tracing_r9_2():
    failure = result(
        "dynamo_eager",
        "torch._dynamo.exc.Unsupported",
        "torch._dynamo.exc.Unsupported: HigherOrderOperator: Mutating a variable not in the current scope",
        frames("torch/_dynamo/symbolic_convert.py:call_function", "torch/_dynamo/variables/higher_order_ops.py:call"),
    )
    assert labels(failure) == [("module: functorch", "R9.2")]
    traced = result(
        "dynamo_eager",
        "torch._dynamo.exc.InternalTorchDynamoError",
        "torch._dynamo.exc.InternalTorchDynamoError: RuntimeError",
        frames("torch/_dynamo/symbolic_convert.py:step", "torch/_functorch/vmap.py:_flat_vmap"),
    )
    assert labels(traced) == [("module: functorch", "R9.2")]


def test_it_calls_a_data_dependent_guard_dynamic_shapes_r1_3():
    failure = result(
        "dynamo_eager",
        "torch._dynamo.exc.InternalTorchDynamoError",
        "torch._dynamo.exc.InternalTorchDynamoError: DataDependentOutputException: aten._local_scalar_dense.default",
        frames("torch/_dynamo/utils.py:get_fake_value", "torch/_subclasses/fake_tensor.py:dispatch"),
    )
    assert labels(failure, read=False) == [("module: dynamo", "R2.3")]
    assert labels(failure) == [("module: dynamic shapes", "R1.3")]


def test_it_calls_a_failing_decomposition_decompositions_r4():
    failure = result(
        "aot_eager_decomp_partition",
        "torch._dynamo.exc.BackendCompilerFailed",
        "inner: IndexError: tuple index out of range",
        frames(
            "torch/_functorch/aot_autograd.py:aot_module_simplified", "torch/_refs/__init__.py:_reshape_view_helper"
        ),
    )
    assert labels(failure) == [("module: decompositions", "R2.5")] or labels(failure) == [
        ("module: decompositions", "R4")
    ]


def test_it_calls_a_fault_in_aotautograd_itself_pt2_dispatcher_r5_but_not_one_merely_passing_through():
    at_fault = result(
        "inductor",
        "torch._dynamo.exc.BackendCompilerFailed",
        "inner: AssertionError: expected a view",
        frames("torch/_inductor/compile_fx.py:compile_fx", "torch/_functorch/_aot_autograd/runtime_wrappers.py:post"),
    )
    assert labels(at_fault) == [("module: pt2-dispatcher", "R5")]
    passing_through = result(
        "inductor",
        "torch._dynamo.exc.BackendCompilerFailed",
        "inner: LoweringException: AssertionError",
        frames(
            "torch/_functorch/_aot_autograd/jit_compile_runtime_wrappers.py:aot_dispatch_base",
            "torch/_inductor/lowering.py:make_fallback",
        ),
    )
    assert labels(passing_through) == [("module: inductor", "R2.2")]


def test_it_keeps_the_mode_where_the_failure_says_nothing_more():
    in_dynamo = result(
        "dynamo_eager",
        "torch._dynamo.exc.Unsupported",
        "torch._dynamo.exc.Unsupported: Call to `torch._dynamo.graph_break()`",
        frames("torch/_dynamo/symbolic_convert.py:call_function"),
    )
    assert labels(in_dynamo) == [("module: dynamo", "R2.3")]
    diverged = result("inductor", "", "call 0: differs from eager beyond tol=0.0001", status="diverged")
    assert read_failure(diverged) is None
    assert labels(diverged)[0] == ("module: inductor", "R2.2")
    user_code = result("aot_eager", "ValueError", "ValueError: bad", 'File "/tmp/work/repro.py", line 3, in fn\n')
    assert read_failure(user_code) is None


def test_it_reads_the_innermost_pt2_frame_of_the_root_cause():
    text = (
        frames("torch/_dynamo/output_graph.py:call_user_compiler")
        + ROOT_CAUSE
        + frames(
            "torch/_functorch/aot_autograd.py:aot_module_simplified",
            "torch/_decomp/decompositions.py:_softmax",
        )
    )
    assert innermost_frames(text) == [
        "torch/_decomp/decompositions.py:_softmax",
        "torch/_functorch/aot_autograd.py:aot_module_simplified",
        "torch/_dynamo/output_graph.py:call_user_compiler",
    ]


def test_it_records_the_root_cause_frames_after_the_outer_ones():
    def fake_kernel():
        raise RuntimeError("the bug")

    try:
        try:
            fake_kernel()
        except RuntimeError as inner:
            raise ValueError("wrapped") from inner
    except ValueError as outer:
        assert root_cause(outer).args == ("the bug",)
        tail = traceback_tail(outer)
    before, after = tail.split(ROOT_CAUSE)
    assert "ValueError: wrapped" in before
    assert "in fake_kernel" in after and after.rstrip().endswith("RuntimeError: the bug")
    assert len(tail) <= 4000 + len(ROOT_CAUSE)


def test_it_reads_hostile_tracebacks_in_linear_bounded_time():
    # The traceback and message come from the repro's own exception: untrusted. A line is cut before the
    # regex reads it, only the last 400 lines are read and every quantifier is bounded; at these sizes a
    # backtracking pattern would take hours, the reader takes milliseconds.
    out = run_bounded("""
        from rubric_app.bisection.verdict import read_failure
        frame = '  File "torch/_inductor/x.py", line 1, in '
        tail = 'File "' + "a/" * 1_000_000 + '", line 1, in f\\n' + frame * 50_000
        result = {"status": "raised", "exception": "E" * 1_000_000, "message": "x" * 1_000_000, "traceback": tail}
        print(read_failure(result))
    """)
    assert out.split() == ["None"]
