"""The loops compiled by :mod:`.dispatch` (numba). Plain loops over positions, written for
2-D channels-last arrays; ``g`` is the geometry tuple of ``geometry_2d`` (the pooling
loops, in :mod:`.pool_kernels`, take 3-D arrays and ``geometry_3d``).

Pooling and depthwise kernels are compiled twice from the same source: in parallel over
the batch (``prange``; no two threads write the same element) on numba's "workqueue"
threads, which block instead of spinning, and serially (``range``). The workqueue pool
aborts the process when two threads launch into it at once, so a lock admits one
parallel call at a time and a call that finds it taken runs the serial twin: concurrent
callers never wait for each other, and each still uses a core. A batch of 2 MB or more
runs the serial twin on each half on the NumPy block threads instead
(:func:`handgrad.ops._block_threads.on_halves`): waking numba's workers cost about what
the second core gave back on these short calls. col2im, which runs between BLAS calls,
is single-threaded only: there a second busy thread pool fought BLAS's threads for the 2
cores and made a training epoch several times slower. Only imported when numba is
installed."""

from __future__ import annotations

import os
import threading
from types import SimpleNamespace

from .pool_kernels import pool_kernels

_launch_lock = threading.Lock()  # held while a parallel kernel runs


def _fresh_lock_after_fork():
    """A child forked while another thread held the lock would otherwise stay serial."""
    global _launch_lock
    _launch_lock = threading.Lock()


os.register_at_fork(after_in_child=_fresh_lock_after_fork)


def parallel_or_serial(parallel, serial):
    """Run ``parallel`` if no other thread is inside a parallel kernel, else ``serial``."""

    def kernel(*args):
        lock = _launch_lock
        if not lock.acquire(blocking=False):
            return serial(*args)
        try:
            return parallel(*args)
        finally:
            lock.release()

    kernel.__name__ = kernel.__qualname__ = parallel.py_func.__name__
    kernel.__doc__ = parallel.py_func.__doc__
    kernel.serial = serial
    return kernel


def sized(kernel, nbytes, minimum):
    """``kernel`` (from :func:`parallel_or_serial`) where its data has ``minimum`` bytes or
    more, else its serial twin: a parallel launch costs 50-100 us, more than it saves on
    small arrays."""
    return kernel if nbytes >= minimum else kernel.serial


def twins(numba, make):
    """``make(jit, loop)`` compiled in parallel (``prange``) and serially (``range``). The
    loop kind is a closure variable, so numba's cache tells the two variants apart."""
    return (make(numba.njit(parallel=True, cache=True, nogil=True), numba.prange),
            make(numba.njit(cache=True, nogil=True), range))


def build_kernels(numba):
    """The compiled kernels; the batch-parallel ones also as ``.parallel``/``.serial``."""
    if numba.config.THREADING_LAYER == "default":  # the user's NUMBA_THREADING_LAYER wins
        numba.config.THREADING_LAYER = "workqueue"  # blocking workers: no spinning threads
    jit = numba.njit(cache=True, nogil=True)
    parallel, serial = twins(numba, _batch_kernels)
    either = {name: parallel_or_serial(parallel[name], serial[name]) for name in parallel}
    return SimpleNamespace(col2im_rows=jit(_col2im_rows),
                           parallel=SimpleNamespace(**parallel),
                           serial=SimpleNamespace(**serial), **either)


def _col2im_rows(dx, g, groups, cols):
    """col2im, the adjoint of im2col: dx[n, h, w, gr*Cg + c] += cols[gr, m, t*Cg + c] (dx
    starts at zero; taps outside the input add nothing). Output m = (n*OH + oh)*OW + ow,
    tap t = kh*KW + kw, reading h = oh*SH + kh*DH - PH and w = ow*SW + kw*DW - PW. Each
    pixel and column row is taken as a 1-D view (per chunk of grouped g4 float32 0.28
    against 0.31 ms for 4-D indexing)."""
    H, W, OH, OW, KH, KW, SH, SW, DH, DW, PH, PW = g
    N, C = dx.shape[0], dx.shape[3]
    cg = C // groups
    for n in range(N):
        for oh in range(OH):
            for ow in range(OW):
                m = (n * OH + oh) * OW + ow
                for kh in range(KH):
                    h = oh * SH + kh * DH - PH
                    if h < 0 or h >= H:
                        continue
                    for kw in range(KW):
                        w = ow * SW + kw * DW - PW
                        if w < 0 or w >= W:
                            continue
                        base, pixel = (kh * KW + kw) * cg, dx[n, h, w]
                        for gr in range(groups):
                            row, first = cols[gr, m], gr * cg
                            for c in range(cg):
                                pixel[first + c] += row[base + c]


def _batch_kernels(jit, prange):
    """The loops over the batch (pooling's from :mod:`.pool_kernels`), compiled with
    ``jit``; ``prange`` is numba.prange (parallel) or range (serial)."""

    @jit
    def depthwise(x, wt, g, bias, y):
        """y[n, o, c] = bias[c] + sum_taps x[n, i, c] * wt[t, c] (one channel per group),
        an output row at a time: the bias, then per tap a sweep along the row, one
        contiguous vectorized loop over the channels per position (the row stays in the
        L1 cache between taps; adding the bias here saves a pass over y)."""
        H, W, OH, OW, KH, KW, SH, SW, DH, DW, PH, PW = g
        N, C = x.shape[0], y.shape[3]
        for row in prange(N * OH):
            n, oh = row // OH, row % OH
            y_row = y[n, oh]
            for ow in range(OW):
                y_row[ow] = bias
            for kh in range(KH):
                h = oh * SH + kh * DH - PH
                if h < 0 or h >= H:
                    continue
                x_row = x[n, h]
                for kw in range(KW):
                    w_tap = wt[kh * KW + kw]
                    for ow in range(OW):
                        w = ow * SW + kw * DW - PW
                        if w < 0 or w >= W:
                            continue
                        x_in, out = x_row[w], y_row[ow]
                        for c in range(C):
                            out[c] += x_in[c] * w_tap[c]

    @jit
    def depthwise_backward(x, wt, dy, g, dx, dw_rows, want_dw):
        """dx[n, i, c] = sum over (o, t) reading i of dy[n, o, c] * wt[t, c]; with ``want_dw``
        also dw_rows[k, t, ow, c] = sum over the images n of chunk k and the rows oh of
        x[n, i, c] * dy[n, oh, ow, c] (summed over k and ow by the caller: no sum depends
        on the one before it, where a running sum per tap would). The batch is split in
        ``dw_rows.shape[0]`` chunks, one per thread; dx is written whole."""
        H, W, OH, OW, KH, KW, SH, SW, DH, DW, PH, PW = g
        N, C = dy.shape[0], dy.shape[3]
        chunks = dw_rows.shape[0]
        for chunk in prange(chunks):
            if want_dw:
                dw_rows[chunk] = 0
            for n in range(chunk * N // chunks, (chunk + 1) * N // chunks):
                dx_image = dx[n]
                dx_image[:] = 0
                for oh in range(OH):
                    dy_row = dy[n, oh]
                    for kh in range(KH):
                        h = oh * SH + kh * DH - PH
                        if h < 0 or h >= H:
                            continue
                        x_row, dx_row = x[n, h], dx_image[h]
                        for kw in range(KW):
                            t = kh * KW + kw
                            w_tap = wt[t]
                            for ow in range(OW):
                                w = ow * SW + kw * DW - PW
                                if w < 0 or w >= W:
                                    continue
                                grad, out = dy_row[ow], dx_row[w]
                                if want_dw:
                                    x_in, dw_out = x_row[w], dw_rows[chunk, t, ow]
                                    for c in range(C):
                                        out[c] += grad[c] * w_tap[c]
                                        dw_out[c] += x_in[c] * grad[c]
                                else:
                                    for c in range(C):
                                        out[c] += grad[c] * w_tap[c]

    return {**pool_kernels(jit, prange),
            "depthwise": depthwise, "depthwise_backward": depthwise_backward}
