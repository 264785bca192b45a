"""Min pooling, channels-last: the max pooling of -x, negated (the first minimum of each
window; a NaN wins; padding never wins)::

    y = -max_pool(-x)          dx = max_pool_backward(dy)   (the two negations cancel)
"""

from __future__ import annotations

from dataclasses import dataclass

from .._checks import array_module
from ._args.cache import Cache, check_cache
from .declare import declare, exports
from .pooling import max_pool1d, max_pool1d_backward, max_pool2d, max_pool2d_backward


@dataclass(frozen=True)
class MinPoolCache(Cache):
    """The forward's name and the cache of the max pooling of -x."""

    inner: object


def _min_pool(op, max_pool, x, return_indices, **kwargs):
    """y = -max_pool(-x) (the first minimum of each window; a NaN wins)."""
    xp = array_module(x)
    out = max_pool(-xp.asarray(x), return_indices=return_indices, **kwargs)
    return (-out[0], *out[1:-1], MinPoolCache(op, out[-1]))


def min_pool1d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """1-D min pooling, x (N, L, C) -> y (N, L_out, C): -max_pool1d(-x), so the first
    minimum of each window (padding never wins). Returns ``(y, cache)`` (or ``(y,
    indices, cache)``)."""
    return _min_pool("min_pool1d", max_pool1d, x, return_indices, kernel_size=kernel_size,
                     stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)


def min_pool1d_backward(dy, cache):
    """dy (N, L_out, C) -> dx (N, L, C): each dy goes to its window's first minimum
    (dx = max_pool_backward(dy), the two negations cancel)."""
    cache = check_cache("min_pool1d_backward", cache, "min_pool1d", MinPoolCache)
    return max_pool1d_backward(dy, cache.inner)


def min_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """2-D min pooling, x (N, H, W, C) -> y (N, H_out, W_out, C): -max_pool2d(-x).
    Returns ``(y, cache)`` (or ``(y, indices, cache)``)."""
    return _min_pool("min_pool2d", max_pool2d, x, return_indices, kernel_size=kernel_size,
                     stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil_mode)


def min_pool2d_backward(dy, cache):
    """dy (N, H_out, W_out, C) -> dx (N, H, W, C): each dy to its window's first minimum."""
    cache = check_cache("min_pool2d_backward", cache, "min_pool2d", MinPoolCache)
    return max_pool2d_backward(dy, cache.inner)


# The declarations: kernels, torch counterpart, sample inputs (ops/samples/pooling_extra.py).
from .samples import pooling_extra as _s  # noqa: E402

declare(min_pool1d, min_pool1d_backward, torch=_s.torch_min_pool, samples=_s.MIN_POOL1D)
declare(min_pool2d, min_pool2d_backward, torch=_s.torch_min_pool, samples=_s.MIN_POOL2D)
__all__ = exports(__name__, globals())
