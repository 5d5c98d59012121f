# A graph break made fatal by fullgraph=True: fails while Dynamo traces (R2.3, R1.2).
import torch


def fn(x):
    y = x.sin()
    torch._dynamo.graph_break()
    return y.cos()


def make_inputs():
    return (torch.randn(8),)


COMPILE_KWARGS = {"fullgraph": True}
