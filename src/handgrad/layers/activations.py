"""Activation layers: each wraps one op pair of :mod:`handgrad.ops`."""

from __future__ import annotations

import typing

import numpy as np

from .. import ops
from .._checks import is_int
from .base import Layer


class Activation(Layer):
    """y = f(x) elementwise (softmax: along ``axis``); no parameters.

    Subclasses name the op and its hyper-parameters; values are validated in
    ``__init__`` by calling the op once on a tiny array.
    """

    op_name = "identity"
    defaults: typing.ClassVar[dict] = {}

    def __init__(self, *, name=None, **hyper):
        super().__init__(name=name)
        unknown = set(hyper) - set(self.defaults)
        if unknown:
            raise TypeError(f"{type(self).__name__}: unexpected argument(s) {sorted(unknown)}; "
                            f"valid: {sorted(self.defaults) or 'none'}")
        self.hyper = {**self.defaults, **hyper}
        checked = {k: v for k, v in self.hyper.items() if k != "axis"}
        getattr(ops, self.op_name)(np.zeros((1, 1)), **checked)
        if "axis" in self.hyper and not is_int(self.hyper["axis"]):
            raise TypeError(f"{type(self).__name__}: 'axis' must be an int; received "
                            f"{self.hyper['axis']!r}")

    def get_config(self):
        return {"name": self.name, **self.hyper}

    def _forward(self, x, training):
        return getattr(ops, self.op_name)(x, **self.hyper)

    def _backward(self, dy, cache):
        return getattr(ops, self.op_name + "_backward")(dy, cache), {}


def _activation(class_name, op_name, doc, **defaults):
    def __init__(self, *, name=None, **hyper):
        Activation.__init__(self, name=name, **hyper)

    namespace = {"op_name": op_name, "defaults": defaults, "__doc__": doc,
                 "__init__": __init__, "__module__": __name__}
    return type(class_name, (Activation,), namespace)


Identity = _activation("Identity", "identity", "y = x.")
ReLU = _activation("ReLU", "relu", "y = max(x, 0).")
LeakyReLU = _activation("LeakyReLU", "leaky_relu", "y = x if x > 0 else negative_slope * x.",
                        negative_slope=0.01)
ELU = _activation("ELU", "elu", "y = x if x > 0 else alpha * (exp(x) - 1).", alpha=1.0)
SELU = _activation("SELU", "selu", "y = scale * elu(x, alpha) with SELU's fixed constants.")
GELU = _activation("GELU", "gelu", "y = x * Phi(x); approximate='tanh' for the tanh form.",
                   approximate="none")
Tanh = _activation("Tanh", "tanh", "y = tanh(x).")
Sigmoid = _activation("Sigmoid", "sigmoid", "y = 1 / (1 + exp(-x)).")
Softplus = _activation("Softplus", "softplus", "y = log(1 + exp(beta x)) / beta.",
                       beta=1.0, threshold=20.0)
HardSigmoid = _activation("HardSigmoid", "hard_sigmoid", "y = relu6(x + 3) / 6.")
Softmax = _activation("Softmax", "softmax", "y = exp(x) / sum(exp(x)) along axis.", axis=-1)
LogSoftmax = _activation("LogSoftmax", "log_softmax", "y = x - logsumexp(x) along axis.",
                         axis=-1)
