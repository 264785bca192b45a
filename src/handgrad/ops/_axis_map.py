"""One axis's resampling map n -> m as taps, with what the passes derive from the taps.

The taps are ``index (T, m)`` and ``weight (T, m)`` (None: every weight 1): output ``o``
is ``sum_t weight[t, o] * x[index[t, o]]``. As a matrix M (m, n), ``M[o, i]`` is the sum
of the weights of the taps o -> i; the backward applies M^T, itself as taps: input ``i``
gathers the run of outputs that read it (every mode's index is nondecreasing in ``o``, so
the runs are short), weighted by M's column ``i``.

An :class:`AxisMap` depends on the geometry alone, so :func:`handgrad.ops.resample.axis_map`
keeps the recent ones and every call of a training loop reuses them: the transposed taps
and the NumPy banded blocks are computed once (its arrays are read-only).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ._band_matmul import bands, block_rows


@dataclass(frozen=True, eq=False)
class AxisMap:
    """``index``, ``weight`` (see the module doc), ``n`` the input size and ``dtype`` the
    weights' (and the arrays') dtype."""

    index: np.ndarray
    weight: object
    n: int
    dtype: object

    @property
    def m(self) -> int:
        return self.index.shape[1]

    @functools.cached_property
    def transposed(self):
        """The taps ``(index (K, n), weight (K, n) or None)`` of M^T (m -> n)."""
        return transposed_taps(self.index, self.weight, self.n, self.dtype)

    def bands(self, transposed, values):
        """The blocks of M (``transposed``: of M^T) for the NumPy banded products over
        rows of ``values`` per position (:func:`._band_matmul.bands`, as many outputs per
        block as :func:`._band_matmul.block_rows` picks), kept per direction and size."""
        rows = block_rows(self.n if transposed else self.m, values)
        kept = self.__dict__.setdefault("_bands", {})
        if (transposed, rows) not in kept:
            matrix = _axis_matrix(self.index, self.weight, self.n, self.dtype)
            kept[transposed, rows] = bands(matrix.T if transposed else matrix, rows)
        return kept[transposed, rows]

    @functools.cached_property
    def repeat_factor(self):
        """k when the map repeats each input position k times (``index = o // k``, weight
        1: nearest at an integer scale), else None."""
        if self.weight is not None or self.index.shape[0] != 1 or self.n == 0 or \
                self.m % self.n:
            return None
        k = self.m // self.n
        return k if np.array_equal(self.index[0], np.arange(self.m) // k) else None


def read_only(*arrays):
    """``arrays`` with writing turned off (they are shared by every call of a geometry)."""
    for a in arrays:
        if a is not None:
            a.flags.writeable = False
    return arrays


def _axis_matrix(index, weight, n, dtype):
    """The dense map M (m, n) of one axis: M[o, i] = sum of the weights of taps o -> i."""
    m = index.shape[1]
    matrix = np.zeros((m, n), dtype=dtype)
    rows = np.broadcast_to(np.arange(m), index.shape)
    np.add.at(matrix, (rows, index), 1 if weight is None else weight)
    return matrix


def transposed_taps(index, weight, n, dtype):
    """The taps ``(index (K, n), weight (K, n) or None)`` of the transposed map M^T of one
    axis (m -> n): input ``i`` gathers the outputs ``first_i .. first_i + K - 1`` (from
    the first to the last that reads it with a nonzero weight) with weights ``M[o, i]``
    (0 past its last one)."""
    m = index.shape[1]
    matrix = _axis_matrix(index, weight, n, dtype)
    reads = matrix != 0  # a clamped tap of weight 0 (linear's border) reads nothing
    read = reads.any(axis=0)
    first = np.where(read, reads.argmax(axis=0), 0)
    last = np.where(read, m - 1 - reads[::-1].argmax(axis=0), -1)
    rows = first + np.arange(max(int((last - first).max()) + 1, 1))[:, None]
    inside = rows <= last
    rows = np.minimum(rows, m - 1)
    weights = np.where(inside, matrix[rows, np.arange(n)], 0).astype(dtype)
    return read_only(rows, None if inside.all() and (weights == 1).all() else weights)
