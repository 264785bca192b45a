"""Naive adaptive pooling and max unpooling: plain loops over positions and channels.

The readable specification of :mod:`handgrad.ops.pooling_extra`, with the same
signatures: a bin is the box of input positions ``[floor(o*L/out), ceil((o+1)*L/out))``
per axis; the maximum keeps the first strict maximum in row-major order (a NaN wins).
"""

from __future__ import annotations

import itertools

import numpy as np

from ..._checks import upstream_grad
from .._args.adaptive import check_return_indices, prepare_adaptive
from .._args.cache import check_cache
from .._args.unpool import prepare_unpool
from ..declare import exports
from .pooling import LoopPoolCache


def _open(op, forward, dy, cache):
    cache = check_cache(op, cache, forward, LoopPoolCache)
    return cache, upstream_grad(op, dy, cache.y_shape, cache.dtype)


def _bin(call, out_index):
    """The input positions of one output's bin, row-major."""
    ranges = [range(*b[o]) for b, o in zip(call.bins, out_index)]
    return list(itertools.product(*ranges))


def _adaptive(call, kind, return_indices=False):
    x = np.asarray(call.x)
    spatial = x.shape[1:-1]
    y = np.zeros((x.shape[0], *call.out_shape, x.shape[-1]), dtype=x.dtype)
    indices = np.zeros(y.shape, dtype=np.int64)
    record = {}
    for out_index in np.ndindex(*call.out_shape):
        positions = _bin(call, out_index)
        record[out_index] = positions
        for n in range(x.shape[0]):
            for c in range(x.shape[-1]):
                if kind == "avg":
                    total = 0.0
                    for p in positions:
                        total += x[(n, *p, c)]
                    y[(n, *out_index, c)] = total / len(positions)
                    continue
                best = positions[0]
                for p in positions[1:]:
                    value = x[(n, *p, c)]
                    if value > x[(n, *best, c)] or np.isnan(value):
                        best = p
                y[(n, *out_index, c)] = x[(n, *best, c)]
                indices[(n, *out_index, c)] = np.ravel_multi_index(best, spatial)
    if kind == "max":
        record = {"indices": indices}
    cache = LoopPoolCache(call.op, x.shape, x.dtype, y.shape, record)
    return (y, indices, cache) if return_indices else (y, cache)


def _adaptive_max(op, rank, x, output_size, return_indices):
    """The body of the adaptive_max_pool{1,2}d twins: checked arguments, loop maxima."""
    call = prepare_adaptive(op, rank, x, output_size)
    return _adaptive(call, "max", check_return_indices(op, return_indices))


def _adaptive_backward(op, forward, dy, cache, kind):
    cache, dy = _open(op, forward, dy, cache)
    dx = np.zeros(cache.x_shape, dtype=cache.dtype)
    spatial = cache.x_shape[1:-1]
    for index in np.ndindex(*dy.shape):
        n, out_index, c = index[0], index[1:-1], index[-1]
        if kind == "max":
            p = np.unravel_index(cache.record["indices"][index], spatial)
            dx[(n, *p, c)] += dy[index]
            continue
        positions = cache.record[out_index]
        for p in positions:
            dx[(n, *p, c)] += dy[index] / len(positions)
    return dx


def adaptive_avg_pool1d(x, output_size):
    """Loop twin of :func:`handgrad.ops.adaptive_avg_pool1d`."""
    return _adaptive(prepare_adaptive("adaptive_avg_pool1d", 1, x, output_size), "avg")


def adaptive_avg_pool1d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.adaptive_avg_pool1d_backward`."""
    return _adaptive_backward("adaptive_avg_pool1d_backward", "adaptive_avg_pool1d", dy,
                              cache, "avg")


def adaptive_avg_pool2d(x, output_size):
    """Loop twin of :func:`handgrad.ops.adaptive_avg_pool2d`."""
    return _adaptive(prepare_adaptive("adaptive_avg_pool2d", 2, x, output_size), "avg")


def adaptive_avg_pool2d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.adaptive_avg_pool2d_backward`."""
    return _adaptive_backward("adaptive_avg_pool2d_backward", "adaptive_avg_pool2d", dy,
                              cache, "avg")


def adaptive_max_pool1d(x, output_size, return_indices=False):
    """Loop twin of :func:`handgrad.ops.adaptive_max_pool1d`."""
    return _adaptive_max("adaptive_max_pool1d", 1, x, output_size, return_indices)


def adaptive_max_pool1d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.adaptive_max_pool1d_backward`."""
    return _adaptive_backward("adaptive_max_pool1d_backward", "adaptive_max_pool1d", dy,
                              cache, "max")


def adaptive_max_pool2d(x, output_size, return_indices=False):
    """Loop twin of :func:`handgrad.ops.adaptive_max_pool2d`."""
    return _adaptive_max("adaptive_max_pool2d", 2, x, output_size, return_indices)


def adaptive_max_pool2d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.adaptive_max_pool2d_backward`."""
    return _adaptive_backward("adaptive_max_pool2d_backward", "adaptive_max_pool2d", dy,
                              cache, "max")


def adaptive_avg_pool3d(x, output_size):
    """Loop twin of :func:`handgrad.ops.adaptive_avg_pool3d`."""
    return _adaptive(prepare_adaptive("adaptive_avg_pool3d", 3, x, output_size), "avg")


def adaptive_avg_pool3d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.adaptive_avg_pool3d_backward`."""
    return _adaptive_backward("adaptive_avg_pool3d_backward", "adaptive_avg_pool3d", dy,
                              cache, "avg")


def adaptive_max_pool3d(x, output_size, return_indices=False):
    """Loop twin of :func:`handgrad.ops.adaptive_max_pool3d`."""
    op = "adaptive_max_pool3d"
    return _adaptive(prepare_adaptive(op, 3, x, output_size), "max",
                     check_return_indices(op, return_indices))


def adaptive_max_pool3d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.adaptive_max_pool3d_backward`."""
    return _adaptive_backward("adaptive_max_pool3d_backward", "adaptive_max_pool3d", dy,
                              cache, "max")


def _unpool(call):
    x, indices = np.asarray(call.x), np.asarray(call.indices)
    y = np.zeros((x.shape[0], *call.out_shape, x.shape[-1]), dtype=x.dtype)
    for index in np.ndindex(*x.shape):
        n, c = index[0], index[-1]
        y[(n, *np.unravel_index(indices[index], call.out_shape), c)] = x[index]
    return y, LoopPoolCache(call.op, x.shape, x.dtype, y.shape, {"indices": indices})


def _unpool_backward(op, forward, dy, cache):
    cache, dy = _open(op, forward, dy, cache)
    indices = cache.record["indices"]
    dx = np.zeros(cache.x_shape, dtype=cache.dtype)
    for index in np.ndindex(*cache.x_shape):
        n, c = index[0], index[-1]
        dx[index] = dy[(n, *np.unravel_index(indices[index], dy.shape[1:-1]), c)]
    return dx


def max_unpool1d(x, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Loop twin of :func:`handgrad.ops.max_unpool1d`."""
    return _unpool(prepare_unpool("max_unpool1d", 1, x, indices, kernel_size, stride, padding,
                                  output_size))


def max_unpool1d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.max_unpool1d_backward`."""
    return _unpool_backward("max_unpool1d_backward", "max_unpool1d", dy, cache)


def max_unpool2d(x, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Loop twin of :func:`handgrad.ops.max_unpool2d`."""
    return _unpool(prepare_unpool("max_unpool2d", 2, x, indices, kernel_size, stride, padding,
                                  output_size))


def max_unpool2d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.max_unpool2d_backward`."""
    return _unpool_backward("max_unpool2d_backward", "max_unpool2d", dy, cache)


def max_unpool3d(x, indices, kernel_size, stride=None, padding=0, output_size=None):
    """Loop twin of :func:`handgrad.ops.max_unpool3d`."""
    return _unpool(prepare_unpool("max_unpool3d", 3, x, indices, kernel_size, stride, padding,
                                  output_size))


def max_unpool3d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.max_unpool3d_backward`."""
    return _unpool_backward("max_unpool3d_backward", "max_unpool3d", dy, cache)


__all__ = exports(__name__, globals())
