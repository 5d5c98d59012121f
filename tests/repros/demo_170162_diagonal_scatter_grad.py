# The demo's #170162 as posted (rubric_app/demo/demo_issues.json): passes in plain python with torch 2.13.
import torch

x = torch.randn(8, 8, requires_grad=True)
src = torch.randn(8, requires_grad=True)


def fn(x, src):
    return torch.diagonal_scatter(x, src, 0).sum()


x1 = x.clone().detach().requires_grad_(True)
fn(x1, src).backward()
print("eager x.grad:", x1.grad)  # 1 everywhere except the diagonal

x2 = x.clone().detach().requires_grad_(True)
torch.compile(fn)(x2, src).backward()
print("compiled x.grad:", x2.grad)  # all zeros
assert torch.allclose(x1.grad, x2.grad), "compiled x.grad differs from eager"
