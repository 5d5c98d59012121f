# A custom op whose fake (meta) implementation returns the wrong shape. backend=eager runs the
# real kernel and passes; aot_eager traces the joint graph with fakes and fails (R2.1).
import torch


@torch.library.custom_op("bisect_test::scale", mutates_args=())
def scale(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@scale.register_fake
def _(x):
    return x.new_empty(x.shape[0] + 1, *x.shape[1:])


def _backward(ctx, grad):
    return grad * 2


scale.register_autograd(_backward)


def fn(x):
    return scale(x).sum(0)


def make_inputs():
    return (torch.randn(4, 3, requires_grad=True),)
