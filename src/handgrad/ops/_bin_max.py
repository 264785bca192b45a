"""Adaptive max pooling over bins that are no pooling's windows (64 -> 6), the NumPy
(and CuPy) path: one spatial axis at a time, the last first.

Along one axis, tap k reads position ``min(start_o + k, end_o - 1)`` of every bin o (a
shorter bin repeats its last position, which never wins), and a running maximum keeps
the tap of its winner by PyTorch's rule: a later tap wins when it is larger (ties keep
the earlier one) or NaN. Reducing the last axis first keeps the row-major first
maximum (each row's first maximum, then the first row holding the bin's maximum). Each
stage turns its winning taps into positions along its axis and carries the flat index
of the winner within the axes reduced so far::

    flat = pos * stride + flat_before[..., pos, ...]      (stride: the later axes' size)

The NaN test runs only when y holds a NaN (a NaN propagates through the maximum): the
fold then runs again with it, so that a bin's last NaN wins.
"""

from __future__ import annotations

import math

import numpy as np

from .._checks import array_module


def bin_max(x, bins):
    """(y (N, *O, C), flat int64 (N, *O, C)): the maximum of x (N, *S, C) over each of
    ``bins`` (per spatial axis, (start, end) per output) and its flat spatial index."""
    y, flat = _fold(x, bins, nan=False)
    if bool(array_module(y).isnan(y).any()):
        y, flat = _fold(x, bins, nan=True)
    return y, flat


def _fold(x, bins, nan):
    xp = array_module(x)
    spatial = x.shape[1:-1]
    y, flat = x, None
    for axis in range(len(bins), 0, -1):
        y, pos = _axis_max(xp, y, axis, bins[axis - 1], nan)
        at = pos * math.prod(spatial[axis:])
        flat = at if flat is None else at + xp.take_along_axis(flat, pos, axis=axis)
    return xp.ascontiguousarray(y), flat


def _axis_max(xp, z, axis, bins, nan):
    """The maximum of z over each bin along ``axis``, and the winner's position."""
    starts = xp.asarray([s for s, _ in bins])
    last = xp.asarray([e - 1 for _, e in bins])
    taps = max(e - s for s, e in bins)
    best = xp.take(z, starts, axis=axis)
    tap = xp.zeros(best.shape, dtype=np.min_scalar_type(taps - 1))
    for k in range(1, taps):
        values = xp.take(z, xp.minimum(starts + k, last), axis=axis)
        wins = values > best
        if nan:
            wins |= xp.isnan(values)
        xp.maximum(best, values, out=best)
        xp.maximum(tap, wins * tap.dtype.type(k), out=tap)  # the last tap that won
    shape = [1] * z.ndim
    shape[axis] = len(bins)
    return best, xp.minimum(starts.reshape(shape) + tap, last.reshape(shape))
