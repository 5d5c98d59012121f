# Inductor's C++ (CPU) codegen made wrong by its own test knob; Triton (CUDA) is untouched.
# On cpu: inductor diverges; re-run on cuda it passes -> oncall: cpu inductor (R2.4).
import torch
import torch._inductor.config

torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY = "accuracy"


def fn(x):
    return torch.relu(x) * 3


def make_inputs():
    return (torch.randn(64),)
