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


if numba is not None:  # pragma: no branch
    from .kernels import _parallel_or_serial

    _kernel = _parallel_or_serial(
        _resample_kernel(numba.njit(parallel=True, cache=True, nogil=True), numba.prange),
        _resample_kernel(numba.njit(cache=True, nogil=True), range))
else:  # pragma: no cover
    _kernel = None


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
    outer = int(np.prod(shape[:axis]))
    _kernel(x.reshape(outer, n, -1), np.ascontiguousarray(index, dtype=np.int64),
            np.ascontiguousarray(weight), y.reshape(outer, index.shape[1], -1))
    return y
