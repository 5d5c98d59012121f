"""Compare a mode's outputs, gradients, input mutations and printed numbers with eager's (runs in the fork server and
in a narrowing child; torch, no Django). Gradients use a float64 reference where eager made one, as torch's accuracy
minifier does (debug_utils.same_two_models: same(..., fp64_ref=...) on outputs and gradients)."""

from __future__ import annotations


def compare_outputs(ref: dict, res: dict, tol: float) -> str:
    """Return "" when res matches eager's ref, else what differs.

    Structure, shapes and dtypes are checked first: same() broadcasts, so
    ones(3, 4) would "equal" ones(4).
    """
    import torch
    from torch._dynamo.utils import same
    from torch.utils._pytree import tree_flatten

    ref_outs, res_outs, fp64 = ref["outputs"], res["outputs"], ref.get("fp64")
    if len(ref_outs) != len(res_outs):
        return f"{len(res_outs)} compiled call(s) recorded vs {len(ref_outs)} in eager"
    for i, (expected, actual) in enumerate(zip(ref_outs, res_outs)):
        exp_leaves, exp_spec = tree_flatten(expected)
        act_leaves, act_spec = tree_flatten(actual)
        if exp_spec != act_spec:
            return f"call {i}: output structure differs from eager"
        for j, (a, b) in enumerate(zip(exp_leaves, act_leaves)):
            if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
                if a.shape != b.shape or a.dtype != b.dtype:
                    return f"call {i} output {j}: {tuple(b.shape)} {b.dtype} vs eager {tuple(a.shape)} {a.dtype}"
        ref64 = fp64[i] if fp64 and i < len(fp64) else None
        if not same(
            expected, actual, fp64_ref=ref64, tol=tol, equal_nan=True, exact_dtype=True, log_error=lambda *a: None
        ):
            diffs = [
                (b.double() - a.double()).abs().nan_to_num(nan=float("inf")).max().item()
                for a, b in zip(exp_leaves, act_leaves)
                if isinstance(a, torch.Tensor) and a.numel() and (a.is_floating_point() or a.is_complex())
            ]
            worst = f"; max abs difference {max(diffs):.3g}" if diffs else ""
            basis = "float64 reference" if ref64 is not None else "allclose only, no float64 reference"
            return f"call {i}: differs from eager beyond tol={tol:g} ({basis}){worst}"
    return ""


# In the order the verdict names them: the first that differs is "what differed first".
ASPECTS = ("outputs", "gradients", "mutations", "printed numbers")
PRINT_RTOL, PRINT_ATOL = 1e-3, 1e-4


def compare_all(ref: dict, res: dict, tol: float) -> tuple[str, str]:
    """(aspect, what differs) for the first of ASPECTS where res differs from eager's ref, or ("", "").

    Gradients and mutations are compared where both runs recorded them; printed numbers only with the same
    count (a script printing a different number of values is judged by its outputs and its own checks)."""
    problem = compare_outputs(ref, res, tol)
    if problem:
        return "outputs", f"outputs differ first: {problem}"
    if ref.get("grads") is not None or res.get("grads") is not None:
        problem = _compare_grads(ref, res, tol)
        if problem:
            return "gradients", f"gradients differ (outputs match): {problem}"
    problem = _compare_states(ref.get("mutations"), res.get("mutations"))
    if problem:
        return "mutations", f"an input's state after the call differs (outputs and gradients match): {problem}"
    problem = _compare_printed(ref.get("printed"), res.get("printed"))
    if problem:
        return "printed numbers", f"the printed numbers differ: {problem}"
    return "", ""


def _compare_grads(ref: dict, res: dict, tol: float) -> str:
    import torch
    from torch._dynamo.utils import same

    expected, actual = ref.get("grads"), res.get("grads")
    if expected is None or actual is None:
        return "gradients recorded in one run only (backward ran in one and not the other)"
    flat_e, flat_a = _flat(expected), _flat(actual)
    if len(flat_e) != len(flat_a):
        return f"{len(flat_a)} gradient(s) vs {len(flat_e)} in eager"
    fp64 = _flat(ref.get("fp64_grads") or [])
    for i, (a, b) in enumerate(zip(flat_e, flat_a)):
        if (a is None) != (b is None):
            got, expected = ("no", "a") if b is None else ("a", "no")
            return f"gradient {i}: {got} gradient reached the input, {expected} gradient in eager"
        if a is None:
            continue
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"gradient {i}: {tuple(b.shape)} {b.dtype} vs eager {tuple(a.shape)} {a.dtype}"
        ref64 = fp64[i] if len(fp64) == len(flat_e) and isinstance(fp64[i], torch.Tensor) else None
        if not same(a, b, fp64_ref=ref64, tol=tol, equal_nan=True, exact_dtype=True, log_error=lambda *x: None):
            worst = (b.double() - a.double()).abs().nan_to_num(nan=float("inf")).max().item() if a.numel() else 0.0
            basis = "float64 reference" if ref64 is not None else "allclose only"
            return f"gradient {i}: differs from eager beyond tol={tol:g} ({basis}); max abs difference {worst:.3g}"
    return ""


def _flat(value) -> list:
    out = []
    for item in value if isinstance(value, (list, tuple)) else [value]:
        out += _flat(item) if isinstance(item, (list, tuple)) else [item]
    return out


def _compare_states(expected, actual) -> str:
    """Each call's inputs after it, exactly for integers and booleans, allclose for floats (a lost in-place write
    is no rounding error)."""
    import torch

    if expected is None or actual is None:
        return ""
    for i, (before, after) in enumerate(zip(expected, actual)):
        for j, (a, b) in enumerate(zip(before, after)):
            if a.shape != b.shape or a.dtype != b.dtype:
                return f"call {i} input {j}: {tuple(b.shape)} {b.dtype} vs eager {tuple(a.shape)} {a.dtype}"
            exact = not (a.is_floating_point() or a.is_complex())
            if not (torch.equal(a, b) if exact else torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)):
                return f"call {i} input {j}: its state after the call differs from eager's (a lost or extra mutation)"
    return ""


def _compare_printed(expected, actual) -> str:
    import math

    if not expected or not actual or len(expected) != len(actual):
        return ""
    for i, (a, b) in enumerate(zip(expected, actual)):
        if math.isnan(a) and math.isnan(b):
            continue
        if not math.isclose(a, b, rel_tol=PRINT_RTOL, abs_tol=PRINT_ATOL):
            return f"printed number {i}: {b!r} vs eager {a!r}"
    return ""
