# Inductor crashes the process (SIGSEGV) while lowering: contained, a crash -> R11.
import ctypes

import torch
from torch._inductor import lowering

aten = torch.ops.aten


def crash(x):
    ctypes.string_at(0)


lowering.lowerings[aten.sigmoid.default] = crash


def fn(x):
    return torch.sigmoid(x) + 1


def make_inputs():
    return (torch.randn(8),)
