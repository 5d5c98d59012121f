# math.factorial on a size: fine with static shapes, fails under dynamic=True with
# fullgraph=True (a SymInt reaches a Python builtin). dynamic=False passes: R1.1.
import math

import torch


def fn(x):
    return x * math.factorial(min(x.shape[0], 5))


def make_inputs():
    return (torch.randn(6),)


COMPILE_KWARGS = {"dynamic": True, "fullgraph": True}
