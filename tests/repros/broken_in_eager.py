# The repro itself is wrong: the shapes do not match even without torch.compile.
import torch


def fn(a, b):
    return a @ b


def make_inputs():
    return (torch.randn(3, 4), torch.randn(5, 6))
