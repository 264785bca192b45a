"""Validation and geometry of pooling arguments (shared with the reference twins)."""

from __future__ import annotations

from dataclasses import dataclass

from ..._checks import float_array, int_tuple
from ..._hyper import flag
from .conv import LAYOUTS
from .windows import WindowAxis, WindowGeometry, check_not_empty, parse_padding, window_axes


@dataclass(frozen=True)
class PoolCall:
    """A validated pooling call: the op's name, the input and one :class:`WindowAxis` per
    spatial axis."""

    op: str
    x: object
    axes: tuple[WindowAxis, ...]
    pads: tuple[tuple[int, int], ...]


def pool_window(op, spatial, kernel_size, stride, padding, dilation,
                ceil_mode) -> WindowGeometry:
    """Geometry of a pooling over the spatial sizes ``spatial``. ``stride=None`` means
    ``stride = kernel_size``.

    Numeric padding may be at most half the kernel on each side (as PyTorch), so
    no window lies entirely in the padding.
    """
    nd = len(spatial)
    kernel = int_tuple(op, "kernel_size", kernel_size, nd)
    stride = kernel if stride is None else int_tuple(op, "stride", stride, nd)
    dilation = int_tuple(op, "dilation", dilation, nd)
    if not isinstance(ceil_mode, bool):
        raise TypeError(f"{op}: 'ceil_mode' must be a bool; received {ceil_mode!r}")
    pads = parse_padding(op, padding, nd, kernel, stride, dilation, spatial)
    if not isinstance(padding, str):
        for k, pair in zip(kernel, pads):
            if max(pair) > k // 2:
                raise ValueError(
                    f"{op}: 'padding' must be at most half the kernel size (kernel_size "
                    f"{kernel}, so at most {tuple(k // 2 for k in kernel)}); received "
                    f"{padding!r}"
                )
    return WindowGeometry(window_axes(op, spatial, kernel, stride, dilation, pads, ceil_mode),
                          pads)


def prepare_pool(op, nd, x, kernel_size, stride, padding, dilation, ceil_mode) -> PoolCall:
    """Validate a pooling call (see :func:`pool_window`). Only the batch axis of ``x``
    may be empty."""
    x = check_not_empty(op, "x", float_array(op, "x", x, nd + 2, LAYOUTS[nd]), LAYOUTS[nd])
    geometry = pool_window(op, tuple(x.shape[1:-1]), kernel_size, stride, padding, dilation,
                           ceil_mode)
    return PoolCall(op, x, geometry.axes, geometry.padding)


def resolve_count_include_pad(op, padding, count_include_pad) -> bool:
    """Whether average pooling counts the padding in its divisor. ``None`` (the default):
    not for ``padding="same"`` (TensorFlow's "same" averages the input values only), yes
    for numeric padding (PyTorch's default); a bool is taken as given."""
    if count_include_pad is None:
        return not (isinstance(padding, str) and padding == "same")
    return flag(op, "count_include_pad", count_include_pad)


def prepare_global_pool(op, x, keepdims):
    """Validate a global pooling call: x (N, L, C), (N, H, W, C) or (N, D, H, W, C), only
    N may be 0."""
    flag(op, "keepdims", keepdims)
    layout = "(N, L, C), (N, H, W, C) or (N, D, H, W, C)"
    return check_not_empty(op, "x", float_array(op, "x", x, (3, 4, 5), layout), layout)
