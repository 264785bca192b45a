"""Pooling's kernel taps clipped to the unpadded input, and max pooling's winners.

A tap ``k`` of output ``o`` reads input ``o * stride + k * dilation - pad_before``
along each axis. :func:`clipped_taps` gives, per tap, the strided slice of the
*unpadded* input it reads and the slice of outputs that read it, so no kernel pads
or crops a copy of the data: a padding position simply is never read (max pooling's
-inf and average pooling's 0 change nothing) nor written. :func:`fold_taps` folds them
into a pooling's output (a running maximum or sum).

The winner of a max pooling window is its first maximum in row-major tap order, or
its last NaN when it holds one (PyTorch's scan ``val > max or isnan(val)``).
:func:`max_pool_winners` yields one boolean mask per tap; every window is marked by
exactly one tap. :func:`max_pool_indices` turns them into PyTorch's indices.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from .._checks import array_module


def _axis_taps(axis):
    """Per tap k of one axis: (k, input slice, output slice), or None where every output
    reads the padding at that tap."""
    out = []
    for k in range(axis.kernel):
        offset = k * axis.dilation - axis.pad_before
        first = max(0, -(offset // axis.stride))  # ceil(-offset / stride), at least 0
        last = min(axis.size_out - 1, (axis.size_in - 1 - offset) // axis.stride)
        if first > last:
            out.append(None)
            continue
        start = first * axis.stride + offset
        out.append((k, slice(start, last * axis.stride + offset + 1, axis.stride),
                    slice(first, last + 1)))
    return out


def clipped_taps(axes):
    """Yield ``(offsets, inputs, outputs)`` for every kernel tap in row-major order that
    reads the unpadded input somewhere: the tap's offsets ``k`` per axis, and the
    leading-axis index tuples (batch axis included) of the input positions it reads and
    of the outputs that read them (both of one shape)."""
    for combo in itertools.product(*(_axis_taps(a) for a in axes)):
        if None in combo:
            continue
        yield (tuple(c[0] for c in combo), (slice(None), *(c[1] for c in combo)),
               (slice(None), *(c[2] for c in combo)))


def fold_taps(x, axes, combine, fill):
    """The taps' windows of the unpadded input folded into y (N, *O, C): a copy of the
    first tap that every output reads (else ``fill``), then ``combine(y, values, out=y)``
    with each other tap (xp.maximum, xp.add) on the outputs that read it."""
    xp = array_module(x)
    shape = (x.shape[0], *(a.size_out for a in axes), x.shape[-1])
    taps = list(clipped_taps(axes))
    order, outputs = [x[inputs] for _, inputs, _ in taps], [out for _, _, out in taps]
    first = next((i for i, values in enumerate(order) if values.shape == shape), None)
    y = xp.full(shape, fill, dtype=x.dtype) if first is None else order[first].copy()
    for i, (values, out) in enumerate(zip(order, outputs)):
        if i != first:
            combine(y[out], values, out=y[out])
    return y


def covers_once(axes) -> bool:
    """Whether the windows tile the input: every input position is read by exactly one
    (output, tap) pair (stride = kernel, no dilation gaps, no unread trailing input)."""
    return all(a.stride == a.kernel and (a.dilation == 1 or a.kernel == 1)
               and a.pad_after >= 0 for a in axes)


def overlapping(axes) -> bool:
    """Whether some input position is read by two (output, tap) pairs."""
    return any(a.stride < (a.kernel - 1) * a.dilation + 1 for a in axes)


def nan_windows(y):
    """The boolean mask of the outputs that are NaN, or None where there is none."""
    xp = array_module(y)
    nan = xp.isnan(y)
    return nan if bool(nan.any()) else None


def max_pool_winners(x, y, axes, nan=None):
    """Yield ``(offsets, inputs, outputs, mask)`` per tap (see :func:`clipped_taps`):
    ``mask`` (bool, the shape of ``y[outputs]``) marks the windows whose winner this tap
    reads. ``nan`` is :func:`nan_windows` of ``y``; its windows come last, their taps in
    reverse order (the last NaN wins)."""
    xp = array_module(x)
    order = list(clipped_taps(axes))
    pending = None  # windows whose winner is still to be found
    for i, (offsets, inputs, outputs) in enumerate(order):
        mask = xp.equal(x[inputs], y[outputs])  # a NaN maximum equals nothing
        if pending is None and mask.shape == y.shape:
            pending = ~mask
        else:
            if pending is None:
                pending = xp.ones(y.shape, dtype=bool)
            mask &= pending[outputs]
            if i < len(order) - 1:
                pending[outputs] ^= mask
        yield offsets, inputs, outputs, mask
    if nan is None:
        return
    pending = nan
    for offsets, inputs, outputs in order[::-1]:
        mask = xp.isnan(x[inputs])
        mask &= pending[outputs]
        pending[outputs] ^= mask
        yield offsets, inputs, outputs, mask


def max_pool_indices(x, y, axes, flat=False):
    """int64 (N, *O, C) indices of the max pooling ``y`` of x (N, *S, C) over ``axes``:
    the winner's flat position in its (n, c) spatial plane of the unpadded input, or
    with ``flat`` its position in the whole of x (for a scatter into x.ravel()).

    Each window's winning tap number is gathered first (small ints), then turned into
    indices by :func:`tap_indices`."""
    xp = array_module(x)
    kernel = [a.kernel for a in axes]
    kind = np.min_scalar_type(math.prod(kernel))
    tap = xp.zeros(y.shape, dtype=kind)
    for offsets, _, outputs, mask in max_pool_winners(x, y, axes, nan_windows(y)):
        number = int(np.ravel_multi_index(offsets, kernel))
        if number:
            tap[outputs] += mask * kind.type(number)
    return tap_indices(tap, axes, x.shape, flat)


def tap_indices(tap, axes, x_shape, flat=False):
    """int64 indices (N, *O, C) of the inputs that each window's tap number ``tap``
    (row-major over the window) reads, as :func:`max_pool_indices` gives them:
    ``shift(tap) + start(o)`` by one table lookup and broadcast adds."""
    xp = array_module(tap)
    scale = x_shape[-1] if flat else 1
    weights = [math.prod(a.size_in for a in axes[i + 1:]) * scale for i in range(len(axes))]
    shifts = np.zeros((), dtype=np.int64)  # per tap, row-major: outer sums, axis by axis
    for a, weight in zip(axes, weights):
        shifts = np.add.outer(shifts, np.arange(a.kernel, dtype=np.int64) * (a.dilation * weight))
    shifts = shifts.reshape(-1)
    start = xp.zeros((1, *tap.shape[1:-1], tap.shape[-1] if flat else 1), dtype=np.int64)
    for i, (a, weight) in enumerate(zip(axes, weights)):
        shape = [1] * tap.ndim
        shape[i + 1] = a.size_out
        start += ((xp.arange(a.size_out, dtype=np.int64) * a.stride - a.pad_before)
                  * weight).reshape(shape)
    index = xp.asarray(shifts)[tap]
    if flat:
        start += xp.arange(scale, dtype=np.int64)
        plane = math.prod(x_shape[1:])
        index += (xp.arange(x_shape[0], dtype=np.int64) * plane).reshape(
            x_shape[0], *(1,) * (tap.ndim - 1))
    index += start
    return index


def running_max(best, index, values, at, xp):
    """Fold one tap's ``values`` (read at flat positions ``at``) into a running maximum and
    its index: PyTorch's rule, a later tap wins when it is larger or NaN. ``best`` None
    starts the fold."""
    if best is None:
        return values, xp.broadcast_to(at, values.shape).astype(np.int64)
    wins = (values > best) | xp.isnan(values)
    return xp.where(wins, values, best), xp.where(wins, at, index)
