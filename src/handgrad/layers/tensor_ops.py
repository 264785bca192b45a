"""Tensor operations as layers, for models brought across from torch and ONNX (attention
written out by hand, learned tokens, shifted windows)::

    MatMul:     y = a @ b, per example (..., m, k) @ (..., k, n) -> (..., m, n)
                da = dy @ b^T,  db = a^T @ dy
    Parameter:  y[n] = P.ravel()[index] (or P itself), for every example n of the input
                dP = sum_n dy[n], scattered into P through ``index`` (np.add.at);
                dx = 0 (the input only gives the batch size)
    Roll:       y = x rolled by ``shifts`` along ``axes`` (torch.roll)
                dx = dy rolled back by -``shifts``

``Parameter`` holds a class token, a position embedding or a table of relative position
biases gathered by a constant ``index``: a chain of gathers, views and permutes of one
parameter is itself a gather, with the index the chain makes of ``arange(P.size)``.
With ``trainable=False`` it holds a constant (an attention mask) as a buffer.
``torch_sources`` names the torch buffers folded into the index or the constant
(``relative_position_index``): ``from_torch`` accepts those entries and loads nothing.
"""

from __future__ import annotations

import numpy as np

from .. import initializers
from .._checks import array_module, describe, is_int, upstream_grad
from . import declarations as twins
from .base import Layer
from .onnx_forms import _out
from .registry import register
from .structure import Merge
from .weighted import _check_initializer

#: the key of a Parameter's tensor (in ``parameters``, or ``buffers`` for a constant)
KEY = "P"


def _matmul_onnx(layer, g, values, out_shapes):
    """MatMul of the two inputs, channels last."""
    a, b = (g.channels_last(v) for v in values)
    return [g.value(g.op("MatMul", [a.name, b.name], "matmul"), out_shapes[0])]


@register
class MatMul(Merge):
    """``a @ b`` per example: inputs [(N, ..., m, k), (N, ..., k, n)] with equal leading
    axes -> (N, ..., m, n). See the module docstring."""

    receptive_field = "n/a"
    onnx_graph_form = _matmul_onnx

    def _merged_shape(self, shapes, per_example):
        if len(shapes) != 2:
            raise ValueError(f"{self.label}: takes exactly 2 inputs (a, b); received "
                             f"{len(shapes)}")
        a, b = shapes
        low = 2 if per_example else 3
        what = "per-example shapes" if per_example else "shapes"
        if len(a) < low or len(a) != len(b) or a[:-2] != b[:-2] or a[-1] != b[-2]:
            raise ValueError(f"{self.label}: the inputs' {what} must be (..., m, k) and "
                             f"(..., k, n) with the same leading axes"
                             f"{'' if per_example else ', the batch included'}; received "
                             f"{a} and {b}")
        return (*a[:-1], b[-1])

    def _merge(self, xp, arrays):
        a, b = arrays
        return xp.matmul(a, b), (a, b)

    def _split(self, xp, dy, saved):
        a, b = saved
        return [xp.matmul(dy, xp.swapaxes(b, -1, -2)), xp.matmul(xp.swapaxes(a, -1, -2), dy)]


def _parameter_params(layer, layout):
    """The tensor is the twin module's attribute itself (an empty name: see
    :mod:`handgrad.io.torch_layouts`); a constant is no torch tensor (it is fixed when
    made, as a mask computed from the shapes, or a buffer's values)."""
    return [] if layer.constant else [twins.TorchParam("", (KEY,))]


def _parameter_onnx(layer, g, v):
    """P (an initializer named after the layer: its torch name) broadcast by Expand to
    (batch of the input, *out_shape); with an index that is more than P's own order, P's
    flat values Gather-ed by it first. load_onnx reads both forms back."""
    p, out = layer.tensor, layer.out_shape
    y = g.const(p, layer.name or "parameter")
    index = layer.index
    if index is not None and not (np.array_equal(index.ravel(), np.arange(p.size))
                                  and p.shape in (out, (1, *out))):
        flat = g.op("Reshape", [y, g.ints([-1])], "parameter_flat")
        y = g.op("Gather", [flat, g.ints(index, "parameter_index")], "parameter", axis=0)
    batch = g.op("Slice", [g.op("Shape", [v.name], "batch"), g.ints([0]), g.ints([1])],
                 "batch")
    shape = g.op("Concat", [batch, g.ints(out)], "parameter_shape", axis=0)
    return g.value(g.op("Expand", [y, shape], "parameter"), out)


@register
class Parameter(Layer):
    """A learned tensor P of ``shape`` (or a constant, ``trainable=False``), optionally
    gathered as ``P.ravel()[index]`` (``index``: integers in [0, P.size), its shape the
    per-example output shape), for each example of the input: (N, ...) -> (N,
    *out_shape). The input's values are not read. See the module docstring."""

    receptive_field = "n/a"
    torch_twin = twins.TorchTwin("Parameter", _parameter_params, layout=twins.RESET)
    onnx_form = _parameter_onnx

    def __init__(self, shape, index=None, initializer="zeros", trainable=True, *, name=None,
                 torch_sources=(), **common):
        super().__init__(name=name, trainable=trainable, **common)
        if isinstance(torch_sources, str) or not all(
                isinstance(n, str) for n in torch_sources):
            raise TypeError(f"Parameter: 'torch_sources' must be a sequence of torch "
                            f"state-dict names; received {describe(torch_sources)}")
        self.torch_sources = tuple(torch_sources)
        if (not isinstance(shape, (tuple, list)) or not shape
                or not all(is_int(d) and d >= 1 for d in shape)):
            raise ValueError(f"Parameter: 'shape' must be a non-empty tuple of ints >= 1; "
                             f"received {describe(shape)}")
        self.shape = tuple(int(d) for d in shape)
        self.index = None if index is None else self._checked_index(index)
        self.initializer = _check_initializer("Parameter", "initializer", initializer)
        self.constant = not trainable

    def _checked_index(self, index):
        array = np.asarray(index) if isinstance(index, (list, tuple, np.ndarray)) else None
        size = int(np.prod(self.shape))
        if array is None or array.dtype.kind not in "iu" or array.ndim == 0:
            raise TypeError(f"Parameter: 'index' must be None or an integer array with at "
                            f"least one axis; received {describe(index)}")
        if array.size == 0 or array.min() < 0 or array.max() >= size:
            raise ValueError(f"Parameter: 'index' must hold positions in [0, {size}) of the "
                             f"flat tensor of shape {self.shape}; received values in "
                             f"[{array.min() if array.size else '-'}, "
                             f"{array.max() if array.size else '-'}]")
        return array.astype(np.int64)

    @property
    def out_shape(self):
        """The per-example output shape: the index's, else ``shape``."""
        return self.shape if self.index is None else tuple(self.index.shape)

    @property
    def tensor(self):
        """P: the parameter, or the buffer of a constant."""
        return (self.buffers if self.constant else self.parameters)[KEY]

    def get_config(self):
        """``constant``: built as a constant (``trainable=False``); ``trainable``: whether
        a learned tensor is frozen now."""
        return {**super().get_config(), "shape": list(self.shape), "constant": self.constant,
                "index": None if self.index is None else self.index.tolist(),
                "torch_sources": list(self.torch_sources),
                "initializer": initializers.serialize(self.initializer,
                                                      f"the initializer of {self.label}")}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        constant, frozen = config.pop("constant", False), not config.pop("trainable", True)
        layer = cls(**config, trainable=not constant)
        if frozen:
            layer.trainable = False
        return layer

    def _build(self, input_shape, rng):
        self.add_parameter(KEY, self.shape, self.initializer, rng)
        if self.constant:
            self.buffers[KEY] = self.parameters.pop(KEY)

    def _forward(self, x, training):
        self.check_dtype(x, "tensor")
        p = self.tensor
        xp = array_module(p)
        values = p if self.index is None else p.reshape(-1)[xp.asarray(self.index)]
        y = xp.broadcast_to(values, (x.shape[0], *values.shape)).copy()
        return y, (x.shape, y.shape, y.dtype)

    def _backward(self, dy, cache):
        x_shape, shape, dtype = cache
        dy = upstream_grad(self.label, dy, shape, dtype)
        xp = array_module(dy)
        total = dy.sum(axis=0)
        if self.constant:
            grads = {}
        elif self.index is None:
            grads = {KEY: total}
        else:
            flat = xp.zeros(int(np.prod(self.shape)), dtype=dtype)
            xp.add.at(flat, xp.asarray(self.index).reshape(-1), total.reshape(-1))
            grads = {KEY: flat.reshape(self.shape)}
        return xp.zeros(x_shape, dtype=dtype), grads


def _ints(name, value):
    """An int or a non-empty tuple of ints, as a tuple."""
    values = (value,) if is_int(value) else value
    if not isinstance(values, (tuple, list)) or not values or not all(
            is_int(v) for v in values):
        raise TypeError(f"Roll: '{name}' must be an int or a non-empty tuple of ints; "
                        f"received {describe(value)}")
    return tuple(int(v) for v in values)


def _roll_onnx(layer, g, v):
    """Per axis: the last ``shift`` entries, then the others (Slice, Slice, Concat)."""
    v = g.channels_last(v)
    y = v.name
    for shift, axis in zip(layer.shifts, layer.axes):
        size = v.shape[axis % v.rank - 1]
        cut = (-shift) % size
        if cut == 0:
            continue
        tail = g.op("Slice", [y, g.ints([cut]), g.ints([size]), g.ints([axis])], "roll")
        head = g.op("Slice", [y, g.ints([0]), g.ints([cut]), g.ints([axis])], "roll")
        y = g.op("Concat", [tail, head], "roll", axis=axis)
    if y == v.name:
        y = g.op("Identity", [y], "roll")
    return _out(layer, g, v, y)


@register
class Roll(Layer):
    """``torch.roll(x, shifts, axes)``: entries shifted along ``axes`` (numbered with the
    batch axis, which is not rolled), wrapping around. See the module docstring."""

    receptive_field = "n/a"
    onnx_form = _roll_onnx

    def __init__(self, shifts, axes, *, name=None, **common):
        super().__init__(name=name, **common)
        self.shifts, self.axes = _ints("shifts", shifts), _ints("axes", axes)
        if len(self.shifts) != len(self.axes):
            raise ValueError(f"Roll: 'shifts' {self.shifts} and 'axes' {self.axes} must have "
                             f"the same length")
        if 0 in self.axes:
            raise ValueError(f"Roll: 'axes' must not hold 0, the batch axis; received "
                             f"{self.axes}")

    def get_config(self):
        return {**super().get_config(), "shifts": list(self.shifts), "axes": list(self.axes)}

    def _checked_axes(self, rank):
        """``axes`` as non-negative axes of a ``rank``-D input (batch included)."""
        axes = [a % rank for a in self.axes if -rank <= a < rank]
        if len(axes) != len(self.axes) or 0 in axes or len(set(axes)) != len(axes):
            raise ValueError(f"{self.label}: 'axes' {self.axes} must be distinct non-batch "
                             f"axes of a {rank}-D input (batch axis included)")
        return tuple(axes)

    def _build(self, input_shape, rng):
        self._checked_axes(len(input_shape) + 1)

    def _forward(self, x, training):
        axes = self._checked_axes(x.ndim)
        y = array_module(x).roll(x, self.shifts, axes)
        return y, (axes, y.shape, y.dtype)

    def _backward(self, dy, cache):
        axes, shape, dtype = cache
        dy = upstream_grad(self.label, dy, shape, dtype)
        return array_module(dy).roll(dy, tuple(-s for s in self.shifts), axes), {}
