"""What a mode records besides outputs, inside the sandboxed child (torch, no Django): gradients, the inputs' state
after each call, the numbers a script prints, and why a repro could not run at all.

A report of wrong gradients, a dropped `detach_()` or a lost input mutation (RUBRIC.md R3) shows nothing in the
compiled call's outputs: each mode must record what the repro itself looks at, so the fork server can compare it
with eager's (compare.py) and the verdict can say which of outputs / gradients / mutations differed first.
"""

from __future__ import annotations

import io
import re
import sys
import traceback
from typing import Any

# A script that prints timings, speeds or memory would differ on every run: those lines are no result.
NOISY_LINE = re.compile(
    r"\b(?:time|times|ms|sec|secs|seconds|speed|speedup|it/s|elapsed|latency|memory|MB|GB|id)\b", re.I
)
# A number standing alone: not the digits of an address (0x7f3a...), a name (conv2d) or a version (2.13.0).
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w.])|\b(?:nan|inf)\b")
# A script that times or profiles something prints numbers that change from run to run: none of them is compared.
TIMING = re.compile(r"\b(?:time|timeit|perf_counter|monotonic|datetime|benchmark|profiler?|Timer)\b")
MAX_PRINTED = 2000  # numbers kept per mode
MAX_CAPTURED = 256 * 1024  # characters of stdout kept to read them from


def tensors(value: Any) -> list:
    """The tensor leaves of value (args, kwargs, outputs), in pytree order."""
    import torch
    from torch.utils._pytree import tree_leaves

    return [x for x in tree_leaves(value) if isinstance(x, torch.Tensor)]


def state(value: Any) -> list:
    """Detached CPU copies of the tensors of value as they are now: the inputs' state after a call."""
    return [x.detach().to("cpu").clone() for x in tensors(value)]


def gradients(inputs: list, modules: list) -> list:
    """The .grad of every leaf input that requires grad, then of each module's parameters (None where none
    reached it): what backward produced, in a fixed order."""
    grads = [x.grad for x in inputs if x.is_leaf and x.requires_grad]
    for module in modules:
        grads += [p.grad for p in module.parameters()]
    return [None if g is None else g.detach().to("cpu").clone() for g in grads]


def backward(outputs: Any) -> bool:
    """Backprop the sum of the floating outputs that require grad (torch's run_fwd_maybe_bwd does the same);
    False when nothing can."""
    import torch

    parts = [x.sum() for x in tensors(outputs) if x.requires_grad and (x.is_floating_point() or x.is_complex())]
    if not parts:
        return False
    torch.autograd.backward(torch.stack([p.real if p.is_complex() else p for p in parts]).sum())
    return True


class PrintedNumbers(io.TextIOBase):
    """stdout as the script sees it, also kept (capped) so the numbers it prints can be compared across modes."""

    def __init__(self, target):
        self.target, self.kept = target, []
        self.size = 0

    def write(self, text: str) -> int:
        if self.size < MAX_CAPTURED:
            self.kept.append(text[: MAX_CAPTURED - self.size])
            self.size += len(self.kept[-1])
        return self.target.write(text)

    def flush(self) -> None:
        self.target.flush()

    def numbers(self) -> list[float]:
        found = []
        for line in "".join(self.kept).splitlines():
            if not NOISY_LINE.search(line):
                found += [float(n) for n in NUMBER.findall(line)]
        return found[:MAX_PRINTED]


def capture_stdout(code: str) -> PrintedNumbers | None:
    """Keep what the script prints, unless it times something (TIMING): then its printed numbers say nothing."""
    if TIMING.search(code):
        return None
    sys.stdout = PrintedNumbers(sys.stdout)
    return sys.stdout


def blocker(exc: BaseException, code: str, filename: str) -> dict | None:
    """Why a repro could not run at all, where the exception says so, else None:
    {"kind": "missing_module", "name": the module it imports} for an import this interpreter cannot satisfy, or
    {"kind": "not_runnable", "name": NameError/SyntaxError..., "line", "text"} for a snippet that is not a
    whole program (an undefined name at the repro's own top level, a syntax error). Only the eager run's blocker
    counts (verdict.py): a compiled mode's NameError is the compiler's."""
    if isinstance(exc, ModuleNotFoundError) and exc.name:
        return {"kind": "missing_module", "name": exc.name[:200], "line": 0, "text": str(exc)[:300]}
    if isinstance(exc, SyntaxError):
        line = exc.lineno or 0
        return {"kind": "not_runnable", "name": type(exc).__name__, "line": line, "text": _line(code, line, exc.text)}
    if isinstance(exc, NameError) and not isinstance(exc, UnboundLocalError):
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
        if frames:
            line = frames[-1].lineno or 0
            return {
                "kind": "not_runnable",
                "name": f"NameError: {exc}"[:200],
                "line": line,
                "text": _line(code, line, frames[-1].line),
            }
    return None


def _line(code: str, number: int, fallback: str | None) -> str:
    lines = code.splitlines()
    text = lines[number - 1] if 0 < number <= len(lines) else (fallback or "")
    return text.strip()[:300]
