"""Validation and geometry of pooling arguments (shared with the reference twins)."""

from __future__ import annotations

from dataclasses import dataclass

from .._checks import float_array, int_tuple
from ._conv_args import LAYOUTS
from ._windows import Axis, check_output_size, parse_padding


@dataclass(frozen=True)
class PoolCall:
    """A validated pooling call: the input and one :class:`Axis` per spatial axis."""

    x: object
    axes: tuple[Axis, ...]
    pads: tuple[tuple[int, int], ...]


def pool_axes(op, spatial, kernel, stride, dilation, pads, ceil_mode):
    """PyTorch's pooling output size per axis.

    ``out = floor_or_ceil((in + pads - dilation*(k-1) - 1) / stride) + 1``; with
    ``ceil_mode`` the last window must start inside the input or the leading padding.
    """
    axes = []
    for i, (size, k, s, d, (before, after)) in enumerate(
        zip(spatial, kernel, stride, dilation, pads)
    ):
        span = (k - 1) * d + 1
        room = size + before + after - span
        size_out = (room + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (size_out - 1) * s >= size + before:
            size_out -= 1
        check_output_size(
            op, i, size_out,
            f"input size {size} padded by {(before, after)} is smaller than the dilated "
            f"kernel span {span}",
        )
        axes.append(Axis(size, k, s, d, before, size_out))
    return tuple(axes)


def prepare_pool(op, nd, x, kernel_size, stride, padding, dilation, ceil_mode) -> PoolCall:
    """Validate a pooling call. ``stride=None`` means ``stride = kernel_size``.

    Numeric padding may be at most half the kernel on each side (as PyTorch), so
    no window lies entirely in the padding.
    """
    x = float_array(op, "x", x, nd + 2, LAYOUTS[nd])
    kernel = int_tuple(op, "kernel_size", kernel_size, nd)
    stride = kernel if stride is None else int_tuple(op, "stride", stride, nd)
    dilation = int_tuple(op, "dilation", dilation, nd)
    if not isinstance(ceil_mode, bool):
        raise TypeError(f"{op}: 'ceil_mode' must be a bool; received {ceil_mode!r}")
    spatial = tuple(x.shape[1:-1])
    pads = parse_padding(op, padding, nd, kernel, stride, dilation, spatial)
    if not isinstance(padding, str):
        for k, pair in zip(kernel, pads):
            if max(pair) > k // 2:
                raise ValueError(
                    f"{op}: 'padding' must be at most half the kernel size (kernel_size "
                    f"{kernel}, so at most {tuple(k // 2 for k in kernel)}); received "
                    f"{padding!r}"
                )
    return PoolCall(x, pool_axes(op, spatial, kernel, stride, dilation, pads, ceil_mode), pads)
