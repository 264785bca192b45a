"""Naive interpolation: plain loops over output positions, the readable specification of
:mod:`handgrad.ops.resample` with the same signatures. Each output position reads, per
axis, a short list of ``(input index, weight)``; the value is the sum over every
combination of one entry per axis of the product of the weights times the input."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

from ..._checks import upstream_grad
from .._args.cache import Cache, check_cache
from .._args.resample import prepare_interpolate
from ..declare import exports


@dataclass(frozen=True)
class LoopResampleCache(Cache):
    """The input's shape and dtype, the output's shape, and per axis the list of
    ``(index, weight)`` pairs of each output position."""

    x_shape: tuple
    dtype: object
    y_shape: tuple
    reads: tuple


def _keys(t, a=-0.75):
    """Keys' cubic kernel at distance |t|."""
    t = abs(t)
    if t <= 1:
        return (a + 2) * t ** 3 - (a + 3) * t ** 2 + 1
    return a * t ** 3 - 5 * a * t ** 2 + 8 * a * t - 4 * a if t < 2 else 0.0


def _reads(mode, n, m, o, scale, align, real, rank):
    """The ``(index, weight)`` pairs output ``o`` of an axis resized n -> m reads."""
    if mode == "area":
        start, end = (o * n) // m, -((-(o + 1) * n) // m)
        return [(i, 1.0 / (end - start)) for i in range(start, end)]
    if mode in ("nearest", "nearest-exact"):
        if rank == 2 and mode == "nearest" and m in (n, 2 * n):
            return [(o if m == n else o // 2, 1.0)]
        s = np.float32(1.0 / scale) if scale else np.float32(n) / np.float32(m)
        if mode == "nearest":
            src = np.float32(o) * s
        else:
            src = np.float32((o + 0.5) * float(s))
        return [(min(math.floor(src), n - 1), 1.0)]
    if align:
        src = real(n - 1) / real(m - 1) * real(o) if m > 1 else real(0)
    else:
        s = real(1.0 / scale) if scale else real(n) / real(m)
        src = s * (real(o) + real(0.5)) - real(0.5)
    if mode != "bicubic":
        src = max(src, real(0))
        i0 = min(int(src), n - 1)
        f = min(max(float(src) - i0, 0.0), 1.0)
        return [(i0, 1.0 - f), (min(i0 + 1, n - 1), f)]
    i = min(math.floor(src), n - 1)
    f = min(max(float(src) - i, 0.0), 1.0)
    return [(min(max(i + k, 0), n - 1), _keys(f - k)) for k in (-1, 0, 1, 2)]


def interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None):
    """Loop twin of :func:`handgrad.ops.interpolate`."""
    call = prepare_interpolate("interpolate", x, size, scale_factor, mode, align_corners,
                               recompute_scale_factor)
    x = np.asarray(call.x)
    rank = x.ndim - 2
    copy = call.sizes_out == call.sizes_in and mode in ("linear", "bilinear", "trilinear")
    reads = tuple(
        [[(o, 1.0)] if copy else
         _reads(mode, n, m, o, s, call.align_corners, x.dtype.type, rank) for o in range(m)]
        for n, m, s in zip(call.sizes_in, call.sizes_out, call.scales))
    y = np.zeros((x.shape[0], *call.sizes_out, x.shape[-1]), dtype=x.dtype)
    for out in np.ndindex(*call.sizes_out):
        for combo in itertools.product(*(reads[a][o] for a, o in enumerate(out))):
            weight = math.prod(w for _, w in combo)
            y[(slice(None), *out)] += weight * x[(slice(None), *(i for i, _ in combo))]
    cache = LoopResampleCache("interpolate", x.shape, x.dtype, y.shape, reads)
    return y, cache


def interpolate_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.interpolate_backward`: each output position gives
    ``weight * dy`` back to every input position it read."""
    op = "interpolate_backward"
    cache = check_cache(op, cache, "interpolate", LoopResampleCache)
    dy = upstream_grad(op, dy, cache.y_shape, cache.dtype)
    dx = np.zeros(cache.x_shape, dtype=cache.dtype)
    for out in np.ndindex(*cache.y_shape[1:-1]):
        for combo in itertools.product(*(cache.reads[a][o] for a, o in enumerate(out))):
            weight = math.prod(w for _, w in combo)
            dx[(slice(None), *(i for i, _ in combo))] += weight * dy[(slice(None), *out)]
    return dx


__all__ = exports(__name__, globals())
