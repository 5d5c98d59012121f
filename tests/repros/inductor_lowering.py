# Inductor's lowering of sigmoid replaced by a wrong one: only inductor diverges (R2.2, R11).
import torch
from torch._inductor import lowering

aten = torch.ops.aten
_sigmoid = lowering.lowerings[aten.sigmoid.default]
_neg = lowering.lowerings[aten.neg.default]
lowering.lowerings[aten.sigmoid.default] = lambda x: _sigmoid(_neg(x))


def fn(x):
    return torch.sigmoid(x) * 2


def make_inputs():
    return (torch.randn(32),)
