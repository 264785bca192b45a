"""Unfold (im2col) and fold (col2im) of 2-D channels-last maps, as ``F.unfold`` /
``F.fold``.

``unfold(x, kernel_size, dilation, padding, stride)``: x (N, H, W, C) ->
y (N, L, C*kh*kw) with L = OH*OW output positions in row-major order; the column axis
is ordered (C, kh, kw) as torch's, i.e. column ``c*kh*kw + i*kw + j`` holds
``x_pad[n, oh*s_h + i*d_h, ow*s_w + j*d_w, c]`` (zero padding). Torch's result is
(N, C*kh*kw, L): handgrad's is its transpose on the last two axes.

``fold(x, output_size, kernel_size, ...)``: the adjoint, x (N, L, C*kh*kw) ->
(N, H, W, C), each column summed into the position it came from (overlaps add).
Each op's backward is the other op applied to ``dy``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .._checks import array_module, float_array, int_tuple, upstream_grad
from ._args.cache import Cache, check_cache
from ._args.conv import conv_window
from ._args.windows import WindowAxis, pad_input, padded_zeros, taps
from .declare import declare, exports


@dataclass(frozen=True)
class UnfoldCache(Cache):
    """The map's shape (N, H, W, C), the dtype and the window geometry."""

    map_shape: tuple
    dtype: object
    axes: tuple[WindowAxis, ...]

    @property
    def cols_shape(self):
        n, c = self.map_shape[0], self.map_shape[-1]
        positions = math.prod(a.size_out for a in self.axes)
        return (n, positions, c * math.prod(a.kernel for a in self.axes))


def window(op, spatial, kernel_size, dilation, padding, stride):
    """The two :class:`WindowAxis` of an unfold over ``spatial`` (H, W)."""
    kernel = int_tuple(op, "kernel_size", kernel_size, 2)
    int_tuple(op, "padding", padding, 2, minimum=0)
    return conv_window(op, spatial, kernel, stride, padding, dilation).axes


def prepare_unfold(x, kernel_size, dilation, padding, stride):
    """Validated ``(x, cache)`` of :func:`unfold`, shared with the loop twin."""
    x = float_array("unfold", "x", x, 4, "(N, H, W, C)")
    axes = window("unfold", x.shape[1:3], kernel_size, dilation, padding, stride)
    return x, UnfoldCache("unfold", tuple(x.shape), x.dtype, axes)


def prepare_fold(x, output_size, kernel_size, dilation, padding, stride):
    """Validated ``(x, cache)`` of :func:`fold`, shared with the loop twin."""
    x = float_array("fold", "x", x, 3, "(N, L, C*kh*kw)")
    size = int_tuple("fold", "output_size", output_size, 2)
    axes = window("fold", size, kernel_size, dilation, padding, stride)
    taps_count = math.prod(a.kernel for a in axes)
    positions = math.prod(a.size_out for a in axes)
    if x.shape[2] % taps_count or x.shape[1] != positions:
        raise ValueError(f"fold: 'x' must be (N, {positions}, C*{taps_count}) for output_size="
                         f"{size} and this window (L = {positions} positions, {taps_count} "
                         f"taps); received shape {tuple(x.shape)}")
    cache = UnfoldCache("fold", (x.shape[0], *size, x.shape[2] // taps_count), x.dtype, axes)
    return x, cache


def _gather(x, cache):
    """im2col: map (N, H, W, C) -> columns (N, L, C*K), one tap at a time."""
    xp, axes = array_module(x), cache.axes
    n, c, k = x.shape[0], x.shape[-1], math.prod(a.kernel for a in axes)
    x_pad = pad_input(xp, x, axes)
    cols = xp.empty((n, *(a.size_out for a in axes), c, k), dtype=x.dtype)
    for t, slices in taps(axes):
        cols[..., t] = x_pad[(slice(None), *slices)]
    return cols.reshape(cache.cols_shape)


def _scatter(cols, cache):
    """col2im: columns (N, L, C*K) -> map (N, H, W, C), overlapping taps summed."""
    xp, axes = array_module(cols), cache.axes
    c, k = cache.map_shape[-1], math.prod(a.kernel for a in axes)
    cols = cols.reshape(cols.shape[0], *(a.size_out for a in axes), c, k)  # no -1: N may be 0
    buffer, inner = padded_zeros(xp, cache.map_shape, axes, cols.dtype)
    for t, slices in taps(axes):
        buffer[(slice(None), *slices)] += cols[..., t]
    return xp.ascontiguousarray(buffer[inner])


def unfold(x, kernel_size, dilation=1, padding=0, stride=1):
    """y = im2col(x): x (N, H, W, C) -> y (N, L, C*kh*kw) (see the module doc).
    Returns ``(y, cache)``."""
    x, cache = prepare_unfold(x, kernel_size, dilation, padding, stride)
    return _gather(x, cache), cache


def unfold_backward(dy, cache):
    """dx = fold(dy): dy (N, L, C*kh*kw) -> dx (N, H, W, C)."""
    cache = check_cache("unfold_backward", cache, "unfold", UnfoldCache)
    dy = upstream_grad("unfold_backward", dy, cache.cols_shape, cache.dtype)
    return _scatter(dy, cache)


def fold(x, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """y = col2im(x): x (N, L, C*kh*kw) -> y (N, H, W, C) with (H, W) = output_size.
    Returns ``(y, cache)``."""
    x, cache = prepare_fold(x, output_size, kernel_size, dilation, padding, stride)
    return _scatter(x, cache), cache


def fold_backward(dy, cache):
    """dx = unfold(dy): dy (N, H, W, C) -> dx (N, L, C*kh*kw)."""
    cache = check_cache("fold_backward", cache, "fold", UnfoldCache)
    return _gather(upstream_grad("fold_backward", dy, cache.map_shape, cache.dtype), cache)


from .samples import rearrange as _s  # noqa: E402  (the declaration's samples)

declare(unfold, unfold_backward, torch=_s.torch_unfold, samples=_s.UNFOLD)
declare(fold, fold_backward, torch=_s.torch_fold, samples=_s.FOLD)
__all__ = exports(__name__, globals())
