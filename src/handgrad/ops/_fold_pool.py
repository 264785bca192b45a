"""Max pooling of large unpadded windows (25 taps or more: 8x8 tiles, adaptive 64 -> 7's
kernel 10, stride 9), the pure-NumPy path: one pass per spatial axis that keeps, beside
the maximum, the tap of each window's winner.

The first axis goes first, over rows that merge the later spatial axes with the
channels (long contiguous rows), the last axis at the end, each on the output of the
one before. An axis's windows are a read-only strided view (P, O, K, R) of its input
(:func:`axis_windows`: overlapping windows share memory). Each element of an axis's output
carries ``key``: its winner's tap within the window, row-major over the axes done so
far. The winner is the tap, among those equal to the maximum, with the smallest key
(PyTorch's first maximum in row-major order: the earlier axes decide first), so ties
need no other path::

    best = max_k v_k;    key = min over k with v_k == best of (key_k * kernel + k)
                              = top - max_k [v_k == best] * (top - key_k * kernel - k)

(the first axis: key_k = 0; top: the window's tap count, above every key). Rows of
``LONG_ROWS`` values or more take both as reductions over K (:func:`_reduce_axis`: the
loop keeps a row of R results in the L1 cache while it folds in the window's rows; a
product of small unsigned ints and ``np.maximum.reduce``, where ``np.where`` was 20x
slower, its branch mispredicted on the random marks); shorter rows (the last axis: R =
C) fold tap by tap (:func:`_fold_axis`), where a reduction's inner loop would run over
too few values. The final key is the winner's tap number over the whole window, as the
GPU path's ``tap``: the caller turns it into PyTorch's indices and adds dy there. A
window holding a NaN (whose winner is its last NaN) is left to the caller:
:func:`max_forward` gives no taps then. Forward + backward beside torch, in random
order over 61 rounds, against a fold of tap after tap on every axis: adaptive max 64 ->
8 of (8, 64, 64, 32) float32 1.47-1.55 -> 1.29-1.36 ms, 64 -> 7 1.46-1.63 -> 1.22-1.52,
max pool 5x5 1.28-1.46 -> 1.20-1.29 (float64 and 1-D windows within the noise).
"""

from __future__ import annotations

import math

import numpy as np

MIN_TAPS = 25  # measured: 5x5 windows and larger gain, 4x4 and smaller lose to the others
LONG_ROWS = 256  # values per row from which an axis reduces (shorter: tap by tap)


def unpadded(axes) -> bool:
    """Whether no window reads padding (trailing inputs may go unread): the windows that
    :func:`axis_windows` views."""
    return all(a.pad_before == 0 and a.pad_after <= 0 for a in axes)


def applies(axes) -> bool:
    """Whether the windows read no padding and hold at least ``MIN_TAPS`` taps."""
    return unpadded(axes) and math.prod(a.kernel for a in axes) >= MIN_TAPS


def later_values(axes, i, channels):
    """R of spatial axis i: the positions of the later axes times the channels."""
    return math.prod(a.size_in for a in axes[i + 1:]) * channels


def axis_windows(a, window, later):
    """a (P * S, ...) as (P, O, K, R): the windows of ``window`` (a ``WindowAxis`` that
    reads no padding) along its axis, R = ``later`` (the positions of the later axes
    times the channels); a read-only strided view, overlapping windows share memory."""
    rows = a.reshape(-1, window.size_in, later)
    row, position, element = rows.strides
    return np.lib.stride_tricks.as_strided(
        rows, shape=(rows.shape[0], window.size_out, window.kernel, later),
        strides=(row, window.stride * position, window.dilation * position, element),
        writeable=False)


def max_forward(x, axes):
    """(y (N, *O, C), tap): the maximum of each window and its winner's tap number,
    row-major over the window (small unsigned ints), or tap None where y holds a NaN."""
    taps_in_window = math.prod(a.kernel for a in axes)
    key_dtype = np.min_scalar_type(taps_in_window)
    top = key_dtype.type(taps_in_window)  # above every key
    z, key = x, None
    for i, window in enumerate(axes):
        later = later_values(axes, i, x.shape[-1])
        values = axis_windows(z, window, later)
        keys = None if key is None else axis_windows(key, window, later)
        reduce = _reduce_axis if later >= LONG_ROWS else _fold_axis
        z, key = reduce(values, keys, top)
    y = z.reshape(x.shape[0], *(a.size_out for a in axes), x.shape[-1])
    return y, None if bool(np.isnan(y).any()) else key.reshape(y.shape)


def _scores(keys, kernel, top, tap):
    """top - (key * kernel + tap): a tap's score, larger for an earlier winner (> 0)."""
    if keys is None:
        return top - tap
    return top - tap - keys * top.dtype.type(kernel)


def _reduce_axis(values, keys, top):
    """(best, key) over the windows (P, O, K, R) by two reductions over K."""
    kernel = values.shape[2]
    best = np.maximum.reduce(values, axis=2)
    taps = np.arange(kernel, dtype=top.dtype).reshape(1, 1, -1, 1)
    marks = (values == best[:, :, None]).view(np.uint8)
    return best, top - np.maximum.reduce(marks * _scores(keys, kernel, top, taps), axis=2)


def _fold_axis(values, keys, top):
    """(best, key) over the windows (P, O, K, R) tap by tap: rows of R values are too
    short for a reduction's inner loop."""
    kernel = values.shape[2]
    best = values[:, :, 0].copy()
    if keys is None:  # one pass: the last tap above the running maximum is the first maximum
        tap = np.zeros(best.shape, dtype=top.dtype)
        for k in range(1, kernel):
            above = (values[:, :, k] > best).view(np.uint8)
            np.maximum(best, values[:, :, k], out=best)
            np.maximum(tap, above * top.dtype.type(k), out=tap)
        return best, tap
    for k in range(1, kernel):
        np.maximum(best, values[:, :, k], out=best)
    score = np.zeros(best.shape, dtype=top.dtype)
    for k in range(kernel):
        marks = (values[:, :, k] == best).view(np.uint8)
        np.maximum(score, marks * _scores(keys[:, :, k], kernel, top, top.dtype.type(k)),
                   out=score)
    return best, top - score
