"""Dense, shape and dropout layers."""

from __future__ import annotations

import math

from .. import ops
from .._checks import describe, is_int, positive_int, upstream_grad
from .._hyper import number
from . import declarations as twins
from . import onnx_forms
from .base import Layer
from .registry import register
from .spelling import torch_spelling
from .weighted import WeightedLayer


@register
class Dense(WeightedLayer):
    """Fully connected layer on (..., F_in) -> (..., out_features); W (F_in, out_features);
    y = activation(x W + b) with ``activation`` a Keras name or None (see :mod:`.fused`).

    F_in comes from the data: PyTorch's ``Linear(16, 32)`` is ``Dense(32)`` (refused with
    that message)."""

    torch_twin = twins.TorchTwin("Linear", twins.dense_params, twins.RESET)
    onnx_form = onnx_forms.dense
    receptive_field = "pointwise"

    def __init__(self, out_features, bias=True, **kwargs):
        if is_int(bias):
            raise TypeError(torch_spelling(
                type(self).__name__, f"received bias={bias!r} (the second argument)",
                f"Linear({out_features!r}, {bias!r})", f"Dense({bias!r})"))
        super().__init__(bias=bias, **kwargs)
        self.out_features = positive_int(type(self).__name__, "out_features", out_features)

    def get_config(self):
        return {**super().get_config(), "out_features": self.out_features}

    def _build(self, input_shape, rng):
        if len(input_shape) < 1:
            raise ValueError(f"{self.label}: expects inputs (N, ..., F_in); received per-example "
                             f"shape {tuple(input_shape)}")
        self.build_weights((input_shape[-1], self.out_features), self.out_features, rng)

    def export_weight(self):
        """The weight the exports write (W; a sparse subclass masks it)."""
        return self.parameters["W"]

    def _forward(self, x, training):
        return self._activate(*ops.linear(x, self.parameters["W"], self.bias_array))

    def _backward(self, dy, cache, input_grad=True):
        dx, dw, db = ops.linear_backward(*self._deactivate(dy, cache), input_grad=input_grad)
        return dx, self.weight_grads(dw, db)

    def _double_backward(self, q, dy, cache):
        """dx = dy W^T: dP/d dy = q W, dP/dW = q^T dy; no x or b term."""
        d_dy, dw = ops.linear_gradgrad(q, dy, self._affine_cache(cache))
        return d_dy, None, {"W": dw}


class ReshapeLayer(Layer):
    """The shape layers: y is x reshaped per example (N, *in_shape) -> (N, *out_shape);
    backward reshapes dy back."""

    receptive_field = "whole"

    def _reshape(self, x, shape):
        """(y, cache): x reshaped to (N, *shape)."""
        y = x.reshape(x.shape[0], *shape)
        return y, (x.shape, y.shape, x.dtype)

    def _backward(self, dy, cache):
        """dx = dy reshaped to the forward input's shape, after checking dy."""
        x_shape, y_shape, dtype = cache
        return upstream_grad(self.label, dy, y_shape, dtype).reshape(x_shape), {}

    def _double_backward(self, q, dy, cache):
        """dx = dy reshaped, so dP/d dy = q reshaped to the output's shape; no x term."""
        x_shape, y_shape, dtype = cache
        if getattr(q, "shape", None) != tuple(x_shape) or q.dtype != dtype:
            raise ValueError(f"{self.label}: 'q' must be a {dtype} array of the forward input's "
                             f"shape {tuple(x_shape)}; received {describe(q)}")
        return q.reshape(y_shape), None, {}


@register
class Flatten(ReshapeLayer):
    """(N, d1, d2, ...) -> (N, d1 * d2 * ...); backward reshapes dy back."""

    torch_twin = twins.TorchTwin("Flatten", layout=twins.FLATTEN)
    onnx_form = onnx_forms.flatten

    def __init__(self, *, name=None):
        super().__init__(name=name)

    def get_config(self):
        return {"name": self.name}

    def _forward(self, x, training):
        return self._reshape(x, (math.prod(x.shape[1:]),))


@register
class Reshape(ReshapeLayer):
    """(N, *in_shape) -> (N, *shape) (one entry may be -1); backward reshapes back."""

    torch_twin = twins.TorchTwin("Unflatten", layout=twins.RESET)
    onnx_form = onnx_forms.reshape

    def __init__(self, shape, *, name=None):
        super().__init__(name=name)
        owner = type(self).__name__
        shape = (shape,) if is_int(shape) else shape
        if not isinstance(shape, (tuple, list)) or not all(is_int(d) for d in shape):
            raise TypeError(f"{owner}: 'shape' must be a tuple of ints (per example, without "
                            f"the batch axis); received {describe(shape)}")
        if sum(d == -1 for d in shape) > 1 or any(d < -1 or d == 0 for d in shape):
            raise ValueError(f"{owner}: 'shape' must hold positive ints and at most one -1; "
                             f"received {tuple(shape)}")
        self.shape = tuple(int(d) for d in shape)

    def get_config(self):
        return {"name": self.name, "shape": list(self.shape)}

    def _forward(self, x, training):
        size = math.prod(x.shape[1:])
        known = math.prod(d for d in self.shape if d != -1)
        if (-1 in self.shape and size % known) or (-1 not in self.shape and known != size):
            raise ValueError(f"{self.label}: cannot reshape per-example shape "
                             f"{tuple(x.shape[1:])} ({size} values) to {self.shape}")
        return self._reshape(x, self.shape)


@register
class Dropout(Layer):
    """Inverted dropout: in training, zero each value with probability ``rate`` and scale
    the rest by 1 / (1 - rate); identity in evaluation. Random numbers come from the
    layer's Generator ``rng``: from ``seed``, or without one from the model's seed and the
    layer's place in it (see ``Layer.draws_random``).

    In data-parallel training :mod:`handgrad.distributed` registers a ``communicator``
    (``needs_communicator``, see :mod:`.hooks`), whose ``rows`` is ``(start, total)``:
    this process holds rows ``start:start + N`` of a global batch of ``total``; the mask
    is drawn for the global batch (``ops.dropout``'s ``rows``), so it does not depend on
    the number of processes."""

    onnx_form = onnx_forms.identity  # inference
    receptive_field = "pointwise"

    needs_communicator = True
    draws_random = True
    forward_op = staticmethod(ops.dropout)
    backward_op = staticmethod(ops.dropout_backward)
    op_options: dict = {}  # noqa: RUF012  (read only) keywords of forward_op beside the rate (a subclass's settings)

    def __init__(self, rate, *, seed=None, name=None):
        super().__init__(name=name, seed=seed)
        self.rate = number(type(self).__name__, "rate", rate, low=0.0, high=1.0,
                           high_open=True)

    def get_config(self):
        return {"name": self.name, "rate": self.rate, "seed": self.seed}

    def _forward(self, x, training):
        rows = None if self.communicator is None or not training else self.communicator.rows
        return type(self).forward_op(x, self.rate, self.rng, training=training, rows=rows,
                                     **self.op_options)

    def _backward(self, dy, cache):
        return type(self).backward_op(dy, cache), {}
