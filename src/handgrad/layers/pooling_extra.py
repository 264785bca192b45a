"""Adaptive pooling layers (no parameters): PyTorch's AdaptiveAvgPool/AdaptiveMaxPool on
channels-last maps."""

from __future__ import annotations

import numpy as np

from .. import ops
from . import declarations as twins
from .pooling import MaxPoolND, Pool
from .registry import register


def adaptive_onnx_form(layer, g, v):
    """ReduceMean/ReduceMax for an output of one position; otherwise, axis by axis, an
    AveragePool/MaxPool where the input size is a multiple of the output's (uniform bins)
    and a nearest Resize where the output size is a multiple of the input's (bins of one
    position, each repeated); other sizes have no exact ONNX form."""
    v = g.channels_first(v)
    spatial = tuple(v.shape[:-1])
    sizes = ops.adaptive_output_sizes(layer.label, layer.kwargs["output_size"], spatial)
    kind = "Max" if isinstance(layer, AdaptiveMaxPool) else "Average"
    uneven = [(s, o) for s, o in zip(spatial, sizes) if s % o and o % s]
    if uneven:
        size, out = uneven[0]
        raise ValueError(f"export_onnx: {layer.label} pools {size} positions to {out}, whose "
                         f"bins {ops.adaptive_bins(size, out)} differ in size or overlap: "
                         f"ONNX has no exact operator for that (export works when, on every "
                         f"axis, one of the input and output sizes is a multiple of the other)")
    y = v.name
    if all(o == 1 for o in sizes):  # not GlobalMaxPool: onnx's evaluator mis-shapes 3-D
        op = "ReduceMax" if kind == "Max" else "ReduceMean"
        y = g.op(op, [y], "adaptive_pool", axes=list(range(2, v.rank)), keepdims=1)
        return g.value(y, tuple(layer.output_shape(v.shape)), True)
    kernel = [s // o if s % o == 0 else 1 for s, o in zip(spatial, sizes)]
    repeat = [o // s if s % o else 1 for s, o in zip(spatial, sizes)]
    if any(k > 1 for k in kernel) or not any(r > 1 for r in repeat):
        y = g.op(f"{kind}Pool", [y], "adaptive_pool", kernel_shape=kernel, strides=kernel)
    if any(r > 1 for r in repeat):
        scales = g.const(np.array([1, 1, *repeat], np.float32), "scales", np.float32)
        y = g.op("Resize", [y, "", scales], "adaptive_pool", mode="nearest",
                 coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    return g.value(y, tuple(layer.output_shape(v.shape)), True)


class AdaptivePool(Pool):
    """Adaptive pooling to ``output_size`` (an int, or a tuple with None keeping that
    axis's input size), PyTorch's bins ``[floor(o*L/out), ceil((o+1)*L/out))``."""

    torch_twin = twins.TorchTwin("AdaptiveAvgPool1d/2d/3d, AdaptiveMaxPool1d/2d/3d",
                                 layout=twins.MAPS)
    onnx_form = adaptive_onnx_form
    receptive_field = "n/a"  # the bins depend on the input's size

    def __init__(self, output_size, *, name=None, **common):
        super().__init__(name, common, output_size=output_size)


@register
class AdaptiveAvgPool1D(AdaptivePool):
    """The mean of each adaptive bin: (N, L, C) -> (N, output_size, C)."""

    forward_op = staticmethod(ops.adaptive_avg_pool1d)
    backward_op = staticmethod(ops.adaptive_avg_pool1d_backward)
    rank = 1


@register
class AdaptiveAvgPool2D(AdaptivePool):
    """The mean of each adaptive bin: (N, H, W, C) -> (N, *output_size, C)."""

    forward_op = staticmethod(ops.adaptive_avg_pool2d)
    backward_op = staticmethod(ops.adaptive_avg_pool2d_backward)
    rank = 2


@register
class AdaptiveAvgPool3D(AdaptivePool):
    """The mean of each adaptive bin: (N, D, H, W, C) -> (N, *output_size, C)."""

    forward_op = staticmethod(ops.adaptive_avg_pool3d)
    backward_op = staticmethod(ops.adaptive_avg_pool3d_backward)
    rank = 3


class AdaptiveMaxPool(AdaptivePool):
    """The first maximum of each adaptive bin. ``return_indices``: ``forward`` returns
    ``(y, indices)`` and a graph call gives two outputs, the second the int64 flat index
    of each maximum in its (n, c) plane (PyTorch's, for ``MaxUnpool``)."""

    def __init__(self, output_size, return_indices=False, *, name=None, **common):
        Pool.__init__(self, name, common, output_size=output_size,
                      return_indices=return_indices)


@register
class AdaptiveMaxPool1D(AdaptiveMaxPool):
    """The first maximum of each adaptive bin: (N, L, C) -> (N, output_size, C)."""

    forward_op = staticmethod(ops.adaptive_max_pool1d)
    backward_op = staticmethod(ops.adaptive_max_pool1d_backward)
    rank = 1


@register
class AdaptiveMaxPool2D(AdaptiveMaxPool):
    """The first maximum (row-major) of each adaptive bin: (N, H, W, C) ->
    (N, *output_size, C)."""

    forward_op = staticmethod(ops.adaptive_max_pool2d)
    backward_op = staticmethod(ops.adaptive_max_pool2d_backward)
    rank = 2


@register
class AdaptiveMaxPool3D(AdaptiveMaxPool):
    """The first maximum (row-major) of each adaptive bin: (N, D, H, W, C) ->
    (N, *output_size, C)."""

    forward_op = staticmethod(ops.adaptive_max_pool3d)
    backward_op = staticmethod(ops.adaptive_max_pool3d_backward)
    rank = 3


def lp_onnx_form(layer, g, v):
    """ONNX LpPool, which sums |x| ** p over whole windows: exact for an even integer p
    and windows that ceil_mode never clips; otherwise refused."""
    kw = layer.kwargs
    v = g.channels_first(v)
    p = float(kw["norm_type"])
    geometry = ops.pool_geometry(v.shape[:-1], kw["kernel_size"], stride=kw["stride"],
                                 padding=0, ceil_mode=kw["ceil_mode"], op=layer.label)
    if p != int(p) or int(p) % 2 or any(geometry.pads_end):
        raise ValueError(f"export_onnx: {layer.label} has no exact ONNX form (ONNX's LpPool "
                         f"sums |x| ** p over unclipped windows, PyTorch x ** p rescaled "
                         f"where ceil_mode clips one): it exports for an even integer "
                         f"norm_type and windows inside the input; received norm_type={p:g}"
                         f", ceil_mode={kw['ceil_mode']}")
    axes = geometry.axes
    y = g.op("LpPool", [v.name], "lp_pool", p=int(p), kernel_shape=[a.kernel for a in axes],
             strides=[a.stride for a in axes])
    return g.value(y, tuple(layer.output_shape(v.shape)), True)


class LPPool(Pool):
    """Power-average pooling, PyTorch's LPPool: (sum of x ** p over each window) **
    (1 / p), no padding; ``norm_type`` is p (2: the Euclidean norm of each window)."""

    torch_twin = twins.TorchTwin("LPPool1d/2d", layout=twins.MAPS)
    onnx_form = lp_onnx_form

    def __init__(self, norm_type, kernel_size, stride=None, ceil_mode=False, *, name=None,
                 **common):
        super().__init__(name, common, norm_type=norm_type, kernel_size=kernel_size,
                         stride=stride, ceil_mode=ceil_mode)


@register
class LPPool1D(LPPool):
    """LP pooling on (N, L, C)."""

    forward_op = staticmethod(ops.lp_pool1d)
    backward_op = staticmethod(ops.lp_pool1d_backward)
    rank = 1


@register
class LPPool2D(LPPool):
    """LP pooling on (N, H, W, C)."""

    forward_op = staticmethod(ops.lp_pool2d)
    backward_op = staticmethod(ops.lp_pool2d_backward)
    rank = 2


class MinPool(MaxPoolND):
    """Min pooling, -MaxPool(-x): the first minimum of each window (EpyNN's; no torch
    module, no ONNX operator)."""

    torch_twin = None
    onnx_form = None


@register
class MinPool1D(MinPool):
    """Min pooling on (N, L, C)."""

    forward_op = staticmethod(ops.min_pool1d)
    backward_op = staticmethod(ops.min_pool1d_backward)
    rank = 1


@register
class MinPool2D(MinPool):
    """Min pooling on (N, H, W, C)."""

    forward_op = staticmethod(ops.min_pool2d)
    backward_op = staticmethod(ops.min_pool2d_backward)
    rank = 2
