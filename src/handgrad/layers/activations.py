"""Activation layers: each wraps one op pair of :mod:`handgrad.ops`."""

from __future__ import annotations

import typing

import numpy as np

from .. import ops
from .._checks import is_int
from .base import Layer
from .registry import register


class Activation(Layer):
    """y = f(x) elementwise (softmax: along ``axis``); no parameters.

    Subclasses name their kernels (``forward_op``, ``backward_op``) and hyper-parameters;
    values are validated in ``__init__`` by calling the op once on a tiny array.
    """

    forward_op = staticmethod(ops.identity)
    backward_op = staticmethod(ops.identity_backward)
    gradgrad_op = None  # the second-order kernel (``ops.<name>_gradgrad``), if any
    defaults: typing.ClassVar[dict] = {}
    receptive_field = "pointwise"

    def onnx_form(self, g, v):
        """ONNX: the export's conversion of the kernel (``g.activation``)."""
        return g.activation(self, v)

    def __init__(self, *, name=None, trainable=True, dtype=None, seed=None, **hyper):
        super().__init__(name=name, trainable=trainable, dtype=dtype, seed=seed)
        unknown = set(hyper) - set(self.defaults)
        if unknown:
            raise TypeError(f"{type(self).__name__}: unexpected argument(s) {sorted(unknown)}; "
                            f"valid: {sorted(self.defaults) or 'none'}")
        self.hyper = {**self.defaults, **hyper}
        checked = {k: v for k, v in self.hyper.items() if k != "axis"}
        self.forward_op(np.zeros((1, 1)), **checked)
        if "axis" in self.hyper and not is_int(self.hyper["axis"]):
            raise TypeError(f"{type(self).__name__}: 'axis' must be an int; received "
                            f"{self.hyper['axis']!r}")

    def get_config(self):
        return {**super().get_config(), **self.hyper}

    def _forward(self, x, training):
        return self.forward_op(x, **self.hyper)

    def _backward(self, dy, cache):
        return self.backward_op(dy, cache), {}

    def supports_double_backward(self):
        return self.gradgrad_op is not None

    def _double_backward(self, q, dy, cache):
        """(q f'(x), q dy f''(x), {}) from the op's ``*_gradgrad`` kernel."""
        if self.gradgrad_op is None:
            return super()._double_backward(q, dy, cache)
        return (*self.gradgrad_op(q, dy, cache), {})


def _activation(class_name, forward_op, backward_op, doc, gradgrad_op=None, **defaults):
    """A registered :class:`Activation` subclass for one op pair (and its second-order
    kernel, where it has one)."""
    namespace = {"forward_op": staticmethod(forward_op),
                 "backward_op": staticmethod(backward_op), "defaults": defaults,
                 "gradgrad_op": None if gradgrad_op is None else staticmethod(gradgrad_op),
                 "__doc__": doc, "__module__": __name__}
    return register(type(class_name, (Activation,), namespace))


Identity = _activation("Identity", ops.identity, ops.identity_backward,
                  "y = x.",
                  gradgrad_op=ops.identity_gradgrad)
ReLU = _activation("ReLU", ops.relu, ops.relu_backward,
                  "y = max(x, 0).",
                  gradgrad_op=ops.relu_gradgrad)
LeakyReLU = _activation("LeakyReLU", ops.leaky_relu, ops.leaky_relu_backward,
                  "y = x if x > 0 else negative_slope * x.", negative_slope=0.01,
                  gradgrad_op=ops.leaky_relu_gradgrad)
ELU = _activation("ELU", ops.elu, ops.elu_backward,
                  "y = x if x > 0 else alpha * (exp(x) - 1).", alpha=1.0,
                  gradgrad_op=ops.elu_gradgrad)
SELU = _activation("SELU", ops.selu, ops.selu_backward,
                  "y = scale * elu(x, alpha) with SELU's fixed constants.",
                  gradgrad_op=ops.selu_gradgrad)
GELU = _activation("GELU", ops.gelu, ops.gelu_backward,
                  "y = x * Phi(x); approximate='tanh' for the tanh form.", approximate="none",
                  gradgrad_op=ops.gelu_gradgrad)
Tanh = _activation("Tanh", ops.tanh, ops.tanh_backward,
                  "y = tanh(x).",
                  gradgrad_op=ops.tanh_gradgrad)
Sigmoid = _activation("Sigmoid", ops.sigmoid, ops.sigmoid_backward,
                  "y = 1 / (1 + exp(-x)).",
                  gradgrad_op=ops.sigmoid_gradgrad)
Softplus = _activation("Softplus", ops.softplus, ops.softplus_backward,
                  "y = log(1 + exp(beta x)) / beta.", beta=1.0, threshold=20.0,
                  gradgrad_op=ops.softplus_gradgrad)
HardSigmoid = _activation("HardSigmoid", ops.hard_sigmoid, ops.hard_sigmoid_backward,
                  "y = relu6(x + 3) / 6.",
                  gradgrad_op=ops.hard_sigmoid_gradgrad)
Softmax = _activation("Softmax", ops.softmax, ops.softmax_backward,
                  "y = exp(x) / sum(exp(x)) along axis.", axis=-1)
LogSoftmax = _activation("LogSoftmax", ops.log_softmax, ops.log_softmax_backward,
                  "y = x - logsumexp(x) along axis.", axis=-1)
