"""The loops compiled by :mod:`.dispatch` (numba). Plain loops over positions, written
for 2-D channels-last arrays; ``g`` is the geometry tuple of ``geometry_2d`` (the pooling
loops, in :mod:`.pool_kernels`, take 3-D arrays and ``geometry_3d``).

Pooling and depthwise kernels are compiled twice from the same source: in parallel
over the batch (``prange``; no two threads write the same element) on numba's
"workqueue" threads, which block instead of spinning, and serially (``range``). The
workqueue pool aborts the process when two threads launch into it at once, so a
lock admits one parallel call at a time and a call that finds it taken runs the
serial twin: concurrent callers never wait for each other, and each still uses a
core. im2col and col2im, which run between BLAS calls, are single-threaded only: there a
second busy thread pool fought BLAS's threads for the 2 cores and made a training
epoch several times slower. Only imported when numba is installed."""

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
    return SimpleNamespace(window_rows=jit(_window_rows),
                           parallel=SimpleNamespace(**parallel),
                           serial=SimpleNamespace(**serial), **either)


def _window_rows(x, g, groups, cols, gather):
    """im2col with ``gather``: cols[gr, m, t*Cg + c] = x[n, h, w, gr*Cg + c] (zero outside
    the input); else its adjoint col2im: x[n, h, w, gr*Cg + c] += cols[gr, m, t*Cg + c]
    (x starts at zero). Output m = (n*OH + oh)*OW + ow, tap t = kh*KW + kw, reading
    h = oh*SH + kh*DH - PH and w = ow*SW + kw*DW - PW."""
    H, W, OH, OW, KH, KW, SH, SW, DH, DW, PH, PW = g
    N, C = x.shape[0], x.shape[3]
    cg = C // groups
    for n in range(N):
        for oh in range(OH):
            for ow in range(OW):
                m = (n * OH + oh) * OW + ow
                for kh in range(KH):
                    h = oh * SH + kh * DH - PH
                    for kw in range(KW):
                        w = ow * SW + kw * DW - PW
                        base = (kh * KW + kw) * cg
                        inside = 0 <= h < H and 0 <= w < W
                        for gr in range(groups):
                            if not inside:
                                if gather:
                                    for c in range(cg):
                                        cols[gr, m, base + c] = 0
                            elif gather:
                                for c in range(cg):
                                    cols[gr, m, base + c] = x[n, h, w, gr * cg + c]
                            else:
                                for c in range(cg):
                                    x[n, h, w, gr * cg + c] += cols[gr, m, base + c]


def _batch_kernels(jit, prange):
    """The loops over the batch (pooling's from :mod:`.pool_kernels`), compiled with
    ``jit``; ``prange`` is numba.prange (parallel) or range (serial)."""

    @jit
    def depthwise(x, wt, g, y):
        """y[n, o, co] = sum_taps x[n, i, co // m] * wt[t, co], m = C_y // C_x."""
        H, W, OH, OW, KH, KW, SH, SW, DH, DW, PH, PW = g
        N, CO = x.shape[0], y.shape[3]
        mult = CO // x.shape[3]
        for row in prange(N * OH):
            n, oh = row // OH, row % OH
            for ow in range(OW):
                for co in range(CO):
                    y[n, oh, ow, co] = 0
                for kh in range(KH):
                    h = oh * SH + kh * DH - PH
                    if h < 0 or h >= H:
                        continue
                    for kw in range(KW):
                        w = ow * SW + kw * DW - PW
                        if w < 0 or w >= W:
                            continue
                        t = kh * KW + kw
                        if mult == 1:  # one contiguous, vectorizable loop over channels
                            for co in range(CO):
                                y[n, oh, ow, co] += x[n, h, w, co] * wt[t, co]
                            continue
                        for gi in range(x.shape[3]):
                            value = x[n, h, w, gi]
                            for co in range(gi * mult, (gi + 1) * mult):
                                y[n, oh, ow, co] += value * wt[t, co]

    @jit
    def depthwise_backward(x, wt, dy, g, dx, dw_partial, want_dw):
        """dx[n, i, co // m] += dy[n, o, co] * wt[t, co]; with ``want_dw`` also
        dw_partial[n, t, co] = sum_o x[n, i, co // m] * dy[n, o, co] (summed over n later)."""
        H, W, OH, OW, KH, KW, SH, SW, DH, DW, PH, PW = g
        N, CO = dy.shape[0], dy.shape[3]
        mult = CO // dx.shape[3]
        for n in prange(N):
            for oh in range(OH):
                for ow in range(OW):
                    for kh in range(KH):
                        h = oh * SH + kh * DH - PH
                        if h < 0 or h >= H:
                            continue
                        for kw in range(KW):
                            w = ow * SW + kw * DW - PW
                            if w < 0 or w >= W:
                                continue
                            t = kh * KW + kw
                            if mult == 1:
                                for co in range(CO):
                                    dx[n, h, w, co] += dy[n, oh, ow, co] * wt[t, co]
                                    if want_dw:
                                        dw_partial[n, t, co] += x[n, h, w, co] * dy[n, oh, ow, co]
                                continue
                            for gi in range(dx.shape[3]):
                                total = dx[n, h, w, gi]
                                for co in range(gi * mult, (gi + 1) * mult):
                                    total += dy[n, oh, ow, co] * wt[t, co]
                                dx[n, h, w, gi] = total
                                if want_dw:
                                    value = x[n, h, w, gi]
                                    for co in range(gi * mult, (gi + 1) * mult):
                                        dw_partial[n, t, co] += value * dy[n, oh, ow, co]

    return {**pool_kernels(jit, prange),
            "depthwise": depthwise, "depthwise_backward": depthwise_backward}
