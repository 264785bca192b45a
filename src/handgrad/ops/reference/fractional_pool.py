"""Naive fractional max pooling: plain loops over examples, channels, outputs and taps.

The readable specification of :mod:`handgrad.ops.fractional_pool`, same signatures:
per (n, c) and axis, window i starts at ``int((i + u) * alpha) - int(u * alpha)``
(``alpha = (L - k) / (out - 1)``, in x's dtype), the last at ``L - k``; the maximum is
the first strict one in row-major tap order (a NaN wins).
"""

from __future__ import annotations

import itertools

import numpy as np

from .._args.fractional import SAMPLE_COLUMNS, prepare_fractional
from ..declare import exports
from .pooling import LoopPoolCache
from .pooling_extra import _adaptive_backward


def _starts(u, size_in, size_out, kernel):
    """The window starts of one axis for one sample ``u`` (a scalar of x's dtype)."""
    real = type(u)
    starts = []
    for i in range(size_out - 1):
        alpha = real(size_in - kernel) / real(size_out - 1)
        starts.append(int((real(i) + u) * alpha) - int(u * alpha))
    return starts + [size_in - kernel]


def _fractional(op, nd, x, kernel_size, output_size, output_ratio, return_indices, samples,
                rng):
    call = prepare_fractional(op, nd, x, kernel_size, output_size, output_ratio,
                              return_indices, samples, rng)
    x, spatial = np.asarray(call.x), call.x.shape[1:-1]
    y = np.zeros((x.shape[0], *call.out, x.shape[-1]), dtype=x.dtype)
    indices = np.zeros(y.shape, dtype=np.int64)
    columns = SAMPLE_COLUMNS[nd]
    for n in range(x.shape[0]):
        for c in range(x.shape[-1]):
            starts = [_starts(call.samples[n, c, columns[a]], spatial[a], call.out[a],
                              call.kernel[a]) for a in range(nd)]
            for out_index in np.ndindex(*call.out):
                first = [starts[a][o] for a, o in enumerate(out_index)]
                best = None
                for offsets in itertools.product(*(range(k) for k in call.kernel)):
                    p = tuple(f + t for f, t in zip(first, offsets))
                    value = x[(n, *p, c)]
                    if best is None or value > x[(n, *best, c)] or np.isnan(value):
                        best = p
                y[(n, *out_index, c)] = x[(n, *best, c)]
                indices[(n, *out_index, c)] = np.ravel_multi_index(best, spatial)
    cache = LoopPoolCache(op, x.shape, x.dtype, y.shape, {"indices": indices})
    return (y, indices, cache) if call.return_indices else (y, cache)


def fractional_max_pool2d(x, kernel_size, output_size=None, output_ratio=None,
                          return_indices=False, samples=None, rng=None):
    """Loop twin of :func:`handgrad.ops.fractional_max_pool2d`."""
    return _fractional("fractional_max_pool2d", 2, x, kernel_size, output_size, output_ratio,
                       return_indices, samples, rng)


def fractional_max_pool2d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.fractional_max_pool2d_backward`."""
    return _adaptive_backward("fractional_max_pool2d_backward", "fractional_max_pool2d", dy,
                              cache, "max")


def fractional_max_pool3d(x, kernel_size, output_size=None, output_ratio=None,
                          return_indices=False, samples=None, rng=None):
    """Loop twin of :func:`handgrad.ops.fractional_max_pool3d`."""
    return _fractional("fractional_max_pool3d", 3, x, kernel_size, output_size, output_ratio,
                       return_indices, samples, rng)


def fractional_max_pool3d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.fractional_max_pool3d_backward`."""
    return _adaptive_backward("fractional_max_pool3d_backward", "fractional_max_pool3d", dy,
                              cache, "max")


__all__ = exports(__name__, globals())
