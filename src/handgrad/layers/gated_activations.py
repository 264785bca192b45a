"""``PReLU`` (a learned negative slope, one or one per channel), ``RReLU`` (a random
negative slope in training) and ``GLU`` (a gate on half of the channels): the layers of
:mod:`handgrad.ops.gated_activations`."""

from __future__ import annotations

import numpy as np

from .. import ops
from .._checks import is_int, positive_int
from .._device import like
from .._hyper import number
from . import declarations as twins
from .base import Layer
from .registry import register


def prelu_params(layer, layout):
    """torch's PReLU weight (num_parameters,) is handgrad's ``weight``, one per feature."""
    return [twins.TorchParam("weight", ("weight",), features=True)]


@register
class PReLU(Layer):
    """y = x (x > 0), else weight * x: x (N, ..., C) -> same shape (PyTorch's ``nn.PReLU``,
    channels last). ``weight`` (num_parameters,) starts at ``init``; ``num_parameters``
    is 1 (one slope) or C (one per channel, the last axis)."""

    torch_twin = twins.TorchTwin("PReLU", prelu_params)
    receptive_field = "pointwise"

    def __init__(self, num_parameters=1, init=0.25, **kwargs):
        super().__init__(**kwargs)
        owner = type(self).__name__
        self.num_parameters = positive_int(owner, "num_parameters", num_parameters)
        self.init = number(owner, "init", init)

    def get_config(self):
        return {**super().get_config(), "num_parameters": self.num_parameters,
                "init": self.init}

    def _build(self, input_shape, rng):
        channels = input_shape[-1] if input_shape else 1
        if self.num_parameters not in (1, channels):
            raise ValueError(f"{self.label}: num_parameters must be 1 or the number of "
                             f"channels (the last axis, {channels}); received "
                             f"{self.num_parameters}")
        self.add_parameter("weight", (self.num_parameters,),
                           lambda shape, dtype, rng: np.full(shape, self.init, dtype), rng)

    def _forward(self, x, training):
        return ops.prelu(x, self.parameters["weight"])

    def _backward(self, dy, cache):
        dx, dweight = ops.prelu_backward(dy, cache)
        return dx, {"weight": dweight}

    def onnx_form(self, g, v):
        """ONNX PRelu, the slope broadcast along the channel axis of ``v``'s layout."""
        weight = self.parameters["weight"]
        if v.first and weight.size > 1:
            weight = weight.reshape(-1, *[1] * (v.rank - 2))
        y = g.op("PRelu", [v.name, g.const(weight, "slope")], "prelu")
        return g.value(y, v.shape, v.first)


@register
class RReLU(Layer):
    """y = x (x > 0), else r * x, any shape (PyTorch's ``nn.RReLU``): in training r is
    drawn uniform in [lower, upper) for each entry from the layer's generator; in
    evaluation r = (lower + upper) / 2."""

    receptive_field = "pointwise"
    draws_random = True

    def __init__(self, lower=0.125, upper=1.0 / 3.0, **kwargs):
        super().__init__(**kwargs)
        self.lower, self.upper = number("RReLU", "lower", lower), number("RReLU", "upper", upper)
        ops.rrelu(np.zeros(1), None, self.lower, self.upper)  # checks lower <= upper

    def get_config(self):
        return {**super().get_config(), "lower": self.lower, "upper": self.upper}

    def _forward(self, x, training):
        noise = like(self.rng.uniform(self.lower, self.upper, x.shape).astype(x.dtype), x) \
            if training else None
        return ops.rrelu(x, noise, self.lower, self.upper, training)

    def _backward(self, dy, cache):
        return ops.rrelu_backward(dy, cache), {}

    def onnx_form(self, g, v):
        """Inference: LeakyRelu with the mean slope (lower + upper) / 2."""
        y = g.op("LeakyRelu", [v.name], "rrelu", alpha=(self.lower + self.upper) / 2.0)
        return g.value(y, v.shape, v.first)


@register
class GLU(Layer):
    """y = a * sigmoid(b), a and b the halves of x along ``axis`` (default -1, the
    channels): (N, ..., 2 C) -> (N, ..., C) (PyTorch's ``nn.GLU``, channels last)."""

    receptive_field = "pointwise"

    def __init__(self, axis=-1, **kwargs):
        super().__init__(**kwargs)
        if not is_int(axis):
            raise TypeError(f"GLU: 'axis' must be an int; received {axis!r}")
        if axis == 0:
            raise ValueError("GLU: 'axis' must not be 0, the batch axis")
        self.axis = int(axis)

    def get_config(self):
        return {**super().get_config(), "axis": self.axis}

    def _forward(self, x, training):
        return ops.glu(x, self.axis)

    def _backward(self, dy, cache):
        return ops.glu_backward(dy, cache), {}

    def onnx_form(self, g, v):
        """Split in halves along the axis (channels-last data), then a * Sigmoid(b)."""
        v = g.channels_last(v)
        a, b = g.op("Split", [v.name], "half", outputs=2, axis=self.axis % v.rank)
        y = g.op("Mul", [a, g.op("Sigmoid", [b], "gate")], "glu")
        return g.value(y, tuple(self.output_shape(v.shape)), False)
