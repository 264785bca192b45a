"""A compiled separable resampling pass (numba): one axis of a channels-last array
mapped through a few taps per output position, as :mod:`handgrad.ops.resample` does it
with whole-array gathers, in one pass without temporaries::

    y[a, o, b] = sum_t weight[t, o] * x[a, index[t, o], b]     (t in order)

with x viewed as (A, n, B) (the axes before, the resampled one, the axes after). The
terms are added in the same order as the NumPy path, so both give the same values.
Compiled in parallel over the rows ``a, o`` and serially; the parallel one runs under
the launch lock of :mod:`.kernels` (a call that finds it taken runs the serial twin).
"""

from __future__ import annotations

import numpy as np

from .dispatch import enabled, numba


def _resample_kernel(jit, loop):
    """The pass compiled with ``jit``, its rows looped with ``loop`` (range or prange)."""

    @jit
    def resample_axis(x, index, weight, y):
        """y (A, m, B) = the taps (index, weight: (T, m)) of x (A, n, B) along axis 1."""
        m, inner = index.shape[1], x.shape[2]
        for row in loop(x.shape[0] * m):
            a = np.int64(row) // m  # prange counts unsigned: keep the indices int64
            o = np.int64(row) - a * m
            w, i = weight[0, o], index[0, o]
            for b in range(inner):
                y[a, o, b] = w * x[a, i, b]
            for t in range(1, index.shape[0]):
                w, i = weight[t, o], index[t, o]
                for b in range(inner):
                    y[a, o, b] += w * x[a, i, b]

    return resample_axis


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
    from .kernels import parallel_or_serial, twins

    _kernel, _bin_max = (parallel_or_serial(*twins(numba, make))
                         for make in (_resample_kernel, _bin_max_kernel))
else:  # pragma: no cover
    _kernel = _bin_max = None


def covers(*arrays) -> bool:
    """Whether the compiled pass applies (numba present and enabled, NumPy arrays)."""
    return _kernel is not None and enabled(*arrays)


def resample_axis(x, axis, index, weight):
    """y = sum_t weight[t] * x.take(index[t], axis) (weight None: every weight 1),
    compiled; ``axis`` is neither the first nor the last of x."""
    x = np.ascontiguousarray(x)
    shape = list(x.shape)
    n, shape[axis] = shape[axis], index.shape[1]
    y = np.empty(shape, dtype=x.dtype)
    weight = np.ones(index.shape, x.dtype) if weight is None else weight.astype(x.dtype)
    outer, inner = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1:]))
    _kernel(x.reshape(outer, n, inner), np.ascontiguousarray(index, dtype=np.int64),
            np.ascontiguousarray(weight), y.reshape(outer, index.shape[1], inner))
    return y


def adaptive_max(x, bins):
    """(y, index) of adaptive max pooling of x (N, *S, C) over ``bins`` (per spatial
    axis, (start, end) per output), compiled and separable: the last axis first, each
    pass carrying the flat index of its winners (row-major first maximum, last NaN)."""
    spatial = x.shape[1:-1]
    y, flat = np.ascontiguousarray(x), np.zeros((1, 1, 1), np.int64)
    for axis in reversed(range(1, len(bins) + 1)):
        starts = np.array([b[0] for b in bins[axis - 1]], np.int64)
        ends = np.array([b[1] for b in bins[axis - 1]], np.int64)
        shape = list(y.shape)
        n, shape[axis] = shape[axis], len(starts)
        outer = int(np.prod(shape[:axis]))
        out, index = np.empty(shape, x.dtype), np.empty(shape, np.int64)
        _bin_max(y.reshape(outer, n, -1), flat if flat.ndim == 3 else
                 flat.reshape(outer, n, -1), int(np.prod(spatial[axis:])), starts, ends,
                 out.reshape(outer, len(starts), -1), index.reshape(outer, len(starts), -1))
        y, flat = out, index
    return y, flat
