"""Two-tap resampling of one axis at an integer upscale, the pure-NumPy pass over long rows.

An axis n -> m = k n of linear taps (index (2, m), weights (w0, w1)) reads, for each phase
r < k, output ``o = r + k j`` from ``x[j + d_r]`` and ``x[j + d_r + 1]`` on one run
``lo_r <= j < hi_r``; the few positions outside the runs (the clamped borders) are the
``border``. With x viewed as (A, n, B) (B: the later axes and the channels, the last
spatial axis merged with them), the taps of a run are two slices of x: a shift by one
position is a shift by B elements, so each product runs over long contiguous rows::

    y[:, r + k j] = w0[o] x[:, j + d_r] + w1[o] x[:, j + d_r + 1]          (j in the run)
    dx[:, j + d_r] += w0[o] dy[:, o],   dx[:, j + d_r + 1] += w1[o] dy[:, o]

(the backward, the transposed map). Only the write of a phase into the output (forward)
or the read of a phase of dy (backward) is strided, in runs of B values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PhasePlan:
    """k, the runs ``(r, lo, hi, d, w0, w1)`` (weights per j of the run, a scalar where
    constant) and the border taps ``(o, i0, i1, w0, w1)`` (arrays)."""

    k: int
    runs: tuple
    border: tuple


def _weight(w):
    return w[0] if w.size and (w == w[0]).all() else w


def phase_plan(index, weight, n):
    """The :class:`PhasePlan` of an axis n -> m with 2 taps when k = m / n is an integer
    and each phase's taps are adjacent positions affine in j on one run, else None."""
    if index.shape[0] != 2 or weight is None or n < 2 or index.shape[1] % n:
        return None
    k = index.shape[1] // n
    runs, outside = [], []
    j = np.arange(n)
    for r in range(k):
        i0, i1 = index[0, r::k], index[1, r::k]
        d = i0 - j
        ok = (i1 == i0 + 1) & (d == d[n // 2])
        lo, hi = int(ok.argmax()), n - int(ok[::-1].argmax())
        if not ok[lo:hi].all():
            return None
        w = weight[:, r::k][:, lo:hi]
        runs.append((r, lo, hi, int(d[n // 2]), _weight(w[0]), _weight(w[1])))
        outside.append(r + k * np.r_[0:lo, hi:n])
    o = np.concatenate(outside).astype(np.int64)
    return PhasePlan(k, tuple(runs), (o, index[0, o], index[1, o], weight[0, o], weight[1, o]))


def _row(xp, w, b):
    """A weight per j spread over the B values of each position, (j, B), so that it
    multiplies (A, j, B) in rows of j B values (a scalar stays a scalar)."""
    return w if np.ndim(w) == 0 else xp.asarray(np.repeat(w, b).reshape(-1, b))


def forward(xp, x, axis, plan):
    """y: x resampled along ``axis`` (neither the first nor the last) by ``plan``."""
    x = xp.ascontiguousarray(x)
    shape = list(x.shape)
    n, b = shape[axis], int(np.prod(shape[axis + 1:]))
    x3 = x.reshape(-1, n, b)
    shape[axis] = n * plan.k
    y = xp.empty(shape, dtype=x.dtype)
    y4 = y.reshape(x3.shape[0], n, plan.k, b)
    first, second = (xp.empty((x3.shape[0], n, b), dtype=x.dtype) for _ in range(2))
    for r, lo, hi, d, w0, w1 in plan.runs:  # two scratch rows reused: no fresh temporaries
        xp.multiply(x3[:, lo + d:hi + d], _row(xp, w0, b), out=first[:, :hi - lo])
        xp.multiply(x3[:, lo + d + 1:hi + d + 1], _row(xp, w1, b), out=second[:, :hi - lo])
        xp.add(first[:, :hi - lo], second[:, :hi - lo], out=y4[:, lo:hi, r])
    o, i0, i1, w0, w1 = plan.border
    if o.size:
        y3 = y.reshape(x3.shape[0], n * plan.k, b)
        i0, i1, w0, w1 = (xp.asarray(a) for a in (i0, i1, w0[:, None], w1[:, None]))
        y3[:, xp.asarray(o)] = x3[:, i0] * w0 + x3[:, i1] * w1
    return y


def backward(xp, dy, axis, plan, n):
    """dx (n positions along ``axis``): dy mapped through the transpose of ``plan``."""
    dy = xp.ascontiguousarray(dy)
    shape = list(dy.shape)
    b = int(np.prod(shape[axis + 1:]))
    dy4 = dy.reshape(-1, n, plan.k, b)
    shape[axis] = n
    dx = xp.zeros(shape, dtype=dy.dtype)
    dx3 = dx.reshape(dy4.shape[0], n, b)
    term = xp.empty(dx3.shape, dtype=dy.dtype)
    for r, lo, hi, d, w0, w1 in plan.runs:
        for t, w in ((d, w0), (d + 1, w1)):
            part = xp.multiply(dy4[:, lo:hi, r], _row(xp, w, b), out=term[:, :hi - lo])
            dx3[:, lo + t:hi + t] += part
    dy3 = dy.reshape(dy4.shape[0], n * plan.k, b)
    for o, i0, i1, w0, w1 in zip(*plan.border):  # a few positions, repeats added in turn
        dx3[:, i0] += w0 * dy3[:, o]
        dx3[:, i1] += w1 * dy3[:, o]
    return dx
