"""Loop twins of :mod:`handgrad.ops.min_pool`: the first minimum of each window, found by
walking the window's positions."""

from __future__ import annotations

import numpy as np

from .._args.adaptive import check_return_indices
from .._args.pool import prepare_pool
from ..declare import exports
from .pooling import LoopPoolCache, _window
from .pooling_extra import _adaptive_backward


def _min_pool(call, return_indices):
    """The first strict minimum of each window (a NaN wins), its flat position."""
    x = np.asarray(call.x)
    out_shape = tuple(a.size_out for a in call.axes)
    y = np.empty((x.shape[0], *out_shape, x.shape[-1]), dtype=x.dtype)
    indices = np.zeros(y.shape, dtype=np.int64)
    for index in np.ndindex(*y.shape):
        n, out_index, c = index[0], index[1:-1], index[-1]
        best = None
        for position in _window(call.axes, out_index):
            value = x[(n, *position, c)]
            if best is None or value < x[(n, *best, c)] or np.isnan(value):
                best = position
        y[index] = x[(n, *best, c)]
        indices[index] = np.ravel_multi_index(best, x.shape[1:-1])
    cache = LoopPoolCache(call.op, x.shape, x.dtype, y.shape, {"indices": indices})
    return (y, indices, cache) if check_return_indices(call.op, return_indices) else (y, cache)


def min_pool1d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """Loop twin of :func:`handgrad.ops.min_pool1d`."""
    return _min_pool(prepare_pool("min_pool1d", 1, x, kernel_size, stride, padding, dilation,
                                  ceil_mode), return_indices)


def min_pool1d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.min_pool1d_backward`."""
    return _adaptive_backward("min_pool1d_backward", "min_pool1d", dy, cache, "max")


def min_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """Loop twin of :func:`handgrad.ops.min_pool2d`."""
    return _min_pool(prepare_pool("min_pool2d", 2, x, kernel_size, stride, padding, dilation,
                                  ceil_mode), return_indices)


def min_pool2d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.min_pool2d_backward`."""
    return _adaptive_backward("min_pool2d_backward", "min_pool2d", dy, cache, "max")


__all__ = exports(__name__, globals())
