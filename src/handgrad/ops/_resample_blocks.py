"""Resampling's NumPy passes a block of images at a time, the blocks on two threads.

Interpolation applies one pass per axis (:mod:`.resample`); on a batch the passes run
block by block so that a block's intermediates stay in the cache, and the blocks (or the
two halves of a batch that fits one block) run on the two threads
(:mod:`._block_threads`).
"""

from __future__ import annotations

import math

import numpy as np

from ._block_threads import batch_halves, run_blocks
from ._blocks import image_blocks

RESAMPLE_BLOCK_BYTES = 1 << 22
"""The widest array of a block of :func:`run_passes`. Forward + backward of the banded
products, interleaved with torch over 61 rounds, ms at 2 MB / 4 MB / 8 MB: bilinear x2
of (8, 32, 32, 32), align_corners, float32 2.05 / 1.63 / 1.90, without it float64 3.27 /
2.90 / 3.35 (4 MB: one block per thread); trilinear x2 of (2, 8, 8, 8, 32) float64, 1 MB
/ 2 MB (two blocks / one), 1.62 / 0.94."""

RESAMPLE_HALF_BYTES = 1 << 21
"""A batch within one block of ``RESAMPLE_BLOCK_BYTES`` still splits in two, one block per
thread (:func:`._block_threads.batch_halves`), when each half has this many bytes (fewer
lose, as the trilinear case above). Bilinear x2 of (8, 32, 32, 32) float32, forward +
backward, one block of 4 MB against halves of 2 MB beside torch in random order, 101
rounds, three processes: 2.20 / 2.65 / 2.46 -> 2.09 / 2.24 / 2.23 ms (align_corners 2.30
/ 2.24 / 1.93 -> 2.35 / 1.99 / 1.93)."""


def run_passes(xp, x, passes, out_shape):
    """x (N, ...) through ``passes`` (functions z, out=None -> z, one per axis) a few
    images at a time: the intermediates stay small (reused memory, in the cache) and each
    block's last pass writes into the one output array; the blocks run on two threads
    (:func:`._block_threads.run_blocks`). A GPU (where each pass is a
    kernel launch and there is no cache to fit) takes the whole batch."""
    if xp is not np:
        for run in passes:
            x = run(x)
        return xp.ascontiguousarray(x)
    y = xp.empty(out_shape, dtype=x.dtype)
    widest = max(math.prod(x.shape[1:]), math.prod(out_shape[1:]))

    def block(images):
        z = x[images]
        for run in passes[:-1]:
            z = run(z)
        passes[-1](z, out=y[images])

    blocks = image_blocks((x.shape[0], widest), x.dtype.itemsize, RESAMPLE_BLOCK_BYTES)
    if len(blocks) == 1:  # one block: halves, one per thread, where each is long enough
        blocks = batch_halves(x.shape[0], x.shape[0] * widest * x.dtype.itemsize,
                              RESAMPLE_HALF_BYTES)
    run_blocks(block, blocks)
    return y
