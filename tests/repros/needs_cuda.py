# A correct repro, as reporters post them: it asks for the GPU itself. On a machine
# without CUDA it cannot even run in eager, which says nothing about the compiler.
import torch


def fn(x):
    return torch.sin(x) + 1


x = torch.randn(8, device="cuda")
opt = torch.compile(fn)
print(opt(x))
