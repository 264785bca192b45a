"""Max pooling on a GPU (CuPy): one reduction over a strided window view.

The -inf padded input is viewed as windows (N, *O, *K, C) (no copy), laid out as
(N, *O, T, C) with T = prod(K) taps, then reduced once::

    y = max_t windows[..., t, :]                 (NaN propagates)
    tap = the first t reaching y, or the last NaN t of a NaN window
    dx_pad[window t] += where(tap == t, dy, 0)   (one strided slice-add per tap)

The NumPy path (numba kernels, or the tap-by-tap folds of :mod:`.pooling`) is the
reference; this one replaces per-tap Python loops of many small launches and the
scatter-add of overlapping windows by a few large kernels.
"""

from __future__ import annotations

import math

import numpy as np

from ._args.windows import pad_input, padded_zeros, taps
from ._gather import window_view


def window_max(xp, x, axes):
    """(y (N, *O, C), tap (N, *O, C) int8/int32): the maxima and their tap in row-major
    kernel order."""
    nd, n_taps = len(axes), math.prod(a.kernel for a in axes)
    windows = window_view(xp, pad_input(xp, x, axes, fill=-np.inf), axes)
    flat = windows.reshape(*windows.shape[:1 + nd], n_taps, x.shape[-1])  # one copy
    y = flat.max(axis=-2)
    tap = flat.argmax(axis=-2)  # the first maximum; a NaN window: its first NaN
    nan = xp.isnan(y)
    if x.dtype.kind == "f":  # the last NaN wins (the loop twin's order)
        last = n_taps - 1 - xp.isnan(flat[..., ::-1, :]).argmax(axis=-2)
        tap = xp.where(nan, last, tap)
    return y, tap


def window_max_backward(xp, dy, tap, x_shape, axes, dtype):
    """dx (x_shape): each dy added at its window's winning tap."""
    buffer, inner = padded_zeros(xp, x_shape, axes, dtype)
    zero = dtype.type(0)
    for index, window in taps(axes):
        target = buffer[(slice(None), *window)]
        target += xp.where(tap == index, dy, zero)
    return xp.ascontiguousarray(buffer[inner])
