# A script as users post it: it calls torch.compile itself with backend="inductor" and a mode.
# Inductor's own test knob makes its C++ relu wrong; every other backend is fine.
import torch
import torch._inductor.config

torch._inductor.config.cpp.inject_relu_bug_TESTING_ONLY = "accuracy"


def f(x):
    return torch.relu(x) * 3


compiled = torch.compile(f, backend="inductor", mode="max-autotune-no-cudagraphs")
x = torch.randn(64)
print(compiled(x).sum())
