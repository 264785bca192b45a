"""The compiled resampling pass (numba): every spatial axis of a channels-last array
mapped through a few taps per output position at once, as :mod:`handgrad.ops.resample`
does it axis after axis::

    y[n, d, h, w] = sum w_d w_h w_w x[n, i_d, i_h, i_w]     (over each axis's taps)

with 1-D and 2-D arrays viewed as 3-D (size-1 axes, one tap of weight 1). Per output row
the outer two axes' taps blend whole input rows (long contiguous runs) into a scratch
row, then the last axis's taps read C values at a time: no full-size temporaries, and
one write of the output. Compiled serially, run on half a batch per NumPy thread, and in
parallel over blocks of rows for one large image (under the launch lock of
:mod:`.kernels`: a call that finds it taken runs the serial twin). Also adaptive max
pooling's per-axis pass.
"""

from __future__ import annotations

import math

import numpy as np

from .._block_threads import on_halves
from .dispatch import as_3d, enabled, numba

BLOCKS = 64
"""The rows of one resampling call are cut into at most this many blocks (the parallel
loop's items), each with its own scratch row."""


def _resample_kernel(jit, loop):
    """The fused pass compiled with ``jit``, its rows looped with ``loop`` (range or prange)."""

    @jit
    def resample_3d(x, index_d, weight_d, index_h, weight_h, index_w, weight_w, y):
        """y (N, OD, OH, OW, C) = x (N, D, H, W, C) through the taps (index, weight: (T, m))
        of the three axes. Per output row (n, d, h): the rows x[n, i_d, i_h] (W*C values)
        blended with weights w_d w_h into a scratch row (or that row itself, where one
        tap of weight 1 reads it, as in nearest at non-integer factors: 32 -> 48 and
        64 -> 32 of (8, n, n, 32) forward, one core, 0.07-0.30 -> 0.05-0.24 ms), then each
        output w the sum of w_w * row[i_w] (C values). Taps of weight 0 are skipped (a
        clamped tap reads nothing: an inf there would give NaN, not 0), except each
        output's first along W (the caller zeroes the outputs no tap reads)."""
        out_d, out_h = y.shape[1], y.shape[2]
        rows = y.shape[0] * out_d * out_h
        per_block = -(-rows // min(rows, BLOCKS))
        for block in loop(-(-rows // per_block)):
            scratch = np.empty((x.shape[3], x.shape[4]), x.dtype)  # one per block
            blend = scratch.reshape(-1)
            for r in range(np.int64(block) * per_block, min(rows, (block + 1) * per_block)):
                n, d, h = r // (out_d * out_h), (r // out_h) % out_d, r % out_h
                live = last_d = last_h = 0
                for td in range(index_d.shape[0]):
                    for th in range(index_h.shape[0]):
                        if weight_d[td, d] * weight_h[th, h] != 0:
                            live, last_d, last_h = live + 1, td, th
                row = scratch
                if live == 1 and weight_d[last_d, d] * weight_h[last_h, h] == 1:
                    row = x[n, index_d[last_d, d], index_h[last_h, h]]  # no copy
                else:
                    first = True
                    for td in range(index_d.shape[0]):
                        for th in range(index_h.shape[0]):
                            scale = weight_d[td, d] * weight_h[th, h]
                            if scale == 0:
                                continue
                            source = x[n, index_d[td, d], index_h[th, h]].reshape(-1)
                            if first:
                                for k in range(blend.shape[0]):
                                    blend[k] = scale * source[k]
                            else:
                                for k in range(blend.shape[0]):
                                    blend[k] += scale * source[k]
                            first = False
                    if first:  # no tap reads this row
                        blend[:] = 0
                for w in range(y.shape[3]):
                    out = y[n, d, h, w]
                    scale, source = weight_w[0, w], row[index_w[0, w]]
                    for c in range(out.shape[0]):
                        out[c] = scale * source[c]
                    for t in range(1, index_w.shape[0]):
                        scale, source = weight_w[t, w], row[index_w[t, w]]
                        if scale != 0:
                            for c in range(out.shape[0]):
                                out[c] += scale * source[c]

    return resample_3d


def _bin_max_kernel(jit, loop):
    """The adaptive-max pass of one axis compiled with ``jit``, rows looped with ``loop``."""

    @jit
    def bin_max_axis(x, flat, stride, starts, ends, y, index):
        """y[a, o, b] = the first maximum (or last NaN) of x[a, starts[o]:ends[o], b];
        index = its flat position: flat[a, i, b] (0 when ``flat`` is (1, 1, 1)) + i *
        stride."""
        m, carried = starts.shape[0], flat.shape[1] > 1
        for row in loop(x.shape[0] * m):
            a = np.int64(row) // m
            o = np.int64(row) - a * m
            for i in range(starts[o], ends[o]):
                for b in range(x.shape[2]):
                    v = x[a, i, b]
                    if i == starts[o] or v > y[a, o, b] or np.isnan(v):
                        y[a, o, b] = v
                        index[a, o, b] = (flat[a, i, b] if carried else 0) + i * stride

    return bin_max_axis


if numba is not None:  # pragma: no branch
    from .kernels import parallel_or_serial, sized, twins

    _kernel, _bin_max = (parallel_or_serial(*twins(numba, make))
                         for make in (_resample_kernel, _bin_max_kernel))
else:  # pragma: no cover
    _kernel = _bin_max = None

PARALLEL_RESAMPLE_BYTES = 32 << 20
"""A single image (no batch to halve) writing this many bytes or more runs the parallel
kernel, a smaller one its serial twin (:func:`.kernels.sized`): each pass is
memory-bound and short, and waking numba's threads cost about what they saved below
that (bilinear x2 forward, 4 MB written, 0.42-0.65 ms serial against 0.66-1.41)."""


_IDENTITY = np.zeros((1, 1), np.int64)  # the map of a size-1 axis added to reach 3-D


def covers(*arrays) -> bool:
    """Whether the compiled pass applies (numba present and enabled, NumPy arrays)."""
    return _kernel is not None and enabled(*arrays)


def resample(x, taps):
    """y (N, *S_out, C): x (N, *S, C) (1 to 3 spatial axes) mapped through every axis's
    taps at once, ``taps`` = ``(index (T, m), weight (T, m) or None for weight 1)`` per
    axis; compiled, one pass over the output without temporaries. Half the batch on each
    NumPy thread (:func:`.._block_threads.on_halves`; the kernel releases the GIL):
    x2 upsampling of (8, 32, 32, 32) interleaved with torch, wall ms, bilinear float64
    forward 1.43-1.61 -> 1.04-1.10, backward 1.34-1.44 -> 0.92-0.95, nearest float64
    backward 0.96-1.32 -> 0.75-0.77, the same bits."""
    x = np.ascontiguousarray(x)
    y = np.empty((x.shape[0], *(index.shape[1] for index, _ in taps), x.shape[-1]), x.dtype)
    if y.size == 0:  # an empty batch: nothing to compute
        return y
    arrays = []
    for index, weight in [(_IDENTITY, None)] * (5 - x.ndim) + list(taps):
        weight = np.ones(index.shape, x.dtype) if weight is None else weight
        arrays += [np.ascontiguousarray(index, dtype=np.int64),
                   np.ascontiguousarray(weight, dtype=x.dtype)]
    on_halves(x.shape[0], y.nbytes,
              lambda images: _kernel.serial(as_3d(x[images]), *arrays, as_3d(y[images])),
              lambda: sized(_kernel, y.nbytes, PARALLEL_RESAMPLE_BYTES)(as_3d(x), *arrays,
                                                                      as_3d(y)))
    unread = ~(arrays[-1] != 0).any(axis=0)  # outputs along W that no tap reads
    if unread.any():
        as_3d(y)[:, :, :, unread] = 0
    return y


def adaptive_max(x, bins):
    """(y, index) of adaptive max pooling of x (N, *S, C) over ``bins`` (per spatial
    axis, (start, end) per output), compiled and separable: the last axis first, each
    pass carrying the flat index of its winners (row-major first maximum, last NaN)."""
    y, flat = np.ascontiguousarray(x), np.zeros((1, 1, 1), np.int64)
    for axis in reversed(range(1, len(bins) + 1)):
        y, flat = _bin_max_pass(y, flat, axis, bins[axis - 1], x.shape[1:-1])
    return y, flat


def _bin_max_pass(y, flat, axis, bins, spatial):
    """One axis of :func:`adaptive_max`: (out, index) of y binned along ``axis``, the
    winners' flat positions carried from ``flat`` (its shape (1, 1, 1) before the first
    pass). Half the batch per NumPy thread (:func:`.._block_threads.on_halves`):
    interleaved with torch, forward + backward of (8, 64, 64, 32) to 8 x 8 or 7 x 7,
    0.62-1.38 -> 0.66-1.23 ms, float64 to 7 x 7 1.31-1.38 -> 0.91-1.13 ms."""
    starts = np.array([b[0] for b in bins], np.int64)
    ends = np.array([b[1] for b in bins], np.int64)
    shape = list(y.shape)
    n, shape[axis] = shape[axis], len(starts)
    outer = math.prod(shape[:axis])
    out, index = np.empty(shape, y.dtype), np.empty(shape, np.int64)
    source, out3 = y.reshape(outer, n, -1), out.reshape(outer, len(starts), -1)
    index3 = index.reshape(outer, len(starts), -1)
    carried = flat.reshape(outer, n, -1) if flat.ndim > 3 else None
    stride, per_image = math.prod(spatial[axis:]), outer // max(y.shape[0], 1)

    def run(rows, kernel):
        kernel(source[rows], flat if carried is None else carried[rows], stride, starts,
               ends, out3[rows], index3[rows])

    on_halves(y.shape[0], y.nbytes,
              lambda images: run(slice(images.start * per_image, images.stop * per_image),
                                    _bin_max.serial),
              lambda: run(slice(None), _bin_max))
    return out, index
