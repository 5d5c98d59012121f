# The PT2 Repro Agent's convention: test_fn() returns a bool, the backend comes from TORCH_COMPILE_BACKEND.
# The check fails only when the backend is inductor (no compile is needed to say so).
import os

import torch


def test_fn() -> bool:
    backend = os.environ.get("TORCH_COMPILE_BACKEND", "inductor")
    x = torch.ones(3)
    return backend != "inductor" and bool((x + 1).sum() == 6)
