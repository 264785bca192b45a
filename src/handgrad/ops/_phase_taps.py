"""Linear resampling of one axis at an integer upscale, the pure-NumPy passes over long rows.

An axis n -> m = k n of linear taps (index (2, m), weights (w0, w1)) reads, for each phase
r < k, output ``o = r + k j`` from ``x[j + d_r]`` and ``x[j + d_r + 1]`` on one run
``lo_r <= j < hi_r``; the few positions outside the runs (the clamped borders) are the
``border``. With x viewed as (A, n, B) (B: the later axes and the channels, the last
spatial axis merged with them), the taps of a run are two slices of x: a shift by one
position is a shift by B elements, so each product runs over long contiguous rows::

    y[:, r + k j] = w0[o] x[:, j + d_r] + w1[o] x[:, j + d_r + 1]          (j in the run)

Where a phase's weight is the same over its run (half-pixel sources: 1/4 and 3/4 at k =
2), each distinct weight multiplies x once and the phases only add those products: the
same products and sums as phase by phase, so the same result.

The backward is the transposed map's taps (``AxisMap.transposed``, index (K, n)): input
``i`` of a run gathers ``dy[k i + e_t]`` for fixed offsets ``e_t``, strided slices of dy::

    dx[:, i] = sum_t W_t[i] dy[:, k i + e_t]

and taps of one constant weight are summed before the one multiply (1/4 and 3/4 again:
``dx = 3/4 (dy[2i] + dy[2i+1]) + 1/4 (dy[2i-1] + dy[2i+2])``). Taps of weight 0 (the
transposed map's padding, a clamped border tap) read nothing. Only the write of a phase
into the output (forward) or the read of a phase of dy (backward) is strided, in runs of
B values. Both passes write into ``out`` when given (a block of the caller's result).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ._blocks import sum_into


@dataclass(frozen=True, eq=False)
class PhasePlan:
    """k, the runs ``(r, lo, hi, d, w0, w1)`` (a scalar weight where constant over the
    run, else weights per position of x, see :func:`_spread`) and the border taps
    ``(o, i0, i1, w0, w1)`` (arrays) of the forward; the backward's run of inputs
    ``back_run = (lo, hi)``, its ``groups`` ``(w, offsets)`` (the offsets e_t of the taps
    of one constant weight w, or of one tap with weights per i) and its border inputs
    ``(i, index (K, .), weight (K, .))``."""

    k: int
    runs: tuple
    border: tuple
    back_run: tuple
    groups: tuple
    back_border: tuple


def _weight(w):
    return w[0] if w.size and (w == w[0]).all() else w


def _spread(w, start, n):
    """A run's weights of taps reading ``x[start:start + len(w)]``: a scalar where
    constant, else one weight per position of x (the edge weights repeated outside the
    run), so the product is one pass over x."""
    w = _weight(w)
    return w if np.ndim(w) == 0 else np.pad(w, (start, n - start - w.size), mode="edge")


def one_run(ok):
    """(lo, hi): the one run of True positions of the 1-D ``ok`` (those outside it are the
    borders), or None where there is no such single run."""
    lo, hi = int(ok.argmax()), ok.size - int(ok[::-1].argmax())
    return (lo, hi) if ok[lo:hi].all() else None


def _forward_runs(index, weight, n, k):
    """The forward's runs and border taps (see :class:`PhasePlan`), or None."""
    runs, outside = [], []
    j = np.arange(n)
    for r in range(k):
        i0, i1 = index[0, r::k], index[1, r::k]
        d = i0 - j
        run = one_run((i1 == i0 + 1) & (d == d[n // 2]))
        if run is None:
            return None
        lo, hi = run
        w = weight[:, r::k][:, lo:hi]
        start = lo + int(d[n // 2])
        runs.append((r, lo, hi, start - lo, _spread(w[0], start, n), _spread(w[1], start + 1, n)))
        outside.append(r + k * np.r_[0:lo, hi:n])
    o = np.concatenate(outside).astype(np.int64)
    return tuple(runs), (o, index[0, o], index[1, o], weight[0, o], weight[1, o])


def _backward_runs(index, weight, n, k):
    """The backward's run, groups and border (see :class:`PhasePlan`) of the transposed
    taps ``index, weight`` (K, n), or None where they are not ``k i + e_t`` on one run."""
    if weight is None:
        return None
    offsets = index - k * np.arange(n)
    run = one_run((offsets == offsets[:, n // 2, None]).all(axis=0))
    if run is None:
        return None
    lo, hi = run
    constant, varying = {}, []
    for e, w in zip(offsets[:, n // 2].tolist(), weight[:, lo:hi]):
        w = _weight(w)
        if np.ndim(w):
            varying.append((w, (e,)))
        elif w != 0:  # a tap of weight 0 reads nothing
            constant.setdefault(w, []).append(e)
    groups = tuple((w, tuple(es)) for w, es in constant.items()) + tuple(varying)
    i = np.r_[0:lo, hi:n]
    return (lo, hi), groups, (i, index[:, i], weight[:, i])


def phase_plan(index, weight, n, transposed):
    """The :class:`PhasePlan` of an axis n -> m with 2 taps (``transposed``: the taps of
    its transposed map) when k = m / n is an integer, each phase's taps are adjacent
    positions affine in j on one run and the transposed taps affine on one run, else None."""
    if index.shape[0] != 2 or weight is None or n < 2 or index.shape[1] % n:
        return None
    k = index.shape[1] // n
    forward = _forward_runs(index, weight, n, k)
    backward = _backward_runs(*transposed, n, k) if forward is not None else None
    return None if backward is None else PhasePlan(k, *forward, *backward)


@functools.lru_cache(maxsize=64)
def _rows(weights, dtype, b):
    """Weights per position (their bytes) spread over the B values of each, (j, B)."""
    rows = np.repeat(np.frombuffer(weights, dtype=dtype), b).reshape(-1, b)
    rows.flags.writeable = False
    return rows


SPREAD_BELOW = 32
"""Weights per position are spread over rows of B values where B is below this (NumPy's
inner loop then runs over whole rows of j B values); from it on they broadcast as a
column (j, 1), which saves reading a weight array the size of an image. Align-corners
x2 of (4, 32, 32, C), one axis, forward / backward ms, spread against broadcast: C = 8
float32 0.19 / 0.27 against 0.22 / 0.25; C = 32 float64 1.12 / 1.45 against 0.82 / 0.95;
C = 128 float32 2.79 / 3.33 against 2.11 / 2.28. Bilinear x2 of (8, 32, 32, 32)
forward + backward, interleaved with torch (whose times were 1.46 / 2.32 ms): align
float32 4.14 -> 3.76, float64 7.69 -> 7.33 ms; trilinear align (2, 8, 8, 8, 32) float64
2.77 -> 2.01 ms."""


def _row(xp, w, b):
    """``w`` as a factor of (A, j, B): a scalar stays a scalar, weights per j become a
    column (j, 1), or rows of j B values (kept per weights and B) where B is short."""
    if np.ndim(w) == 0:
        return w
    if b >= SPREAD_BELOW:
        return xp.asarray(w).reshape(-1, 1)
    return xp.asarray(_rows(w.tobytes(), w.dtype.str, b))


def _shape(a, axis):
    """``(A, n, B)`` of ``a`` viewed around ``axis``."""
    b = 1
    for size in a.shape[axis + 1:]:
        b *= size
    return a.size // (a.shape[axis] * b) if a.size else 0, a.shape[axis], b


def forward(xp, x, axis, plan, out=None):
    """y: x resampled along ``axis`` (neither the first nor the last) by ``plan``."""
    x = xp.ascontiguousarray(x)
    a, n, b = _shape(x, axis)
    x3 = x.reshape(a, n, b)
    shape = list(x.shape)
    shape[axis] = n * plan.k
    y = xp.empty(shape, dtype=x.dtype) if out is None else out
    y4 = y.reshape(a, n, plan.k, b)
    products, scratch = {}, None
    for r, lo, hi, d, w0, w1 in plan.runs:
        terms = []
        for t, (start, w) in enumerate(((lo + d, w0), (lo + d + 1, w1))):
            if np.ndim(w) == 0:  # one product of x per distinct weight, shared by phases
                if w not in products:
                    products[w] = xp.multiply(x3, w)
                product = products[w]
            else:  # weights per position of x: the whole of x, in one contiguous pass
                if scratch is None:
                    scratch = xp.empty((2, a, n, b), dtype=x.dtype)
                product = xp.multiply(x3, _row(xp, w, b), out=scratch[t])
            terms.append(product[:, start:start + hi - lo])
        xp.add(terms[0], terms[1], out=y4[:, lo:hi, r])
    y3 = y.reshape(a, n * plan.k, b)
    for o, i0, i1, w0, w1 in zip(*plan.border):  # a few positions
        xp.add(xp.multiply(x3[:, i0], w0), xp.multiply(x3[:, i1], w1), out=y3[:, o])
    return y


def backward(xp, dy, axis, plan, n, out=None):
    """dx (n positions along ``axis``): dy mapped through the transposed taps of ``plan``."""
    dy = xp.ascontiguousarray(dy)
    a, m, b = _shape(dy, axis)
    dy3 = dy.reshape(a, m, b)
    shape = list(dy.shape)
    shape[axis] = n
    dx = xp.empty(shape, dtype=dy.dtype) if out is None else out
    dx3 = dx.reshape(a, n, b)
    (lo, hi), k = plan.back_run, plan.k
    run, part = dx3[:, lo:hi], None
    for g, (w, offsets) in enumerate(plan.groups):
        views = [dy3[:, k * lo + e:k * (hi - 1) + e + 1:k] for e in offsets]
        if g and part is None:
            part = xp.empty((a, hi - lo, b), dtype=dy.dtype)
        target = part if g else run
        if len(views) > 1:  # the taps of one weight summed first
            views = [sum_into(xp, views, target)]
        xp.multiply(views[0], _row(xp, w, b), out=target)
        if g:
            xp.add(run, part, out=run)
    if not plan.groups:
        run[...] = 0
    inputs, index, weight = plan.back_border
    for i, reads, weights in zip(inputs.tolist(), index.T.tolist(), weight.T.tolist()):
        taps = [(o, w) for o, w in zip(reads, weights) if w != 0]
        if not taps:
            dx3[:, i] = 0
        for t, (o, w) in enumerate(taps):
            w = dx.dtype.type(w)
            if t:
                xp.add(dx3[:, i], xp.multiply(dy3[:, o], w), out=dx3[:, i])
            else:
                xp.multiply(dy3[:, o], w, out=dx3[:, i])
    return dx
