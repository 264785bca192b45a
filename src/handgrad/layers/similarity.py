"""Layers on two inputs of one shape that compare vectors: PyTorch's CosineSimilarity and
PairwiseDistance (kernels in :mod:`handgrad.ops.distance`). They are merge layers:
``forward([x1, x2])``, ``backward(dy) -> [dx1, dx2]``, used in a graph ``Model``."""

from __future__ import annotations

from .. import ops
from .._checks import describe, is_int
from .._hyper import flag, number
from .registry import register
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
