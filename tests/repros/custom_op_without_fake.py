# A custom op registered without a fake (meta) implementation: plain eager runs its kernel, but Dynamo
# traces with fake tensors and cannot run it. The first failing mode is backend=eager (Dynamo's tracing),
# yet the fault is the op's registration, which pt2-dispatcher owns (R5), not Dynamo (R2.3).
import torch


@torch.library.custom_op("bisect_test::no_fake", mutates_args=())
def no_fake(x: torch.Tensor) -> torch.Tensor:
    return x.clone() * 3


def fn(x):
    return no_fake(x) + 1


def make_inputs():
    return (torch.randn(4, 3),)
