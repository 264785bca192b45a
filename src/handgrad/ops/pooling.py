"""Max and average pooling, channels-last, looping over kernel taps only.

Max pooling (padding is -inf, so it never wins)::

    y[n, o, c] = max_k x_pad[n, o*s + k*d, c]
    dx[n, i, c] = sum_o dy[n, o, c] * [i is the first maximum of window o]

Ties send the whole gradient to the first maximum in row-major window order and a NaN
wins (PyTorch). NumPy path: unpadded windows of 25 taps or more take ``_fold_pool``
(folds that keep each window's winning tap), other tiling windows ``_tile_pool`` (x
compared with y), others ``_separable_pool`` (an axis at a time); ties there and NaN
windows take whole windows' taps (``_pool_indices``: ``add.at`` at each winner found by
comparison, or ``dy * mask`` per tap).

Average pooling::

    y[n, o, c] = sum_k x_pad[n, o*s + k, c] / divisor[o]
    dx[n, i, c] = sum_o dy[n, o, c] / divisor[o]   over the windows o that contain i

NumPy path: unpadded windows by reductions of a strided view (``_tile_pool``; the
backward of tiling windows by broadcast copies), others an axis at a time
(``_separable_pool``); CuPy: a fold of every tap.

``divisor`` follows PyTorch: the window clipped to the padded input with
``count_include_pad=True``, to the unpadded input otherwise, or ``divisor_override``.
``count_include_pad=None`` (the default) is False for ``padding="same"`` (TensorFlow's
"same" pooling averages the input values only) and True otherwise (PyTorch). Only the
batch axis may be empty (PyTorch): an empty spatial or channel axis is a ValueError.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import array_module, upstream_grad
from . import _fold_pool, _tile_pool
from ._args.adaptive import check_return_indices
from ._args.cache import Cache, check_cache
from ._args.pool import PoolCall, prepare_pool, resolve_count_include_pad
from ._args.windows import WindowAxis
from ._engine import dispatch as engine
from ._pool_indices import (
    clipped_taps,
    covers_once,
    fold_taps,
    max_pool_indices,
    max_pool_winners,
    nan_windows,
    overlapping,
    tap_indices,
)
from ._repeat import repeat
from ._separable_pool import max_backward, max_forward, sum_backward, sum_forward
from ._window_pool import window_max, window_max_backward
from .declare import declare, exports


@dataclass(frozen=True)
class PoolCache(Cache):
    """What a pooling backward needs: the forward's name, the input's shape and dtype,
    the geometry, and the input and output (max) or the divisors (average)."""

    x_shape: tuple[int, ...]
    dtype: object
    axes: tuple[WindowAxis, ...]
    x: object = None
    y: object = None
    divisor: object = None
    index: object = None  # compiled path: flat position of each window's winner
    stages: object = None  # NumPy path: the 1-D stages of a separable max pooling
    tap: object = None  # GPU path, NumPy's large windows: each window's winning tap number

    @property
    def y_shape(self):
        return (self.x_shape[0], *(a.size_out for a in self.axes), self.x_shape[-1])


def _max_pool(call: PoolCall):
    """y = running maximum over the taps of the -inf-padded input (NaN propagates)."""
    x, axes = call.x, call.axes
    if engine.covers(axes, x, most=3):
        y, index = engine.max_pool(x, axes)
        return y, PoolCache(call.op, tuple(x.shape), x.dtype, axes, index=index)
    xp = array_module(x)
    if xp is not np:
        y, tap = window_max(xp, x, axes)
        return y, PoolCache(call.op, tuple(x.shape), x.dtype, axes, x=x, y=y, tap=tap)
    if _fold_pool.applies(axes):
        y, tap = _fold_pool.max_forward(x, axes)
        if tap is not None:  # else a NaN window: the paths below find its last NaN
            return y, PoolCache(call.op, tuple(x.shape), x.dtype, axes, tap=tap)
    if _tile_pool.tiles(axes):
        y = _tile_pool.max_forward(x, axes)
        return y, PoolCache(call.op, tuple(x.shape), x.dtype, axes, x=x, y=y)
    separable = max_forward(x, axes)
    if separable is not None:
        y, stages = separable
        return y, PoolCache(call.op, tuple(x.shape), x.dtype, axes, stages=stages)
    y = fold_taps(x, axes, np.maximum, -np.inf)  # NaN windows
    return y, PoolCache(call.op, tuple(x.shape), x.dtype, axes, x=x, y=y)


def _with_indices(call, return_indices):
    """The max pooling's (y, cache), or (y, indices, cache): PyTorch's indices."""
    wanted = check_return_indices(call.op, return_indices)
    y, cache = _max_pool(call)
    if not wanted:
        return y, cache
    if cache.tap is not None:  # each window's winning tap (a GPU, or NumPy's folds)
        return y, tap_indices(cache.tap, call.axes, call.x.shape), cache
    return y, max_pool_indices(call.x, y, call.axes), cache


def _max_pool_backward(op, forward, dy, cache):
    """dx: each window's dy goes to its winner (:func:`max_pool_winners`): the first tap
    (row-major) equal to its maximum, or its last NaN; overlapping windows add up."""
    cache = check_cache(op, cache, forward, PoolCache)
    dy = upstream_grad(op, dy, cache.y_shape, cache.dtype)
    if cache.index is not None:  # the forward ran compiled
        return engine.max_pool_backward(dy, cache.index, cache.x_shape, cache.dtype)
    if cache.stages is not None:
        return max_backward(dy, cache.stages)
    xp = array_module(dy)
    if cache.tap is not None and xp is not np:  # a slice-add per tap
        return window_max_backward(xp, dy, cache.tap, cache.x_shape, cache.axes, cache.dtype)
    if cache.tap is not None:  # NumPy's folds: one scatter at the winners
        return _scatter_add(xp, dy, tap_indices(cache.tap, cache.axes, cache.x_shape, True),
                            cache)
    axes, y = cache.axes, cache.y
    if xp is np and (dx := _tile_pool.max_backward(dy, cache.x, y, axes)) is not None:
        return dx
    nan = nan_windows(y)
    if overlapping(axes) or nan is not None:  # a scatter-add of dy at the winners
        return _scatter_add(xp, dy, max_pool_indices(cache.x, y, axes, flat=True), cache)
    dx = _gradient_buffer(xp, cache, False)
    for _, inputs, outputs, mask in max_pool_winners(cache.x, y, axes):
        xp.multiply(dy[outputs], mask, out=dx[inputs])
    return dx


def _scatter_add(xp, dy, flat, cache):
    """dx (N, *S, C) = the sum of dy at the positions ``flat`` (N, *O, C) of dx.ravel()."""
    dx = xp.zeros(cache.x_shape, dtype=cache.dtype)
    xp.add.at(dx.reshape(-1), flat.reshape(-1), dy.reshape(-1))
    return dx


def _gradient_buffer(xp, cache, add):
    """dx's buffer: empty where the taps assign (``add`` False) and tile x, else zeros."""
    make = xp.zeros if add or not covers_once(cache.axes) else xp.empty
    return make(cache.x_shape, dtype=cache.dtype)


def _avg_divisor(xp, call: PoolCall, count_include_pad, divisor_override, dtype):
    """Per-output divisor of shape (1, *O, 1), a product of per-axis counts."""
    shape = [1] * (len(call.axes) + 2)
    divisor = xp.ones(shape, dtype=dtype)
    if divisor_override is not None:
        return divisor * divisor_override
    for i, (axis, (before, after)) in enumerate(zip(call.axes, call.pads)):
        start = xp.arange(axis.size_out) * axis.stride - before
        end = xp.minimum(start + axis.kernel, axis.size_in + after)
        if not count_include_pad:
            start = xp.maximum(start, 0)
            end = xp.minimum(end, axis.size_in)
        shape[i + 1] = axis.size_out
        divisor = divisor * (end - start).reshape(shape).astype(dtype)
        shape[i + 1] = 1
    return divisor


def _avg_pool(call: PoolCall, count_include_pad, divisor_override):
    x, axes = call.x, call.axes
    xp = array_module(x)
    divisor = _avg_divisor(xp, call, count_include_pad, divisor_override, x.dtype)
    cache = PoolCache(call.op, tuple(x.shape), x.dtype, axes, divisor=divisor)
    if engine.covers(axes, x, most=3):
        return engine.avg_pool(x, axes, divisor), cache
    if xp is not np:
        y = fold_taps(x, axes, xp.add, 0.0)
    else:
        y = (_tile_pool.sum_forward if _fold_pool.unpadded(axes) else sum_forward)(x, axes)
    y /= divisor
    return y, cache


def _avg_pool_backward(op, forward, dy, cache):
    cache = check_cache(op, cache, forward, PoolCache)
    dy = upstream_grad(op, dy, cache.y_shape, cache.dtype)
    if engine.covers(cache.axes, dy, cache.divisor, most=3):
        return engine.avg_pool_backward(dy, cache.axes, cache.divisor, cache.x_shape,
                                        cache.dtype)
    xp = array_module(dy)
    share = dy / cache.divisor
    if xp is np:
        if _tile_pool.tiles(cache.axes):  # each share repeated over its window
            return repeat(np, share, tuple(a.kernel for a in cache.axes))
        return sum_backward(share, cache.axes, cache.x_shape)
    add = overlapping(cache.axes)
    dx = _gradient_buffer(xp, cache, add)
    for _, inputs, outputs in clipped_taps(cache.axes):
        if add:
            dx[inputs] += share[outputs]
        else:
            dx[inputs] = share[outputs]
    return dx


def max_pool1d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """1-D max pooling: x (N, L, C) -> y (N, L_out, C), PyTorch's output size and ties.

    Returns ``(y, cache)`` for :func:`max_pool1d_backward`, or ``(y, indices, cache)``
    with ``return_indices`` (int64 (N, L_out, C), PyTorch's flat input positions).
    """
    op = "max_pool1d"
    call = prepare_pool(op, 1, x, kernel_size, stride, padding, dilation, ceil_mode)
    return _with_indices(call, return_indices)


def max_pool1d_backward(dy, cache):
    """dy (N, L_out, C) -> dx (N, L, C): each dy goes to its window's first maximum."""
    return _max_pool_backward("max_pool1d_backward", "max_pool1d", dy, cache)


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """2-D max pooling: x (N, H, W, C) -> y (N, H_out, W_out, C), PyTorch's output size
    and ties (first maximum in row-major window order). Returns ``(y, cache)``, or
    ``(y, indices, cache)`` with ``return_indices`` (int64, flat h * W + w, as PyTorch)."""
    op = "max_pool2d"
    call = prepare_pool(op, 2, x, kernel_size, stride, padding, dilation, ceil_mode)
    return _with_indices(call, return_indices)


def max_pool2d_backward(dy, cache):
    """dy (N, H_out, W_out, C) -> dx (N, H, W, C): each dy goes to its window's first
    maximum; overlapping windows add up."""
    return _max_pool_backward("max_pool2d_backward", "max_pool2d", dy, cache)


def _avg_pool_nd(op, nd, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                 divisor_override):
    """Validate an avg_pool{nd}d call with ``divisor_override`` and run it."""
    include = resolve_count_include_pad(op, padding, count_include_pad)
    if divisor_override is not None and (
        isinstance(divisor_override, bool) or not isinstance(divisor_override, int)
        or divisor_override == 0
    ):
        raise ValueError(
            f"{op}: 'divisor_override' must be None or a non-zero int; "
            f"received {divisor_override!r}"
        )
    call = prepare_pool(op, nd, x, kernel_size, stride, padding, 1, ceil_mode)
    return _avg_pool(call, include, divisor_override)


def avg_pool1d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=None):
    """1-D average pooling: x (N, L, C) -> y (N, L_out, C). Returns ``(y, cache)``.

    ``count_include_pad``: None counts the padding except for ``padding="same"``."""
    op = "avg_pool1d"
    include = resolve_count_include_pad(op, padding, count_include_pad)
    call = prepare_pool(op, 1, x, kernel_size, stride, padding, 1, ceil_mode)
    return _avg_pool(call, include, None)


def avg_pool1d_backward(dy, cache):
    """dy (N, L_out, C) -> dx (N, L, C): dx[i] = sum_{o contains i} dy[o] / divisor[o]."""
    return _avg_pool_backward("avg_pool1d_backward", "avg_pool1d", dy, cache)


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=None,
               divisor_override=None):
    """2-D average pooling: x (N, H, W, C) -> y (N, H_out, W_out, C). Returns ``(y, cache)``.

    ``count_include_pad``: None counts the padding except for ``padding="same"``.
    ``divisor_override`` (a non-zero int) replaces every window's divisor, as in PyTorch.
    """
    return _avg_pool_nd("avg_pool2d", 2, x, kernel_size, stride, padding, ceil_mode,
                        count_include_pad, divisor_override)


def avg_pool2d_backward(dy, cache):
    """dy (N, H_out, W_out, C) -> dx (N, H, W, C): dx[i] = sum over windows o containing
    i of dy[o] / divisor[o]."""
    return _avg_pool_backward("avg_pool2d_backward", "avg_pool2d", dy, cache)


def max_pool3d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """3-D max pooling: x (N, D, H, W, C) -> y (N, D_out, H_out, W_out, C), PyTorch's output
    size and ties (first maximum in row-major window order). Returns ``(y, cache)``, or
    ``(y, indices, cache)`` with ``return_indices`` (int64, flat (d * H + h) * W + w)."""
    op = "max_pool3d"
    call = prepare_pool(op, 3, x, kernel_size, stride, padding, dilation, ceil_mode)
    return _with_indices(call, return_indices)


def max_pool3d_backward(dy, cache):
    """dy (N, D_out, H_out, W_out, C) -> dx (N, D, H, W, C): each dy goes to its window's
    first maximum; overlapping windows add up."""
    return _max_pool_backward("max_pool3d_backward", "max_pool3d", dy, cache)


def avg_pool3d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=None,
               divisor_override=None):
    """3-D average pooling: x (N, D, H, W, C) -> y (N, D_out, H_out, W_out, C). Returns
    ``(y, cache)``; ``count_include_pad`` and ``divisor_override`` as :func:`avg_pool2d`."""
    return _avg_pool_nd("avg_pool3d", 3, x, kernel_size, stride, padding, ceil_mode,
                        count_include_pad, divisor_override)


def avg_pool3d_backward(dy, cache):
    """dy (N, D_out, H_out, W_out, C) -> dx (N, D, H, W, C): dx[i] = sum over windows o
    containing i of dy[o] / divisor[o]."""
    return _avg_pool_backward("avg_pool3d_backward", "avg_pool3d", dy, cache)


# The declarations: kernels, torch counterpart, sample inputs (in ops/samples/pooling.py).
from .samples import pooling as _s  # noqa: E402

declare(max_pool1d, max_pool1d_backward, torch=_s.torch_pool("max"), samples=_s.MAX_POOL1D)
declare(max_pool2d, max_pool2d_backward, torch=_s.torch_pool("max"), samples=_s.MAX_POOL2D)
declare(max_pool3d, max_pool3d_backward, torch=_s.torch_pool("max"), samples=_s.MAX_POOL3D)
declare(avg_pool1d, avg_pool1d_backward, torch=_s.torch_pool("avg"), samples=_s.AVG_POOL1D)
declare(avg_pool2d, avg_pool2d_backward, torch=_s.torch_pool("avg"), samples=_s.AVG_POOL2D)
declare(avg_pool3d, avg_pool3d_backward, torch=_s.torch_pool("avg"), samples=_s.AVG_POOL3D)
__all__ = exports(__name__, globals())
