"""Interpolation (``F.interpolate``), channels-last, separable: one set of taps per axis.

Each spatial axis of size ``n`` resized to ``m`` is a linear map with a few taps per
output position ``o`` (indices ``i_t[o]``, weights ``w_t[o]``)::

    y[.., o, ..] = sum_t w_t[o] * x[.., i_t[o], ..]          (applied axis after axis)
    dx[.., i, ..] = sum_o M[o, i] * dy[.., o, ..],   M[o, i] = sum_t w_t[o] [i_t[o] = i]

so the backward is the transposed maps, applied in reverse order, each as taps too: input
``i`` gathers the run of outputs that read it (every mode's index is nondecreasing in ``o``),
weighted by the small dense ``M``'s column ``i``. On the NumPy path a weighted axis is
a banded matrix product (:mod:`._band_matmul`), an unweighted one (nearest) copies and
gathers.

The taps follow torch's CPU kernels exactly, in the input's precision:

- nearest: ``i = min(floor(o * s), n - 1)`` (float32 ``s``); nearest-exact:
  ``i = min(floor((o + 0.5) * s), n - 1)``;
- linear: source ``x = s * o`` (align_corners: ``s = (n-1)/(m-1)``) or
  ``max(s * (o + 0.5) - 0.5, 0)``; taps ``floor(x)`` and the next one (clamped), weights
  ``1 - f``, ``f``;
- cubic: the same source without the clamp at 0, four taps ``floor(x) - 1 .. + 2``
  clamped to the border, Keys' weights with A = -0.75;
- area: adaptive average pooling, window ``[floor(o n / m), ceil((o + 1) n / m))``.

``s`` is ``1 / scale_factor`` when a scale factor was given (and not recomputed), else
``n / m``. As torch, linear modes copy the input when every output size equals its input
size, and 2-D nearest takes ``i = o`` (m = n) or ``o // 2`` (m = 2n) per axis, whatever
the scale factor. The backward is always the derivative of this forward; torch's is not
in two corners: its bicubic backward copies ``dy`` when the sizes are equal, and its 1-D
and 3-D nearest backward takes the 2-D rule above.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from functools import partial

import numpy as np

from .._checks import array_module, upstream_grad
from ._args.cache import Cache, check_cache
from ._args.resample import prepare_interpolate
from ._axis_map import AxisMap, read_only
from ._band_matmul import band_pass, finite
from ._blocks import sum_into
from ._engine import taps as compiled
from ._repeat import repeat, repeat_sum
from ._resample_blocks import run_passes
from .declare import declare, exports

CUBIC_A = -0.75


def _float32_scale(n, m, scale):
    """torch's ``compute_scales_value<float>``: 1/scale or n/m, in float32."""
    return np.float32(1.0 / scale) if scale else np.float32(n) / np.float32(m)


def _nearest_taps(n, m, scale, exact, shortcut):
    o = np.arange(m)
    if shortcut and m in (n, 2 * n):  # torch's 2-D nearest: a copy or o // 2, whatever s
        return (o * n // m)[None], None
    s = _float32_scale(n, m, scale)
    if exact:
        src = ((o + 0.5) * np.float64(s)).astype(np.float32)
    else:
        src = o.astype(np.float32) * s
    return np.minimum(np.floor(src).astype(np.int64), n - 1)[None], None


def _source(n, m, scale, align_corners, dtype, cubic):
    """torch's ``area_pixel_compute_source_index`` for every output position, in ``dtype``."""
    o = np.arange(m, dtype=dtype)
    if align_corners:
        s = dtype(n - 1) / dtype(m - 1) if m > 1 else dtype(0)
        return s * o
    s = dtype(1.0 / scale) if scale else dtype(n) / dtype(m)
    src = s * (o + dtype(0.5)) - dtype(0.5)
    return src if cubic else np.maximum(src, dtype(0))


def _linear_taps(n, m, scale, align_corners, dtype):
    src = _source(n, m, scale, align_corners, dtype, cubic=False)
    i0 = np.minimum(src.astype(np.int64), n - 1)
    i1 = i0 + (i0 < n - 1)
    f = np.clip(src - i0.astype(dtype), 0, 1).astype(dtype)
    return np.stack([i0, i1]), np.stack([dtype(1) - f, f])


def cubic_weights(t, a=CUBIC_A):
    """Keys' cubic convolution weights of the taps -1, 0, 1, 2 at fraction ``t``."""
    one = t.dtype.type(1)

    def near(z):  # |z| <= 1
        return ((a + 2) * z - (a + 3)) * z * z + one

    def far(z):  # 1 < |z| < 2
        return ((a * z - 5 * a) * z + 8 * a) * z - 4 * a

    return np.stack([far(t + one), near(t), near(one - t), far(one - t + one)]).astype(t.dtype)


def _cubic_taps(n, m, scale, align_corners, dtype):
    src = _source(n, m, scale, align_corners, dtype, cubic=True)
    i = np.minimum(np.floor(src).astype(np.int64), n - 1)
    t = np.clip(src - i.astype(dtype), 0, 1).astype(dtype)
    index = np.clip(i[None] + np.arange(-1, 3)[:, None], 0, n - 1)
    return index, cubic_weights(t)


def _area_taps(n, m, dtype):
    o = np.arange(m)
    start, end = (o * n) // m, ((o + 1) * n + m - 1) // m
    k = np.arange(int((end - start).max()))[:, None]
    inside = start + k < end
    weight = np.where(inside, 1 / (end - start).astype(dtype), 0).astype(dtype)
    return np.minimum(start + k, end - 1), weight


def axis_taps(mode, n, m, scale, align_corners, dtype, rank):
    """``(index (T, m), weight (T, m) or None for weight 1)`` of one axis resized n -> m
    (of ``rank`` spatial axes)."""
    dtype = np.dtype(dtype).type
    if mode in ("nearest", "nearest-exact"):
        return _nearest_taps(n, m, scale, mode == "nearest-exact", rank == 2)
    if mode == "area":
        return _area_taps(n, m, dtype)
    if mode == "bicubic":
        return _cubic_taps(n, m, scale, align_corners, dtype)
    return _linear_taps(n, m, scale, align_corners, dtype)


@functools.lru_cache(maxsize=64)
def axis_map(mode, n, m, scale, align_corners, dtype, rank):
    """The :class:`AxisMap` of :func:`axis_taps` (the same arguments), kept per geometry;
    mode "copy": the identity of linear modes at equal sizes (torch's copy)."""
    if mode == "copy":
        return AxisMap(*read_only(np.arange(n)[None], None), n, np.dtype(dtype))
    taps = axis_taps(mode, n, m, scale, align_corners, dtype, rank)
    return AxisMap(*read_only(*taps), n, np.dtype(dtype))


@dataclass(frozen=True)
class ResampleCache(Cache):
    """The input's shape and dtype, and each axis's :class:`AxisMap`."""

    x_shape: tuple
    dtype: object
    maps: tuple

    @property
    def y_shape(self):
        return (self.x_shape[0], *(a.m for a in self.maps), self.x_shape[-1])


SLAB = 4096
"""Above this many values per position, the sums of an unweighted axis (nearest's
backward) run position by position (one output array, no full-size temporaries); below
it, by whole-array gathers."""


def _gathered(xp, x, axis, index, weight):
    """sum_t weight[t] * x.take(index[t], axis), whole arrays at a time; a tap of weight
    0 adds nothing (not 0 * x: a NaN or inf reaches only the outputs that read it)."""
    shape = [1] * x.ndim
    shape[axis] = index.shape[1]
    y = None
    for t in range(index.shape[0]):
        term = xp.take(x, xp.asarray(index[t]), axis=axis)
        if weight is not None:
            w = xp.asarray(weight[t]).reshape(shape)
            if not weight[t].all():
                term = xp.where(w != 0, term, 0)
            term *= w
        y = term if y is None else xp.add(y, term, out=y)
    return y


def _by_position(xp, x, axis, index):
    """The unweighted sum, one output position (a slab of the other axes) at a time."""
    shape = list(x.shape)
    shape[axis] = index.shape[1]
    y = xp.empty(shape, dtype=x.dtype)
    source, out = xp.moveaxis(x, axis, 0), xp.moveaxis(y, axis, 0)
    for o in range(index.shape[1]):
        sum_into(xp, [source[i] for i in index[:, o]], out[o])
    return y


def _one_run(ok):
    """(lo, hi): the one run of True positions of the 1-D ``ok`` (those outside it are the
    borders), or None where there is no such single run."""
    lo, hi = int(ok.argmax()), ok.size - int(ok[::-1].argmax())
    return (lo, hi) if ok[lo:hi].all() else None


def _affine_plan(index, n):
    """Whether the taps (T, m) of an axis n -> m are affine in strided runs: with g =
    gcd(n, m), p = m / g and s = n / g, output ``o = r + p j`` (residue r < p) reads
    ``index[t, o] = s j + d_t(r)`` for j in one run ``lo <= j < hi`` (the borders
    outside it are gathered). Returns ``(p, s, [(r, lo, hi, d)])`` or None."""
    m = index.shape[1]
    g = math.gcd(n, m)
    p, s = m // g, n // g
    if p * index.shape[0] > 16 or s > 16 or g < 4:
        return None
    plan, j = [], np.arange(g)
    for r in range(p):
        d = index[:, r::p] - s * j
        run = _one_run((d == d[:, g // 2, None]).all(axis=0))
        if run is None:
            return None
        plan.append((r, *run, d[:, g // 2]))
    return p, s, plan


def _sliced(xp, x, axis, index, plan):
    """sum_t x.take(index[t], axis) through strided slices of x (the terms added in tap
    order, as the gather does): per residue r, y[.., r + p j, ..] for j in the run takes
    x[.., s j + d_t, ..]; the few border positions are gathered."""
    p, s, runs = plan
    shape = list(x.shape)
    g = index.shape[1] // p
    y = xp.empty(shape[:axis] + [g, p] + shape[axis + 1:], dtype=x.dtype)
    lead = (slice(None),) * axis
    for r, lo, hi, d in runs:
        views = [x[lead + (slice(s * lo + int(e), s * (hi - 1) + int(e) + 1, s),)] for e in d]
        sum_into(xp, views, y[lead + (slice(lo, hi), r)])
        border = np.r_[0:lo, hi:g]
        if border.size:
            y[lead + (xp.asarray(border), r)] = _gathered(xp, x, axis, index[:, r + p * border],
                                                          None)
    return y.reshape(shape[:axis] + [g * p] + shape[axis + 1:])


def _taps(xp, x, axis, index, weight, out=None):
    """y = sum_t weight[t] * x.take(index[t], axis) (weight None: every weight 1), exactly
    the taps, copied into ``out`` when given: an unweighted map (nearest, its backward,
    a copy) by strided slices where the taps are affine in runs, else by position above
    ``SLAB`` values per position, else by gathers; a weighted one by gathers."""
    plan = _affine_plan(index, x.shape[axis]) if weight is None and index.shape[0] > 1 else None
    if plan is not None:
        y = _sliced(xp, x, axis, index, plan)
    elif weight is None and index.shape[0] > 1 and x.size >= SLAB * x.shape[axis]:
        y = _by_position(xp, x, axis, index)
    else:
        y = _gathered(xp, x, axis, index, weight)
    if out is None:
        return y
    out[...] = y
    return out


def _axis_pass(xp, x, axis, a, transposed, out=None):
    """x with ``axis`` mapped by the :class:`AxisMap` ``a`` (``transposed``: by M^T, the
    backward): banded matrix products (:mod:`._band_matmul`) where the map has weights and
    the smaller side is finite (x where the axis grows, else the products' result: a block
    that multiplied a NaN or inf, even by a zero weight, is not finite, and values outside
    every block no tap reads; bilinear x2's backward float64 1.28-1.54 -> 1.22-1.36 ms),
    else the taps (copies and gathers; a NaN or inf reaches only the outputs reading it)."""
    index, weight = a.transposed if transposed else (a.index, a.weight)
    if weight is not None:
        blocks = a.bands(transposed, math.prod(x.shape[axis + 1:]))
        if (a.n if transposed else a.m) >= x.shape[axis]:  # the axis grows: check x
            if finite(xp, x):
                return band_pass(xp, x, axis, blocks, out)
        else:
            with np.errstate(invalid="ignore", over="ignore"):  # redone where not finite
                y = band_pass(xp, x, axis, blocks, out)
            if finite(xp, y):
                return y
    return _taps(xp, x, axis, index, weight, out)


def _axis_order(rank):
    """The order the NumPy forward resamples the spatial axes in (the backward reverses
    it): the last axis first, while the array is small (its slices there are runs of C
    values; the other axes' are long runs)."""
    return list(range(rank, 0, -1))


def interpolate(x, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None):
    """Resize x (N, *S, C) (1 to 3 spatial axes) to y (N, *S_out, C), torch's
    ``F.interpolate``: ``mode`` nearest, nearest-exact, linear (1-D), bilinear / bicubic
    (2-D), trilinear (3-D) or area; exactly one of ``size`` (int or per axis) and
    ``scale_factor`` (number or per axis, S_out = floor(S * scale_factor)).
    Returns ``(y, cache)`` for :func:`interpolate_backward`."""
    call = prepare_interpolate("interpolate", x, size, scale_factor, mode, align_corners,
                               recompute_scale_factor)
    x = call.x
    xp = array_module(x)
    copy = call.sizes_out == call.sizes_in and mode in ("linear", "bilinear", "trilinear")
    maps = tuple(axis_map("copy" if copy else mode, n, m, s, call.align_corners, x.dtype,
                          x.ndim - 2)
                 for n, m, s in zip(call.sizes_in, call.sizes_out, call.scales))
    return resample(xp, x, maps), ResampleCache("interpolate", tuple(x.shape), x.dtype, maps)


def interpolate_backward(dy, cache):
    """dy (N, *S_out, C) -> dx (N, *S, C): dx = the transposed axis maps applied to dy,
    dx[.., i, ..] = sum_o M[o, i] dy[.., o, ..] per axis."""
    op = "interpolate_backward"
    cache = check_cache(op, cache, "interpolate", ResampleCache)
    dy = upstream_grad(op, dy, cache.y_shape, cache.dtype)
    return resample_backward(array_module(dy), dy, cache.maps, cache.x_shape)


def _repeat_factors(maps):
    """The integer factor k per axis when every axis repeats each input position k times
    (:attr:`AxisMap.repeat_factor`), else None."""
    factors = tuple(a.repeat_factor for a in maps)
    return None if None in factors else factors


def resample(xp, x, maps):
    """x (N, *S, C) mapped through each axis's :class:`AxisMap`: repeated positions
    (nearest at integer factors) by a broadcast copy on the two NumPy threads (faster
    than the compiled pass, itself on the two threads: nearest x2 of (8, 32, 32, 32)
    interleaved with torch, float32 0.27-0.28 against 0.38-0.52 ms, float64 0.41-0.53
    against 0.78-0.94); else compiled, all axes in one pass; else one axis after
    another."""
    factors = _repeat_factors(maps)
    if factors is not None:
        return repeat(xp, x, factors)
    if compiled.covers(x):
        return compiled.resample(x, [(a.index, a.weight) for a in maps])
    passes = [partial(_axis_pass, xp, axis=axis, a=maps[axis - 1], transposed=False)
              for axis in _axis_order(len(maps))]
    out_shape = (x.shape[0], *(a.m for a in maps), x.shape[-1])
    return run_passes(xp, x, passes, out_shape)


def resample_backward(xp, dy, maps, x_shape):
    """dy mapped through the transposed maps of :func:`resample` (reverse order) back
    to ``x_shape``: compiled, all the transposed maps in one pass (the sums of repeated
    positions too: float32 0.33-0.91 against NumPy's 0.63-1.43 ms, float64 0.98-1.35
    against 1.22-1.95 in the case above); else the sum of each block of repeats, or one
    axis after another."""
    if compiled.covers(dy):
        return compiled.resample(dy, [a.transposed for a in maps])
    factors = _repeat_factors(maps)
    if factors is not None:
        return repeat_sum(xp, dy, factors)
    passes = [partial(_axis_pass, xp, axis=axis, a=maps[axis - 1], transposed=True)
              for axis in reversed(_axis_order(len(maps)))]
    return run_passes(xp, dy, passes, tuple(x_shape))


# The declaration: kernels, torch counterpart, sample inputs (in ops/samples/resample.py).
from .samples import resample as _s  # noqa: E402

declare(interpolate, interpolate_backward, torch=_s.torch_interpolate, samples=_s.INTERPOLATE)
__all__ = exports(__name__, globals())
