# A wrong decomposition in Inductor's table: aot_eager_decomp_partition and inductor diverge
# from eager, aot_eager (no decomposition table) does not (R2.5, R4.1).
import torch
from torch._inductor import decomposition

aten = torch.ops.aten


def wrong_logaddexp(a, b):
    return torch.maximum(a, b)  # drops log1p(exp(-|a - b|))


decomposition.decompositions[aten.logaddexp.default] = wrong_logaddexp
decomposition.fast_random_decomps.cache_clear()


def fn(x, y):
    return torch.logaddexp(x, y)


def make_inputs():
    return (torch.randn(16), torch.randn(16))
