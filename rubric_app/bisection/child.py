"""What runs inside the sandboxed child G: one repro under one mode (pure Python; torch, no Django).

The child reports only through `emit()` on a pipe, as JSON lines: phase
markers while it runs (so a crash or a hang can be located) and one final
"result" event with the outcome and, for comparison, the outputs serialized
with torch.save (the fork server reads them back with weights_only=True).
"""

from __future__ import annotations

import base64
import errno
import io
import json
import os
import random
import sys
import traceback
import types
from collections.abc import Callable
from typing import Any

from . import oracle

MODES = (
    "eager",
    "dynamo_eager",
    "aot_eager",
    "aot_eager_decomp_partition",
    "aot_eager_decomp_partition_crossref",
    "inductor",
)
# The torch backend each mode compiles with; "eager" (the reference) does not compile.
BACKENDS = {
    "dynamo_eager": "eager",
    "aot_eager": "aot_eager",
    "aot_eager_decomp_partition": "aot_eager_decomp_partition",
    "aot_eager_decomp_partition_crossref": "aot_eager_decomp_partition_crossref",
    "inductor": "inductor",
}
TRACING_EXCEPTIONS = ("Unsupported", "UserError", "TorchRuntimeError", "InternalTorchDynamoError")
MAX_OUTPUT_BYTES = 16 * 1024 * 1024

_res_fd = -1
_phase = "setup"


def emit(event: dict) -> None:
    """Write one JSON line to the result pipe (a single write, so lines never interleave)."""
    os.write(_res_fd, (json.dumps(event) + "\n").encode())


def set_phase(phase: str) -> None:
    global _phase
    if phase != _phase:
        _phase = phase
        emit({"event": "phase", "phase": phase})


def qualname(exc: BaseException) -> str:
    cls = type(exc)
    return cls.__name__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


RESOURCE_ERRNOS = (errno.EAGAIN, errno.EMFILE, errno.ENFILE)
RESOURCE_TEXTS = (
    "Resource temporarily unavailable",
    "could not fork",
    "fork: retry",
    "Too many open files",
    "can't start new thread",
)


def _chain(exc: BaseException) -> list[BaseException]:
    """exc and what it wraps: inner_exception (BackendCompilerFailed hides it), __cause__, __context__."""
    seen, todo = [], [exc]
    while todo and len(seen) < 20:
        current = todo.pop(0)
        if current is None or any(current is s for s in seen):
            continue
        seen.append(current)
        todo += [getattr(current, "inner_exception", None), current.__cause__, current.__context__]
    return seen


def out_of_resources(exc: BaseException) -> bool:
    """Whether exc comes from the sandbox's process/file budget (a fork, a thread or a file refused),
    which says nothing about the compiler: such a failure must never become a verdict."""
    for current in _chain(exc):
        if isinstance(current, OSError) and current.errno in RESOURCE_ERRNOS:
            return True
        text = str(current)
        if any(marker in text for marker in RESOURCE_TEXTS):
            return True
    return False


def classify(exc: BaseException) -> tuple[str, str]:
    """Return (status, phase) for an exception escaping the repro; status "resource" is not a result
    but an infrastructure failure (see out_of_resources)."""
    import torch
    from torch._dynamo.exc import BackendCompilerFailed

    if out_of_resources(exc):
        return "resource", _phase
    text = str(exc)
    if (
        isinstance(exc, MemoryError)
        or isinstance(exc, getattr(torch, "OutOfMemoryError", ()))
        or (isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text))
    ):
        return "oom", _phase if _phase != "setup" else "runtime"
    if isinstance(exc, BackendCompilerFailed):
        return "raised", "backend_compile"
    if type(exc).__name__ in TRACING_EXCEPTIONS and type(exc).__module__.startswith("torch._dynamo"):
        return "raised", "dynamo_tracing"
    return "raised", "runtime" if _phase in ("setup", "runtime") else _phase


def describe(exc: BaseException) -> str:
    """First lines of the message, plus the inner exception a BackendCompilerFailed hides (raised `from None`)."""
    inner = getattr(exc, "inner_exception", None)
    lines = [f"{qualname(exc)}: {exc}".strip()]
    if inner is not None:
        lines.insert(0, f"inner: {qualname(inner)}: {inner}".strip())
    return "\n".join("\n".join(lines).splitlines()[:8])[:2000]


ROOT_CAUSE = "\nRoot cause:\n"


def root_cause(exc: BaseException) -> BaseException:
    """The exception at the bottom of what exc wraps: inner_exception (BackendCompilerFailed), then __cause__,
    then an unsuppressed __context__. It was raised where the failure is; exc only says how it surfaced."""
    current = exc
    for _ in range(20):
        wrapped = getattr(current, "inner_exception", None) or current.__cause__
        if wrapped is None and not current.__suppress_context__:
            wrapped = current.__context__
        if not isinstance(wrapped, BaseException) or wrapped is current:
            break
        current = wrapped
    return current


def traceback_tail(exc: BaseException) -> str:
    """The last frames of exc and, after ROOT_CAUSE, those of its root cause, so that the innermost frame
    of the whole text is where the failure was raised (the verdict reads it: R5, R9.2, R4, R1)."""
    tail = "".join(traceback.format_exception(exc)[-8:])
    root = root_cause(exc)
    if root is exc:
        return tail[-4000:]
    return tail[-1500:] + ROOT_CAUSE + "".join(traceback.format_exception(root, chain=False)[-8:])[-2400:]


def _install_phase_markers() -> None:
    import torch._dynamo.callback as callback
    from torch._dynamo.output_graph import OutputGraph

    callback.on_compile_start(lambda *_: set_phase("dynamo_tracing"))
    callback.on_compile_end(lambda *_: set_phase("runtime"))
    original = OutputGraph.call_user_compiler

    def call_user_compiler(self, gm, example_inputs):
        set_phase("backend_compile")
        try:
            return original(self, gm, example_inputs)
        finally:
            set_phase("dynamo_tracing")

    OutputGraph.call_user_compiler = call_user_compiler


def _configure(mode: str, workdir: str, narrow: bool = False) -> None:
    """Per-run compile settings, applied in the child (the fork server's env was read at import)."""
    import torch._dynamo.config as dynamo_config
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(workdir, "inductor")
    os.environ["HOME"] = os.environ["TMPDIR"] = workdir
    import tempfile

    tempfile.tempdir = None
    inductor_config.fx_graph_cache = False
    functorch_config.enable_autograd_cache = False
    inductor_config.cpp_cache_precompile_headers = False
    inductor_config.compile_threads = 1
    dynamo_config.suppress_errors = False
    if mode == "eager":
        dynamo_config.disable = True
    elif not narrow:  # CompilerBisector picks the backends itself
        # Per graph, inside Dynamo: also catches torch._dynamo.optimize(custom_backend).
        dynamo_config.debug_backend_override = f">=0:{BACKENDS[mode]}"


def _detach(value: Any) -> Any:
    import torch
    from torch.utils._pytree import tree_map

    def leaf(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return x.detach().to("cpu").clone()
        if x is None or isinstance(x, (bool, int, float, str)):
            return x
        return repr(type(x))

    return tree_map(leaf, value)


class Recorder:
    """Patches torch.compile so every compiled callable uses this mode and records its outputs in order."""

    def __init__(self, mode: str, overrides: dict[str, Any]):
        import torch

        self.mode, self.overrides, self.outputs = mode, overrides, []
        # What a report of wrong gradients or a lost mutation looks at (oracle.py): the inputs of every compiled
        # call (their .grad at the end), the compiled modules (their parameters' .grad), each call's inputs after it.
        self.inputs, self.modules, self.mutations = [], [], []
        self.original = torch.compile
        torch.compile = self.compile

    def compile(self, model=None, **kwargs):
        if model is None:  # used as @torch.compile(...)
            return lambda m: self.compile(m, **kwargs)
        import torch

        kwargs.update(self.overrides)
        if self.mode == "eager":
            target = model
        else:
            kwargs["backend"] = BACKENDS[self.mode]
            if self.mode != "inductor":
                kwargs.pop("mode", None)
                kwargs.pop("options", None)
            target = self.original(model, **kwargs)
        if isinstance(target, torch.nn.Module):
            self.modules.append(target)
            target.register_forward_hook(lambda _m, args, out: self.record(args, out))
            return target
        return self.wrap(target)

    def record(self, args: Any, out: Any) -> None:
        self.outputs.append(_detach(out))
        self.inputs += [x for x in oracle.tensors(args) if not any(x is seen for seen in self.inputs)]
        self.mutations.append(oracle.state(args))

    def wrap(self, target: Callable) -> Callable:
        def recorded(*args, **kwargs):
            set_phase("runtime")
            out = target(*args, **kwargs)
            self.record((args, kwargs), out)
            return out

        return recorded

    def payload(self, printed: oracle.PrintedNumbers | None) -> dict:
        """What the script's compiled calls did, for compare.py: outputs, the inputs' state after each call, the
        gradients backward left on their inputs and parameters (where any requires grad), the printed numbers."""
        payload = {"outputs": list(self.outputs), "mutations": list(self.mutations)}
        params = [p for m in self.modules for p in m.parameters()]
        if any(x.requires_grad for x in self.inputs + params):
            payload["grads"] = oracle.gradients(self.inputs, self.modules)
        if printed is not None:
            payload["printed"] = printed.numbers()
        return payload


def _to(value: Any, device: str, fp64: bool) -> Any:
    import torch
    from torch.utils._pytree import tree_map

    def leaf(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            y = x.detach().to(device)
            if fp64 and y.is_floating_point():
                y = y.to(torch.float64)
            return y.requires_grad_(x.requires_grad) if y.is_floating_point() or y.is_complex() else y
        return x

    return tree_map(leaf, value)


def _run_module_style(ns: dict, mode: str, device: str, recorder: Recorder) -> dict:
    """Call fn on every input tuple (make_calls() or [make_inputs()]); for eager also in float64."""
    import copy

    import torch

    fn = ns["fn"]
    calls = ns["make_calls"]() if "make_calls" in ns else [ns["make_inputs"]()]
    if isinstance(fn, torch.nn.Module):
        fn = fn.to(device)
    kwargs = dict(ns.get("COMPILE_KWARGS", {}))
    target = torch.compile(fn, **kwargs)
    grads, backprop = [], bool(ns.get("BACKWARD"))
    for args in calls:
        grads.append(_call(target, fn, _to(args, device, False), backprop))
    result = {"outputs": list(recorder.outputs), "mutations": list(recorder.mutations)}
    if backprop:
        result["grads"] = grads
    if isinstance(ns.get("TOL"), (int, float)):
        result["tol"] = float(ns["TOL"])
    if mode == "eager":
        # The float64 truth for same(fp64_ref=...); optional: many repros are dtype-specific.
        try:
            fn64 = copy.deepcopy(fn).to(torch.float64) if isinstance(fn, torch.nn.Module) else fn
            outs64, grads64 = [], []
            for args in calls:
                args64 = _to(args, device, True)
                out = fn64(*args64)
                outs64.append(_detach(out))
                if backprop:
                    oracle.backward(out)
                    grads64.append(oracle.gradients(oracle.tensors(args64), _modules(fn64)))
            result["fp64"] = outs64
            result["fp64_grads"] = grads64 if backprop else None
        except Exception as exc:  # noqa: BLE001 - any failure only means "no fp64 reference"
            result["fp64"] = result["fp64_grads"] = None
            result["fp64_error"] = f"{qualname(exc)}: {str(exc)[:200]}"
    return result


def _modules(fn: Any) -> list:
    import torch

    return [fn] if isinstance(fn, torch.nn.Module) else []


def _call(target: Callable, fn: Any, args: tuple, backprop: bool) -> list:
    """One call of the compiled fn; with BACKWARD, backprop its outputs (as torch's run_fwd_maybe_bwd does) and
    return the gradients of its inputs and of fn's parameters, zeroed first so the calls do not add up."""
    for module in _modules(fn):
        module.zero_grad(set_to_none=True)
    out = target(*args)
    if not backprop:
        return []
    oracle.backward(out)
    return oracle.gradients(oracle.tensors(args), _modules(fn))


def _narrow(ns: dict, device: str, compile_fn: Callable) -> dict:
    """Run torch's CompilerBisector here, in the sandbox: which subsystem (and which pass, op or node)
    makes the compiled fn differ from eager. Returns {} when it finds nothing to blame.

    The oracle compiles afresh each call; the bisector steers the backend and the
    subsystems through its own state, so no backend override is set for this child.
    """
    import torch
    from torch._inductor.compiler_bisector import CompilerBisector

    from .compare import compare_outputs

    fn = ns["fn"]
    calls = ns["make_calls"]() if "make_calls" in ns else [ns["make_inputs"]()]
    if isinstance(fn, torch.nn.Module):
        fn = fn.to(device)
    kwargs = dict(ns.get("COMPILE_KWARGS", {}))
    tol = float(ns["TOL"]) if isinstance(ns.get("TOL"), (int, float)) else 1e-4
    ref = {"outputs": [_detach(fn(*_to(args, device, False))) for args in calls], "fp64": None}
    try:
        ref["fp64"] = (
            [_detach(fn(*_to(args, device, True))) for args in calls] if not isinstance(fn, torch.nn.Module) else None
        )
    except Exception:  # noqa: BLE001 - no float64 reference, allclose only
        ref["fp64"] = None

    def good() -> bool:
        torch._dynamo.reset()
        compiled = compile_fn(fn, backend="inductor", **kwargs)
        try:
            outs = [_detach(compiled(*_to(args, device, False))) for args in calls]
        except Exception:  # noqa: BLE001 - any failure is "bad" for the bisector
            return False
        return not compare_outputs(ref, {"outputs": outs}, tol)

    found = CompilerBisector.do_bisect(good)
    if found is None:
        return {}
    return {
        "backend": found.backend,
        "subsystem": found.subsystem or "",
        "bisect_number": found.bisect_number,
        "debug_info": str(found.debug_info or "")[:500],
    }


def compared(style: str, payload: dict | None) -> str:
    """What this mode's result rests on, for the verdict to say (and what it could not look at)."""
    seen = ["the script's own checks (its exceptions, assertions and exit status)"] if style == "script" else []
    if payload is None:
        return "; ".join(seen + ["nothing else: the repro stopped with an exception"])
    calls = len(payload.get("outputs") or [])
    seen.append(f"the outputs of {calls} compiled call(s)" if calls else "no compiled call's outputs (none ran)")
    if payload.get("grads") is not None:
        seen.append("gradients of the inputs and parameters")
    if calls:
        seen.append("the inputs' state after each call")
    if payload.get("printed"):
        seen.append(f"{len(payload['printed'])} printed number(s)")
    missing = [] if payload.get("grads") is not None else ["gradients (nothing ran backward)"]
    return "; ".join(seen) + (f". Not compared: {', '.join(missing)}" if missing else "")


def _uncalled_test_fn(code: str, ns: dict) -> bool:
    """True when the script defines test_fn() at top level and never calls it itself (then the harness does)."""
    import ast

    if not callable(ns.get("test_fn")):
        return False
    tree = ast.parse(code)
    if not any(isinstance(n, ast.FunctionDef) and n.name == "test_fn" for n in tree.body):
        return False
    return not any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "test_fn" for n in ast.walk(tree)
    )


def run(spec: dict, res_fd: int, workdir: str) -> None:
    """Run spec["code"] under spec["mode"]; emit the result event; the caller then leaves with os._exit."""
    global _res_fd
    _res_fd = res_fd
    status, phase, exception, message, payload = "passed", "", "", "", None
    try:
        import torch

        _configure(spec["mode"], workdir, spec.get("narrow", False))
        _install_phase_markers()
        recorder = Recorder(spec["mode"], spec.get("overrides", {}))
    except Exception as exc:  # noqa: BLE001 - our bug, not the repro's: say so, never blame the repro
        emit(
            {
                "event": "result",
                "status": "crashed",
                "phase": "setup",
                "exception": qualname(exc),
                "message": "the harness failed before running the repro: " + describe(exc),
            }
        )
        return
    printed = oracle.capture_stdout(spec["code"]) if spec["style"] == "script" and not spec.get("narrow") else None
    filename = os.path.join(workdir, "repro.py")
    try:
        random.seed(0)
        torch.manual_seed(0)
        set_phase("runtime")
        module = types.ModuleType("__main__" if spec["style"] == "script" else "repro")
        module.__file__ = filename
        sys.modules[module.__name__] = module
        code = compile(spec["code"], module.__file__, "exec")
        # The PT2 Repro Agent's convention: the script reads its backend from TORCH_COMPILE_BACKEND and defines
        # test_fn() -> bool (False or an exception: the failure); the eager reference gets "eager".
        os.environ["TORCH_COMPILE_BACKEND"] = BACKENDS.get(spec["mode"], "eager")
        try:
            exec(code, module.__dict__)
        except SystemExit as exc:
            if exc.code not in (None, 0):
                raise RuntimeError(f"the script exited with status {exc.code!r}") from None
        if spec["style"] == "script" and not spec.get("narrow") and _uncalled_test_fn(spec["code"], module.__dict__):
            if module.__dict__["test_fn"]() is False:
                raise AssertionError("test_fn() returned False: the repro's own check failed")
        if spec.get("narrow"):
            torch.manual_seed(0)
            narrowed = _narrow(module.__dict__, spec["device"], recorder.original)
            emit(
                {
                    "event": "result",
                    "status": "passed",
                    "phase": "",
                    "exception": "",
                    "message": "",
                    "traceback": "",
                    "narrowed": narrowed,
                }
            )
            return
        if spec["style"] == "module":
            torch.manual_seed(0)
            payload = _run_module_style(module.__dict__, spec["mode"], spec["device"], recorder)
        else:
            payload = recorder.payload(printed)
    except BaseException as exc:  # noqa: BLE001 - whatever the repro raises is the result
        status, phase = classify(exc)
        exception, message, tail = qualname(exc), describe(exc), traceback_tail(exc)
        payload, blocked = None, oracle.blocker(exc, spec["code"], filename)
    else:
        tail, blocked = "", None
    event = {
        "event": "result",
        "status": status,
        "phase": phase,
        "exception": exception,
        "message": message,
        "traceback": tail,
        "compared": compared(spec["style"], payload),
    }
    if blocked is not None:
        event["blocker"] = blocked
    if payload is not None:
        buffer = io.BytesIO()
        try:
            import torch

            torch.save(payload, buffer)
            if buffer.tell() <= MAX_OUTPUT_BYTES:
                event["payload"] = base64.b64encode(buffer.getvalue()).decode()
            else:
                event["payload_note"] = "outputs too large to compare"
        except Exception as exc:  # noqa: BLE001
            event["payload_note"] = f"outputs not serializable: {qualname(exc)}"
    emit(event)
