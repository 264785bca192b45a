"""Power-average (LP) pooling, PyTorch's ``lp_pool1d/2d``, built on average pooling::

    T[n, o, c] = K * avg_pool(x ** p)[n, o, c]      (K the kernel's size: the window's
                                                     sum of x ** p, rescaled where
                                                     ceil_mode clips the window)
    y = T ** (1 / p)
    dT = dy * y / (p * T)       (dy for p = 1; 0 where T = 0, where PyTorch gives NaN)
    dx = p * x ** (p - 1) * avg_pool_backward(K * dT)

As in PyTorch, x ** p and T ** (1 / p) are real powers: a negative window sum with a
fractional 1 / p gives NaN (use an even p for a norm of signed values).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from .._checks import array_module, upstream_grad
from ._args.cache import Cache, check_cache
from .declare import declare, exports
from .pooling import avg_pool1d, avg_pool1d_backward, avg_pool2d, avg_pool2d_backward


@dataclass(frozen=True)
class LpPoolCache(Cache):
    """The forward's name, x, y, the window sums T, p, the kernel size K and the average
    pooling's cache."""

    x: object
    y: object
    total: object
    p: float
    kernel: int
    avg: object


def check_norm_type(op, norm_type):
    """p: a finite real number > 0."""
    if isinstance(norm_type, (bool, np.bool_)) or not isinstance(norm_type, numbers.Real) \
            or not math.isfinite(norm_type) or norm_type <= 0:
        raise ValueError(f"{op}: 'norm_type' must be a finite number > 0; received "
                         f"{norm_type!r}")
    return float(norm_type)


def _lp_pool(op, avg, x, norm_type, kernel_size, stride, ceil_mode, nd):
    p = check_norm_type(op, norm_type)
    xp = array_module(x)
    x = xp.asarray(x)
    with np.errstate(invalid="ignore"):  # PyTorch's NaN for a negative base
        mean, avg_cache = avg(x ** p, kernel_size, stride, 0, ceil_mode)
        kernel = int(math.prod(np.broadcast_to(kernel_size, nd)))
        total = mean * kernel
        y = total ** (1.0 / p)
    return y, LpPoolCache(op, x, y, total, p, kernel, avg_cache)


def _lp_pool_backward(op, forward, avg_backward, dy, cache):
    cache = check_cache(op, cache, forward, LpPoolCache)
    dy = upstream_grad(op, dy, cache.y.shape, cache.x.dtype)
    xp = array_module(dy)
    if cache.p == 1.0:
        d_total = dy
    else:
        zero = cache.total == 0
        d_total = xp.where(zero, 0, dy * cache.y / (cache.p * xp.where(zero, 1, cache.total)))
    with np.errstate(invalid="ignore", divide="ignore"):
        slope = cache.p * cache.x ** (cache.p - 1.0)
    return slope * avg_backward((d_total * cache.kernel).astype(cache.x.dtype), cache.avg)


def lp_pool1d(x, norm_type, kernel_size, stride=None, ceil_mode=False):
    """x (N, L, C) -> y (N, L_out, C): (sum of x ** p over each window) ** (1 / p), as
    PyTorch (no padding). Returns ``(y, cache)``."""
    return _lp_pool("lp_pool1d", avg_pool1d, x, norm_type, kernel_size, stride, ceil_mode, 1)


def lp_pool1d_backward(dy, cache):
    """dy (N, L_out, C) -> dx (N, L, C) (see the module's formula)."""
    return _lp_pool_backward("lp_pool1d_backward", "lp_pool1d", avg_pool1d_backward, dy, cache)


def lp_pool2d(x, norm_type, kernel_size, stride=None, ceil_mode=False):
    """x (N, H, W, C) -> y (N, H_out, W_out, C): (sum of x ** p over each window) **
    (1 / p), as PyTorch (no padding). Returns ``(y, cache)``."""
    return _lp_pool("lp_pool2d", avg_pool2d, x, norm_type, kernel_size, stride, ceil_mode, 2)


def lp_pool2d_backward(dy, cache):
    """dy (N, H_out, W_out, C) -> dx (N, H, W, C) (see the module's formula)."""
    return _lp_pool_backward("lp_pool2d_backward", "lp_pool2d", avg_pool2d_backward, dy, cache)


# The declarations: kernels, torch counterpart, sample inputs (ops/samples/pooling_extra.py).
from .samples import pooling_extra as _s  # noqa: E402

declare(lp_pool1d, lp_pool1d_backward, torch=_s.torch_lp_pool, samples=_s.LP_POOL1D)
declare(lp_pool2d, lp_pool2d_backward, torch=_s.torch_lp_pool, samples=_s.LP_POOL2D)
__all__ = exports(__name__, globals())
