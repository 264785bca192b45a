"""Layers on two inputs: PyTorch's CosineSimilarity and PairwiseDistance, which compare
vectors (kernels in :mod:`handgrad.ops.distance`), and Bilinear (:mod:`handgrad.ops.bilinear`).
They are merge layers: ``forward([x1, x2])``, ``backward(dy) -> [dx1, dx2]``, used in a
graph ``Model``."""

from __future__ import annotations

import math

import numpy as np

from .. import ops
from .._checks import describe, is_int, positive_int
from .._hyper import flag, number
from . import declarations as twins
from .base import Layer, check_dtype
from .registry import register
from .spelling import torch_spelling
from .structure import Merge, _name


def _vector_norm(g, x, p, axes, hint):
    """||x||_p over ``axes`` (kept)."""
    if p == 2.0:
        return g.op("Sqrt", [g.op("ReduceSum", [g.op("Mul", [x, x], hint), g.ints(axes)], hint,
                                  keepdims=1)], hint)
    powered = g.op("Pow", [g.op("Abs", [x], hint), g.const(p, "p")], hint)
    total = g.op("ReduceSum", [powered, g.ints(axes)], hint, keepdims=1)
    return g.op("Pow", [total, g.const(1.0 / p, "inverse_p")], hint)


def _cosine_form(layer, g, values, out_shapes):
    """sum (x1 / max(||x1||, eps)) * (x2 / max(||x2||, eps)) on channels-last values."""
    values = [g.channels_last(v) for v in values]
    axes = [layer.axis % values[0].rank]
    eps = g.const(layer.eps, "eps")
    units = [g.op("Div", [v.name, g.op("Max", [_vector_norm(g, v.name, 2.0, axes, "norm"), eps],
                                       "clamped")], "unit") for v in values]
    y = g.op("ReduceSum", [g.op("Mul", units, "product"), g.ints(axes)], "cosine", keepdims=0)
    return [g.value(y, out_shapes[0], False)]


def _distance_form(layer, g, values, out_shapes):
    """||x1 - x2 + eps||_p over the last axis, on channels-last values."""
    values = [g.channels_last(v) for v in values]
    d = g.op("Add", [g.op("Sub", [v.name for v in values], "difference"),
                     g.const(layer.eps, "eps")], "shifted")
    y = _vector_norm(g, d, layer.p, [values[0].rank - 1], "distance")
    if not layer.keepdim:
        y = g.op("Squeeze", [y, g.ints([values[0].rank - 1])], "distance")
    return [g.value(y, out_shapes[0], False)]


class PairMerge(Merge):
    """Exactly two inputs of one shape; the output drops (or keeps as 1) ``reduced_axis``."""

    def _axis(self, rank):
        """The reduced axis of inputs of ``rank`` axes (with the batch axis)."""
        return rank - 1

    def _merged_shape(self, shapes, per_example):
        if len(shapes) != 2:
            raise ValueError(f"{self.label}: takes exactly 2 inputs; received {len(shapes)}")
        if shapes[1] != shapes[0]:
            raise ValueError(f"{self.label}: both inputs must have one shape; "
                             f"{_name(0, per_example)} has shape {shapes[0]} and "
                             f"{_name(1, per_example)} has shape {shapes[1]}")
        lead = 1 if per_example else 0
        axis = self._axis(len(shapes[0]) + lead) - lead
        if axis < 0 or axis >= len(shapes[0]):
            raise ValueError(f"{self.label}: the vectors' axis {self.axis} must be a non-batch "
                             f"axis of inputs with per-example shape {shapes[0][lead:]}")
        kept = (1,) if getattr(self, "keepdim", False) else ()
        return (*shapes[0][:axis], *kept, *shapes[0][axis + 1:])

    def _split(self, xp, dy, cache):
        return list(type(self).backward_op(dy, cache))


@register
class CosineSimilarity(PairMerge):
    """y = cosine of the angle between x1 and x2 along ``axis`` (default the channels,
    last), norms clamped at ``eps``: PyTorch's CosineSimilarity with the channel axis
    last (torch's ``dim=1`` on channels-first data is ``axis=-1`` here)."""

    onnx_graph_form = _cosine_form
    backward_op = staticmethod(ops.cosine_similarity_backward)

    def __init__(self, axis=-1, eps=1e-8, *, name=None):
        super().__init__(name=name)
        if not is_int(axis):
            raise TypeError(f"CosineSimilarity: 'axis' must be an int; received "
                            f"{describe(axis)}")
        self.axis = int(axis)
        self.eps = number("CosineSimilarity", "eps", eps, low=0.0, low_open=True)

    def get_config(self):
        return {**super().get_config(), "axis": self.axis, "eps": self.eps}

    def _axis(self, rank):
        axis = self.axis % rank if -rank <= self.axis < rank else -1
        return -1 if axis == 0 else axis

    def _merge(self, xp, arrays):
        return ops.cosine_similarity(*arrays, axis=self.axis, eps=self.eps)


@register
class PairwiseDistance(PairMerge):
    """y = ||x1 - x2 + eps||_p along the last axis (PyTorch's PairwiseDistance); (N, ...)
    out, or (N, ..., 1) with ``keepdim``."""

    onnx_graph_form = _distance_form
    backward_op = staticmethod(ops.pairwise_distance_backward)
    axis = -1

    def __init__(self, p=2.0, eps=1e-6, keepdim=False, *, name=None):
        super().__init__(name=name)
        self.p = number("PairwiseDistance", "p", p, low=1.0)
        self.eps = number("PairwiseDistance", "eps", eps, low=0.0)
        self.keepdim = flag("PairwiseDistance", "keepdim", keepdim)

    def get_config(self):
        return {**super().get_config(), "p": self.p, "eps": self.eps, "keepdim": self.keepdim}

    def _merge(self, xp, arrays):
        return ops.pairwise_distance(*arrays, p=self.p, eps=self.eps, keepdim=self.keepdim)


def _bilinear_form(layer, g, values, out_shapes):
    """Einsum("...i,ijo,...j->...o") (+ Add b), on channels-last values."""
    x1, x2 = (g.channels_last(v) for v in values)
    y = g.op("Einsum", [x1.name, g.const(layer.parameters["W"], "W"), x2.name], "bilinear",
             equation="...i,ijo,...j->...o")
    if layer.use_bias:
        y = g.op("Add", [y, g.const(layer.parameters["b"], "b")], "bilinear")
    return [g.value(y, out_shapes[0], False)]


def _bilinear_params(layer, layout):
    """torch's weight (O, I, J) is W (I, J, O) with its last axis moved first."""
    return [twins.TorchParam("weight", ("W",), (2, 0, 1)),
            *([twins.TorchParam("bias", ("b",))] if layer.use_bias else [])]


@register
class Bilinear(Merge):
    """y = x1^T W x2 + b on two inputs (..., I) and (..., J) with the same leading axes ->
    (..., out_features): PyTorch's Bilinear, W (I, J, O) (torch's weight (O, I, J) with its
    first axis last), b (O,); both initialized U(-1/sqrt(I), 1/sqrt(I)) as in torch. I and
    J come from the data: torch's ``Bilinear(in1, in2, out)`` is ``Bilinear(out)``."""

    torch_twin = twins.TorchTwin("Bilinear", _bilinear_params, twins.RESET)
    onnx_graph_form = _bilinear_form
    receptive_field = "pointwise"

    def __init__(self, out_features, bias=True, *, name=None, dtype=None):
        Layer.__init__(self, name=name, dtype=dtype)
        if is_int(bias) and not isinstance(bias, bool):
            raise TypeError(torch_spelling(
                "Bilinear", f"received bias={bias!r} (the second argument)",
                f"Bilinear(in1_features, {out_features!r}, {bias!r})", f"Bilinear({bias!r})"))
        self.out_features = positive_int("Bilinear", "out_features", out_features)
        self.use_bias = flag("Bilinear", "bias", bias)

    def get_config(self):
        return {**super().get_config(), "out_features": self.out_features, "bias": self.use_bias}

    def _merged_shape(self, shapes, per_example):
        if len(shapes) != 2:
            raise ValueError(f"{self.label}: takes exactly 2 inputs; received {len(shapes)}")
        if not shapes[0] or shapes[0][:-1] != shapes[1][:-1] or len(shapes[1]) != len(shapes[0]):
            raise ValueError(f"{self.label}: the inputs must be (..., I) and (..., J) with the "
                             f"same leading axes; {_name(0, per_example)} has shape "
                             f"{shapes[0]} and {_name(1, per_example)} has shape {shapes[1]}")
        return (*shapes[0][:-1], self.out_features)

    def build(self, input_shape, rng=None, dtype=None):
        super().build(input_shape)
        self.dtype = self.dtype or check_dtype(self.label, dtype) or np.dtype(np.float32)
        rng = np.random.default_rng(self.seed) if rng is None else rng
        shape = (self.input_shape[0][-1], self.input_shape[1][-1], self.out_features)
        bound = 1.0 / math.sqrt(shape[0]) if shape[0] else 0.0
        self.parameters["W"] = rng.uniform(-bound, bound, shape).astype(self.dtype)
        if self.use_bias:
            self.parameters["b"] = rng.uniform(-bound, bound, shape[2:]).astype(self.dtype)
        self.gradients = {k: np.zeros_like(v) for k, v in self.parameters.items()}
        return self

    def _merge(self, xp, arrays):
        return ops.bilinear(*arrays, self.parameters["W"], self.parameters.get("b"))

    def _backward(self, dy, cache):
        dx1, dx2, dW, db = ops.bilinear_backward(dy, cache[2])
        return [dx1, dx2], {"W": dW, **({} if db is None else {"b": db})}
