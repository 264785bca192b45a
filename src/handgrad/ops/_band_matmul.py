"""Resampling one axis by banded matrix products: the NumPy passes of the weighted maps.

An axis map n -> m is a matrix M (m, n) (``M[o, i]``: the weight of input i in output o)
whose nonzeros lie in a narrow band: every mode's taps are a few adjacent inputs,
nondecreasing in o. With x viewed as (A, n, B) (B: the later axes and the channels),
y[a] = M x[a]. The rows of M are cut into blocks of R outputs; block ``o0:o1`` reads only
the inputs ``i0:i1`` its rows touch, so each block is one small matrix product, A of them
stacked, written straight into the output::

    y[:, o0:o1] = M[o0:o1, i0:i1] @ x[:, i0:i1]

The backward is the same pass with M^T (n, m). BLAS does the multiply-adds (NumPy's
elementwise passes had to write every product and every partial sum back to memory: the
benchmark's bilinear x2 of (8, 32, 32, 32) align_corners float64, forward + backward,
took 5.48 ms, 3.7x torch, by per-phase products, and takes 2.52-2.58 ms, 1.5-1.7x, here).
The products include the band's zeros, ``0 * x``, which add nothing where x is finite:
callers redo a pass by the taps where its input, or its result, is not finite
(:func:`finite`), so a NaN or inf reaches only the outputs that read it with a nonzero
weight, as on the compiled path.
"""

from __future__ import annotations

import math

import numpy as np

CALL_VALUES = 256
"""R, the rows of a block, is the smallest power of two from 4 with R * B at least this
many values (R = 4 from B = 64 on, 8 at B = 32, 64 at B = 4), at most m: more rows mean
fewer, larger products but more zeros multiplied (block K about R n / m + taps). Per
pass, 4 / 8 / 16 / 32 rows, (256, 32 -> 64, 32) and (8, 32 -> 64, 2048) float32 ms:
0.22 / 0.17 / 0.16 / 0.20 and 0.15 / 0.24 / 0.30 / 0.51; their backward (M^T) 0.30 / 0.27
/ 0.37 / 0.62 and 0.08 / 0.13 / 0.19 / 0.32 (float64 alike)."""


def block_rows(m, b):
    """R for an output axis of ``m`` >= 1 positions over rows of ``b`` values (see
    CALL_VALUES)."""
    rows = 4
    while rows * b < CALL_VALUES and rows < m:
        rows *= 2
    return min(rows, m)


def bands(matrix, rows):
    """``((o0, o1, i0, i1, block), ...)``: the blocks of ``rows`` outputs of ``matrix``
    (m, n), each with the inputs its rows touch and its part of the matrix (read-only)."""
    m = matrix.shape[0]
    out = []
    for o0 in range(0, m, rows):
        block = matrix[o0:o0 + rows]
        touched = np.flatnonzero(block.any(axis=0))
        i0, i1 = (int(touched[0]), int(touched[-1]) + 1) if touched.size else (0, 0)
        part = np.ascontiguousarray(block[:, i0:i1])
        part.flags.writeable = False
        out.append((o0, o0 + block.shape[0], i0, i1, part))
    return tuple(out)


def finite(xp, x):
    """Whether every value of x is finite (one sum: an overflowing sum of finite values
    reads as not finite, which only sends x to the exact taps)."""
    return bool(xp.isfinite(x.sum()))


def band_pass(xp, x, axis, blocks, out=None):
    """y: x (neither the first nor the last axis is ``axis``) with ``axis`` mapped n -> m
    by the ``blocks`` of :func:`bands` (m: where the last block ends), written into
    ``out`` when given."""
    x = xp.ascontiguousarray(x)
    lead, rest, m = x.shape[:axis], x.shape[axis + 1:], blocks[-1][1]
    a, b = math.prod(lead), math.prod(rest)
    x3 = x.reshape(a, x.shape[axis], b)
    y = xp.empty((*lead, m, *rest), dtype=x.dtype) if out is None else out
    y3 = y.reshape(a, m, b)
    for o0, o1, i0, i1, block in blocks:
        if i1 > i0:
            xp.matmul(xp.asarray(block), x3[:, i0:i1], out=y3[:, o0:o1])
        else:  # rows that read nothing (weights 0)
            y3[:, o0:o1] = 0
    return y
