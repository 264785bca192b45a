"""Max pooling of large unpadded windows (25 taps or more: 8x8 tiles, adaptive 64 -> 7's
kernel 10, stride 9), the pure-NumPy path: one fold per spatial axis that keeps, beside
the running maximum, the tap of each window's winner.

The first axis folds first, over rows that merge the last spatial axis with the
channels (long contiguous passes), the last axis at the end, each on the output of the
one before. Each element of a fold's output carries ``key``: its winner's tap within the
window, row-major over the axes folded so far. Along an axis, a later tap takes over
when it is larger, or equal with a smaller key (PyTorch's first maximum in row-major
order: the earlier axes decide first), so ties need no other path::

    better = v > best | (v == best & key_v < key_best)     (the first axis: v > best)
    best = max(best, v);  key_best = key_v where better;  tap = the last tap better
    key = key_best * kernel + tap

The last tap that was better is the largest such tap: one ``np.maximum`` with
``better * k`` (a masked copy of k is many times slower). The final key is the winner's
tap number over the whole window, as the GPU path's ``tap``: the caller turns it into
PyTorch's indices and adds dy there. A window holding a NaN (whose winner is its last
NaN) is left to the caller: :func:`max_forward` gives no taps then.
"""

from __future__ import annotations

import math

import numpy as np

from ._blocks import merged_last

MIN_TAPS = 25  # measured: 5x5 windows and larger gain, 4x4 and smaller lose to the others


def applies(axes) -> bool:
    """Whether the windows read no padding and hold at least ``MIN_TAPS`` taps."""
    return all(a.pad_before == 0 and a.pad_after <= 0 for a in axes) and \
        math.prod(a.kernel for a in axes) >= MIN_TAPS


def _taps(a, axis, window):
    """The strided views of ``a`` along ``axis`` that each tap of ``window`` reads."""
    lead = (slice(None),) * axis
    return [a[(*lead, window.tap_slice(k))] for k in range(window.kernel)]


def max_forward(x, axes):
    """(y (N, *O, C), tap): the maximum of each window and its winner's tap number,
    row-major over the window (small unsigned ints), or tap None where y holds a NaN."""
    spatial, channels = x.shape[1:-1], x.shape[-1]
    key_dtype = np.min_scalar_type(math.prod(a.kernel for a in axes) - 1)
    z, key = merged_last(x), None
    for i, window in enumerate(axes):
        if i == len(axes) - 1:  # the last axis apart from the channels again
            z = z.reshape(*z.shape[:-1], spatial[-1], channels)
            key = None if key is None else key.reshape(z.shape)
        z, key = _fold(z, None if key is None else _taps(key, i + 1, window), i + 1, window,
                       key_dtype)
    return z, None if bool(np.isnan(z).any()) else key


def _fold(z, keys, axis, window, key_dtype):
    """The maximum of z over ``window``'s taps along ``axis`` and its key: ``keys`` (the
    key of each tap's values, None on the first axis) extended by the winning tap."""
    values = _taps(z, axis, window)
    best = values[0].copy()
    tap = np.zeros(best.shape, dtype=key_dtype)
    key = None if keys is None else keys[0].copy()
    for k in range(1, window.kernel):
        better = values[k] > best
        if key is not None:
            better |= (values[k] == best) & (keys[k] < key)
            key += better * (keys[k] - key)  # keys[k] where better (unsigned: wraps back)
        np.maximum(best, values[k], out=best)
        np.maximum(tap, better * key_dtype.type(k), out=tap)
    return best, tap if key is None else key * key_dtype.type(window.kernel) + tap
