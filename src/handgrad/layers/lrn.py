"""``LocalResponseNorm``: PyTorch's nn.LocalResponseNorm on channels-last inputs, each
channel divided by (k + alpha / size * sum of x^2 over its window of ``size``
neighbouring channels) ** beta (kernels in :mod:`handgrad.ops.lrn`)."""

from __future__ import annotations

from .. import ops
from .._checks import positive_int
from .._hyper import number
from . import declarations as twins
from .base import Layer
from .registry import register


def lrn_onnx_form(layer, g, v):
    """The definition in elementary nodes, on channels-last values: x^2 zero-padded on the
    channel axis, the ``size`` shifted slices added, then x / (k + alpha / size * sum) **
    beta. (ONNX's LRN node centres an even window the other way, and onnx's reference
    evaluator runs it on 4-D inputs only, looping its channel index over the batch.)"""
    v = g.channels_last(v)
    rank, channels = v.rank, v.shape[-1]
    before, after = layer.size // 2, (layer.size - 1) // 2
    square = g.op("Mul", [v.name, v.name], "square")
    pads = [0] * (rank - 1) + [before] + [0] * (rank - 1) + [after]
    padded = g.op("Pad", [square, g.ints(pads)], "padded_square")
    taps = [g.op("Slice", [padded, g.ints([t]), g.ints([t + channels]), g.ints([-1])], "tap")
            for t in range(layer.size)]
    total = taps[0] if len(taps) == 1 else g.op("Sum", taps, "window_sum")
    scaled = g.op("Mul", [total, g.const(layer.alpha / layer.size, "alpha_over_size")],
                  "scaled")
    base = g.op("Add", [scaled, g.const(layer.k, "k")], "base")
    denominator = g.op("Pow", [base, g.const(layer.beta, "beta")], "denominator")
    return g.value(g.op("Div", [v.name, denominator], "lrn"), v.shape, False)


@register
class LocalResponseNorm(Layer):
    """x (N, ..., C) -> same shape: y = x / (k + alpha / size * window sum of x^2) ** beta,
    the window ``size`` channels around each (PyTorch's nn.LocalResponseNorm, channels
    last). Inputs have at least one axis between the batch and the channels."""

    torch_twin = twins.TorchTwin("LocalResponseNorm")
    onnx_form = lrn_onnx_form
    receptive_field = "pointwise"

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1.0, **kwargs):
        super().__init__(**kwargs)
        owner = type(self).__name__
        self.size = positive_int(owner, "size", size)
        self.alpha = number(owner, "alpha", alpha)
        self.beta = number(owner, "beta", beta)
        self.k = number(owner, "k", k)

    def get_config(self):
        return {**super().get_config(), "size": self.size, "alpha": self.alpha,
                "beta": self.beta, "k": self.k}

    def _forward(self, x, training):
        return ops.local_response_norm(x, self.size, self.alpha, self.beta, self.k)

    def _backward(self, dy, cache):
        return ops.local_response_norm_backward(dy, cache), {}
