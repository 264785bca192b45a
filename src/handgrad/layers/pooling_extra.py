"""Adaptive pooling layers (no parameters): PyTorch's AdaptiveAvgPool/AdaptiveMaxPool on
channels-last maps."""

from __future__ import annotations

from .. import ops
from ..ops._args.adaptive import bins, output_sizes
from . import declarations as twins
from .pooling import Pool
from .registry import register


def adaptive_onnx_form(layer, g, v):
    """GlobalAveragePool/GlobalMaxPool for an output of one position, AveragePool/MaxPool
    when every axis divides evenly (uniform bins); otherwise no exact ONNX form."""
    v = g.channels_first(v)
    spatial = tuple(v.shape[:-1])
    sizes = output_sizes(layer.label, layer.kwargs["output_size"], spatial)
    kind = "Max" if layer.forward_op in (ops.adaptive_max_pool1d, ops.adaptive_max_pool2d) \
        else "Average"
    if all(o == 1 for o in sizes):
        y = g.op(f"Global{kind}Pool", [v.name], "adaptive_pool")
    elif all(s % o == 0 for s, o in zip(spatial, sizes)):
        kernel = [s // o for s, o in zip(spatial, sizes)]
        y = g.op(f"{kind}Pool", [v.name], "adaptive_pool", kernel_shape=kernel, strides=kernel)
    else:
        uneven = [(s, o) for s, o in zip(spatial, sizes) if s % o]
        raise ValueError(f"export_onnx: {layer.label} pools {uneven[0][0]} positions to "
                         f"{uneven[0][1]}, whose bins {bins(*uneven[0])} differ in size or "
                         f"overlap: ONNX has no exact operator for that (export works when "
                         f"every input size is a multiple of its output size)")
    return g.value(y, tuple(layer.output_shape(v.shape)), True)


class AdaptivePool(Pool):
    """Adaptive pooling to ``output_size`` (an int, or a tuple with None keeping that
    axis's input size), PyTorch's bins ``[floor(o*L/out), ceil((o+1)*L/out))``."""

    torch_twin = twins.TorchTwin("AdaptiveAvgPool1d/2d, AdaptiveMaxPool1d/2d",
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
