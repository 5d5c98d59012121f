"""Compare a mode's outputs with eager's (runs in the fork server and in a narrowing child; torch, no Django)."""

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
