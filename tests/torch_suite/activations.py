"""Adapters of the activation rows: elementwise functions (any shape, no channel axis),
the softmax family and ``glu`` (``dim`` -> ``axis``), ``prelu`` (channels on axis 1)."""

from __future__ import annotations

import numpy as np
import torch

from .helpers import Unsupported, kernel, op_row, value
from tolerances import activation_bounds

#: torch row -> handgrad op, where the names differ
RENAMED = {"logsigmoid": "log_sigmoid", "hardsigmoid": "hard_sigmoid"}
ELEMENTWISE = ("celu", "elu", "gelu", "hardshrink", "hardsigmoid", "hardswish", "hardtanh",
               "leaky_relu", "logsigmoid", "mish", "relu", "relu6", "selu", "silu",
               "softplus", "softshrink", "softsign", "tanhshrink", "threshold")


def _hyper(name, sample):
    """torch's positional and keyword hyper-parameters as handgrad's keywords."""
    from handgrad import ops

    names = [k for k in ops.DECLARED[name].hyper]
    kwargs = {k: v for k, v in sample.kwargs.items() if k != "inplace"}
    for key, v in zip(names, sample.args):
        kwargs[key] = v
    unknown = set(kwargs) - set(names)
    if unknown:
        raise Unsupported(f"argument {sorted(unknown)[0]}")
    return kwargs


def _hardsigmoid(x, inplace=False):
    """torch's hardsigmoid backward multiplies by the float32 constant 1/6 in float64 too
    (off by 3e-8 relative): the reference is its exact formula, relu6(x + 3) / 6."""
    return torch.nn.functional.relu6(x + 3.0) / 6.0


#: rows whose torch kernel is inexact, with the exact torch formula used instead
EXACT = {"hardsigmoid": _hardsigmoid}


def elementwise(row):
    name = RENAMED.get(row, row)

    def run(sample, x):
        y, back = kernel(name, x, **_hyper(name, sample))
        return y, lambda dy: list(back(dy))

    def bounds(sample, arrays, dy):
        """The activation table's bounds (``tolerances.activation_bounds``)."""
        forward, backward = activation_bounds(name, arrays[0], dy, **_hyper(name, sample))
        return {"y": forward, "grad 0": backward}

    return op_row(run, EXACT.get(row), bounds=bounds)


def along(name):
    """softmax, softmin, log_softmax, glu: torch's ``dim`` is handgrad's ``axis``."""

    def run(sample, x):
        kwargs = dict(sample.kwargs)
        if kwargs.pop("dtype", None) is not None:
            raise Unsupported("dtype argument")
        dim = sample.args[0] if sample.args else kwargs.pop("dim", -1 if name == "glu" else None)
        if dim is None:
            raise Unsupported("implicit dim")
        if x.ndim == 0:
            raise Unsupported("0-d input")
        y, back = kernel(name, x, axis=dim)
        return y, lambda dy: list(back(dy))

    return op_row(run)


def prelu(sample, x, *rest):
    """torch's weight: one slope (any shape of one entry) or one per channel (axis 1 of
    a >= 2-d input); a weight given without a gradient is a constant."""
    w = rest[0] if rest else value(sample.kwargs.get("weight", sample.args[0] if sample.args
                                                     else None), x.dtype)
    shape, x1 = x.shape, (x.reshape(1) if x.ndim == 0 else x)
    channels = x1.ndim >= 2 and w.size > 1
    xl = np.moveaxis(x1, 1, -1) if channels else x1
    y, back = kernel("prelu", xl, w.reshape(-1))
    y = (np.moveaxis(y, -1, 1) if channels else y).reshape(shape)

    def backward(dy):
        dy = dy.reshape(x1.shape)
        dx, dw = back(np.moveaxis(dy, 1, -1) if channels else dy)
        dx = (np.moveaxis(dx, -1, 1) if channels else dx).reshape(shape)
        return [dx, dw.reshape(w.shape)] if rest else [dx]

    return y, backward


OPS = {row: elementwise(row) for row in ELEMENTWISE}
OPS.update({row: along(row) for row in ("softmin", "softmin.with_dtype", "glu")})
#: not op_db rows: the functional forms the module rows (Softmax, LogSoftmax, Sigmoid,
#: Tanh) go through
OPS.update({row: along(row) for row in ("softmax", "log_softmax")})
OPS.update({row: elementwise(row) for row in ("sigmoid", "tanh")})
OPS["prelu"] = op_row(prelu)


def rrelu(sample, x):
    """Not training: the fixed slope (lower + upper) / 2; training draws random slopes."""
    v = dict(zip(("lower", "upper", "training"), sample.args), **sample.kwargs)
    if v.get("training", False):
        raise Unsupported("random slopes")
    y, back = kernel("rrelu", x, lower=v.get("lower", 1 / 8), upper=v.get("upper", 1 / 3))
    return y, lambda dy: list(back(dy))


OPS["rrelu"] = op_row(rrelu)
