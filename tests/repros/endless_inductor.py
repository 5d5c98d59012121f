# Inductor never finishes compiling (and the repro leaves a sleeping grandchild behind):
# the wall-clock timeout kills the whole sandbox.
import subprocess

import torch
from torch._inductor import lowering

aten = torch.ops.aten


def spin(x):
    subprocess.Popen(["sleep", "1000"])
    while True:
        pass


lowering.lowerings[aten.sigmoid.default] = spin


def fn(x):
    return torch.sigmoid(x) + 1


def make_inputs():
    return (torch.randn(8),)
