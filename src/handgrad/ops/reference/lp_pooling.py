"""Naive power-average (LP) pooling: plain loops over windows, positions and channels.

The readable specification of :mod:`handgrad.ops.lp_pooling`: per window of in-bounds
positions (``count`` of them; ``K`` the kernel's size), ``T = K / count * sum x ** p``
and ``y = T ** (1 / p)``; the backward sends ``dy * y / (p T) * K / count * p x ** (p-1)``
to each position (``dy`` itself for p = 1, 0 where T = 0).
"""

from __future__ import annotations

import math

import numpy as np

from ..._checks import upstream_grad
from .._args.cache import check_cache
from .._args.pool import prepare_pool
from ..declare import exports
from ..lp_pooling import check_norm_type
from .pooling import LoopPoolCache, _window


def _lp_pool(op, nd, x, norm_type, kernel_size, stride, ceil_mode):
    p = check_norm_type(op, norm_type)
    call = prepare_pool(op, nd, x, kernel_size, stride, 0, 1, ceil_mode)
    x = np.asarray(call.x)
    out_shape = tuple(a.size_out for a in call.axes)
    kernel = math.prod(a.kernel for a in call.axes)
    y = np.zeros((x.shape[0], *out_shape, x.shape[-1]), dtype=x.dtype)
    record = {"x": x, "p": p, "windows": {}}
    for out_index in np.ndindex(*out_shape):
        positions = _window(call.axes, out_index)
        for n in range(x.shape[0]):
            for c in range(x.shape[-1]):
                total = 0.0
                for position in positions:
                    with np.errstate(invalid="ignore"):
                        total += x[(n, *position, c)] ** p
                total = total * kernel / len(positions)
                with np.errstate(invalid="ignore"):
                    y[(n, *out_index, c)] = total ** (1.0 / p)
                record["windows"][(n, *out_index, c)] = (positions, total, kernel)
    return y, LoopPoolCache(op, x.shape, x.dtype, y.shape, record)


def _lp_pool_backward(op, forward, dy, cache):
    cache = check_cache(op, cache, forward, LoopPoolCache)
    dy = upstream_grad(op, dy, cache.y_shape, cache.dtype)
    x, p = cache.record["x"], cache.record["p"]
    dx = np.zeros(cache.x_shape, dtype=cache.dtype)
    for (n, *out_index, c), (positions, total, kernel) in cache.record["windows"].items():
        g = dy[(n, *out_index, c)]
        if p != 1.0:
            g = 0.0 if total == 0 else g * total ** (1.0 / p) / (p * total)
        for position in positions:
            value = x[(n, *position, c)]
            dx[(n, *position, c)] += g * kernel / len(positions) * p * value ** (p - 1.0)
    return dx


def lp_pool1d(x, norm_type, kernel_size, stride=None, ceil_mode=False):
    """Loop twin of :func:`handgrad.ops.lp_pool1d`."""
    return _lp_pool("lp_pool1d", 1, x, norm_type, kernel_size, stride, ceil_mode)


def lp_pool1d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.lp_pool1d_backward`."""
    return _lp_pool_backward("lp_pool1d_backward", "lp_pool1d", dy, cache)


def lp_pool2d(x, norm_type, kernel_size, stride=None, ceil_mode=False):
    """Loop twin of :func:`handgrad.ops.lp_pool2d`."""
    return _lp_pool("lp_pool2d", 2, x, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.lp_pool2d_backward`."""
    return _lp_pool_backward("lp_pool2d_backward", "lp_pool2d", dy, cache)


__all__ = exports(__name__, globals())
