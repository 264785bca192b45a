"""Depthwise convolution loops with their sums in registers (numba, one per kernel size).

The forward: per output pixel and block of 8 channels, eight accumulators start at the
bias and take every tap in (kh, kw) order, then are stored once::

    y[n, oh, ow, c] = b[c] + sum_{kh, kw} x_pad[n, oh*SH + kh*DH, ow*SW + kw*DW, c] w[kh, kw, c]

With unit strides it also gives dx alone, as the correlation of dy with the flipped
kernel (:mod:`handgrad.ops._depthwise`). The backward takes dx and dw in one pass: per
output pixel, the eight lanes of dy go to each tap's eight lanes of a padded dx scratch
(times w) and of a row per output column and tap (times x; the caller sums the rows)::

    dx_pad[n, oh*SH + kh*DH, ow*SW + kw*DW, c] += dy[n, oh, ow, c] w[kh, kw, c]
    rows[ow, t, c] += x_pad[n, oh*SH + kh*DH, ow*SW + kw*DW, c] dy[n, oh, ow, c]

and the weight gradient alone (a network's first layer) takes the rows only.

The eight lanes are written out and the kernel size is a constant of each compiled
kernel, so the taps unroll into straight-line code that LLVM's SLP vectorizer packs into
SIMD registers, where the row loops of :mod:`.kernels` load and store at every tap of
every channel loop. Numba compiles with the SLP vectorizer off, so these kernels are
compiled with it on, under numba's compiler lock (no other compilation sees the
setting). Indices are unsigned: numba adds a negative-index branch to every signed
index, which stops the vectorizer. Channels past the last block of 8 take a scalar loop.
Each image is first copied into a zero-padded scratch image (the caller's ``pad``, (H +
pads, W + pads, C), zero outside the copy), so no tap is checked.

The forward and the rows sum in the row loops' order (a tap outside the image adds a zero
product), so they are theirs bit for bit; the backward's dx takes each pixel's taps in
turn where the row loop swept a row per tap (the same products, another order). One
core, (32, 32, 32, 32) float32, 3x3: the forward 0.56-0.80 ms against the row loop's
1.27-1.29 ms; on the two threads, the backward 1.30 ms against the row loop's 1.88 ms.
"""

from __future__ import annotations

import functools

import numpy as np

try:  # pragma: no cover - exercised when the optional dependency is present
    import numba
    from numba.core import config
    from numba.core.compiler_lock import global_compiler_lock
except ImportError:  # pragma: no cover
    numba = None

u = np.uint64


def _depthwise_source(kernel_h, kernel_w):
    """The forward loop for a kernel_h x kernel_w kernel (closure constants: the taps
    unroll)."""

    def depthwise_registers(x, wt, g, bias, y, pad):
        """y (N, OH, OW, C) for x (N, H, W, C), wt (kernel_h * kernel_w, C), bias (C,);
        ``pad`` one zero-padded image (see the module doc)."""
        H, W, OH, OW, _, _, SH, SW, DH, DW, PH, PW = g
        N, C = y.shape[0], y.shape[3]
        Wp = pad.shape[1]
        pf, wf = pad.reshape(-1), wt.reshape(-1)
        chans = u(C)
        tap_h, tap_w = u(DH * Wp * C), u(DW * C)
        step_h, step_w = u(SH * Wp * C), u(SW * C)
        for n in range(N):
            for h in range(H):  # the image into the padded scratch
                source, start = x[n, h].reshape(-1), u((h + PH) * Wp + PW) * chans
                for i in range(W * C):
                    pf[start + u(i)] = source[i]
            yn = y[n].reshape(-1)
            for oh in range(OH):
                for ow in range(OW):
                    base, out = u(oh) * step_h + u(ow) * step_w, u(oh * OW + ow) * chans
                    for block in range(0, C - 7, 8):
                        c = u(block)
                        a0, a1, a2, a3 = bias[c], bias[c + u(1)], bias[c + u(2)], bias[c + u(3)]
                        a4, a5 = bias[c + u(4)], bias[c + u(5)]
                        a6, a7 = bias[c + u(6)], bias[c + u(7)]
                        for kh in range(kernel_h):
                            for kw in range(kernel_w):
                                i = base + u(kh) * tap_h + u(kw) * tap_w + c
                                j = u(kh * kernel_w + kw) * chans + c
                                a0 += pf[i] * wf[j]
                                a1 += pf[i + u(1)] * wf[j + u(1)]
                                a2 += pf[i + u(2)] * wf[j + u(2)]
                                a3 += pf[i + u(3)] * wf[j + u(3)]
                                a4 += pf[i + u(4)] * wf[j + u(4)]
                                a5 += pf[i + u(5)] * wf[j + u(5)]
                                a6 += pf[i + u(6)] * wf[j + u(6)]
                                a7 += pf[i + u(7)] * wf[j + u(7)]
                        o = out + c
                        yn[o], yn[o + u(1)], yn[o + u(2)], yn[o + u(3)] = a0, a1, a2, a3
                        yn[o + u(4)], yn[o + u(5)], yn[o + u(6)], yn[o + u(7)] = a4, a5, a6, a7
                    for rest in range(C - C % 8, C):
                        c = u(rest)
                        total = bias[c]
                        for kh in range(kernel_h):
                            for kw in range(kernel_w):
                                total += (pf[base + u(kh) * tap_h + u(kw) * tap_w + c]
                                          * wf[u(kh * kernel_w + kw) * chans + c])
                        yn[out + c] = total

    return depthwise_registers


def _weight_grad_source(kernel_h, kernel_w):
    """The weight-gradient loop for a kernel_h x kernel_w kernel (closure constants)."""

    def depthwise_weight_rows(x, dy, g, rows, pad):
        """rows (OW, kernel_h * kernel_w, C), zero on entry, += the products of the padded
        x and dy summed over the images and output rows: ``rows[ow, t, c] = sum_{n, oh}
        x_pad[n, oh*SH + kh*DH, ow*SW + kw*DW, c] dy[n, oh, ow, c]`` (the caller sums
        over ow, so each chain has N*OH terms). The rows of one output column lie
        together: laid out per tap, each tap's row was 4 KB from the next one's, and the
        loads and stores 4 KB apart stalled each other. Each tap's eight lanes are read
        before any is written, which lets the vectorizer pack them."""
        H, W, OH, OW, _, _, SH, SW, DH, DW, PH, PW = g
        N, C = dy.shape[0], dy.shape[3]
        Wp = pad.shape[1]
        pf, rf = pad.reshape(-1), rows.reshape(-1)
        chans, taps = u(C), u(kernel_h * kernel_w)
        tap_h, tap_w = u(DH * Wp * C), u(DW * C)
        step_h, step_w = u(SH * Wp * C), u(SW * C)
        for n in range(N):
            for h in range(H):  # the image into the padded scratch
                source, start = x[n, h].reshape(-1), u((h + PH) * Wp + PW) * chans
                for i in range(W * C):
                    pf[start + u(i)] = source[i]
            dyn = dy[n].reshape(-1)
            for oh in range(OH):
                for ow in range(OW):
                    base, grad = u(oh) * step_h + u(ow) * step_w, u(oh * OW + ow) * chans
                    for block in range(0, C - 7, 8):
                        c = grad + u(block)
                        d0, d1, d2, d3 = dyn[c], dyn[c + u(1)], dyn[c + u(2)], dyn[c + u(3)]
                        d4, d5, d6, d7 = dyn[c + u(4)], dyn[c + u(5)], dyn[c + u(6)], dyn[c + u(7)]
                        for kh in range(kernel_h):
                            for kw in range(kernel_w):
                                i = base + u(kh) * tap_h + u(kw) * tap_w + u(block)
                                r = (u(ow) * taps + u(kh * kernel_w + kw)) * chans + u(block)
                                r0 = rf[r] + pf[i] * d0
                                r1 = rf[r + u(1)] + pf[i + u(1)] * d1
                                r2 = rf[r + u(2)] + pf[i + u(2)] * d2
                                r3 = rf[r + u(3)] + pf[i + u(3)] * d3
                                r4 = rf[r + u(4)] + pf[i + u(4)] * d4
                                r5 = rf[r + u(5)] + pf[i + u(5)] * d5
                                r6 = rf[r + u(6)] + pf[i + u(6)] * d6
                                r7 = rf[r + u(7)] + pf[i + u(7)] * d7
                                rf[r], rf[r + u(1)], rf[r + u(2)], rf[r + u(3)] = r0, r1, r2, r3
                                rf[r + u(4)], rf[r + u(5)] = r4, r5
                                rf[r + u(6)], rf[r + u(7)] = r6, r7
                    for rest in range(C - C % 8, C):
                        c, d = u(rest), dyn[grad + u(rest)]
                        for kh in range(kernel_h):
                            for kw in range(kernel_w):
                                r = (u(ow) * taps + u(kh * kernel_w + kw)) * chans + c
                                rf[r] += pf[base + u(kh) * tap_h + u(kw) * tap_w + c] * d

    return depthwise_weight_rows


def _gradients_source(kernel_h, kernel_w):
    """The backward loop (dx and dw together) for a kernel_h x kernel_w kernel."""

    def depthwise_gradients(x, wt, dy, g, dx, rows, pad, pad_dx):
        """dx (N, H, W, C) and the weight-gradient rows (as :func:`_weight_grad_source`'s)
        in one pass over dy: each pixel's eight lanes of dy go to each tap's rows (times
        x) and into the padded dx scratch ``pad_dx`` (times w; ``pad``'s shape), whose
        image part is then dx's image."""
        H, W, OH, OW, _, _, SH, SW, DH, DW, PH, PW = g
        N, C = dy.shape[0], dy.shape[3]
        Wp = pad.shape[1]
        pf, qf = pad.reshape(-1), pad_dx.reshape(-1)
        rf, wf = rows.reshape(-1), wt.reshape(-1)
        chans, taps = u(C), u(kernel_h * kernel_w)
        tap_h, tap_w = u(DH * Wp * C), u(DW * C)
        step_h, step_w = u(SH * Wp * C), u(SW * C)
        for n in range(N):
            for h in range(H):  # the image into the padded scratch
                source, start = x[n, h].reshape(-1), u((h + PH) * Wp + PW) * chans
                for i in range(W * C):
                    pf[start + u(i)] = source[i]
            qf[:] = 0
            dyn = dy[n].reshape(-1)
            for oh in range(OH):
                for ow in range(OW):
                    base, grad = u(oh) * step_h + u(ow) * step_w, u(oh * OW + ow) * chans
                    for block in range(0, C - 7, 8):
                        c = grad + u(block)
                        d0, d1, d2, d3 = dyn[c], dyn[c + u(1)], dyn[c + u(2)], dyn[c + u(3)]
                        d4, d5, d6, d7 = dyn[c + u(4)], dyn[c + u(5)], dyn[c + u(6)], dyn[c + u(7)]
                        for kh in range(kernel_h):
                            for kw in range(kernel_w):
                                t = u(kh * kernel_w + kw)
                                i = base + u(kh) * tap_h + u(kw) * tap_w + u(block)
                                r, j = (u(ow) * taps + t) * chans + u(block), t * chans + u(block)
                                r0 = rf[r] + pf[i] * d0
                                r1 = rf[r + u(1)] + pf[i + u(1)] * d1
                                r2 = rf[r + u(2)] + pf[i + u(2)] * d2
                                r3 = rf[r + u(3)] + pf[i + u(3)] * d3
                                r4 = rf[r + u(4)] + pf[i + u(4)] * d4
                                r5 = rf[r + u(5)] + pf[i + u(5)] * d5
                                r6 = rf[r + u(6)] + pf[i + u(6)] * d6
                                r7 = rf[r + u(7)] + pf[i + u(7)] * d7
                                q0 = qf[i] + d0 * wf[j]
                                q1 = qf[i + u(1)] + d1 * wf[j + u(1)]
                                q2 = qf[i + u(2)] + d2 * wf[j + u(2)]
                                q3 = qf[i + u(3)] + d3 * wf[j + u(3)]
                                q4 = qf[i + u(4)] + d4 * wf[j + u(4)]
                                q5 = qf[i + u(5)] + d5 * wf[j + u(5)]
                                q6 = qf[i + u(6)] + d6 * wf[j + u(6)]
                                q7 = qf[i + u(7)] + d7 * wf[j + u(7)]
                                rf[r], rf[r + u(1)], rf[r + u(2)], rf[r + u(3)] = r0, r1, r2, r3
                                rf[r + u(4)], rf[r + u(5)] = r4, r5
                                rf[r + u(6)], rf[r + u(7)] = r6, r7
                                qf[i], qf[i + u(1)], qf[i + u(2)], qf[i + u(3)] = q0, q1, q2, q3
                                qf[i + u(4)], qf[i + u(5)] = q4, q5
                                qf[i + u(6)], qf[i + u(7)] = q6, q7
                    for rest in range(C - C % 8, C):
                        c, d = u(rest), dyn[grad + u(rest)]
                        for kh in range(kernel_h):
                            for kw in range(kernel_w):
                                t = u(kh * kernel_w + kw)
                                i = base + u(kh) * tap_h + u(kw) * tap_w + c
                                rf[(u(ow) * taps + t) * chans + c] += pf[i] * d
                                qf[i] += d * wf[t * chans + c]
            for h in range(H):  # the image part of the padded dx
                target, start = dx[n, h].reshape(-1), u((h + PH) * Wp + PW) * chans
                for i in range(W * C):
                    target[i] = qf[start + u(i)]

    return depthwise_gradients


def _signature(dtype, ranks):
    """numba types of C-contiguous ``dtype`` arrays of these ranks ("g": the geometry
    tuple of 12 ints)."""
    item = numba.from_dtype(np.dtype(dtype))
    return tuple(numba.types.UniTuple(numba.int64, 12) if rank == "g"
                 else numba.types.Array(item, rank, "C") for rank in ranks)


def _slp_compiled(function, ranks):
    """``function`` compiled for float32 and float64 (:func:`_signature` of ``ranks``)
    with the SLP vectorizer on, and no other signature."""
    kernel = numba.njit(cache=True, nogil=True)(function)
    with global_compiler_lock:  # reentrant; every numba compilation takes it
        previous = config.SLP_VECTORIZE
        config.SLP_VECTORIZE = 1
        try:
            for dtype in (np.float32, np.float64):
                kernel.compile(_signature(dtype, ranks))
        finally:
            config.SLP_VECTORIZE = previous
    kernel.disable_compile()  # another signature would compile without the vectorizer
    return kernel


@functools.cache
def depthwise_kernel(kernel_h, kernel_w):
    """The compiled forward (:func:`_depthwise_source`) of a kernel_h x kernel_w kernel:
    ``(x, wt, g, bias, y, pad)``."""
    return _slp_compiled(_depthwise_source(kernel_h, kernel_w), (4, 2, "g", 1, 4, 3))


@functools.cache
def weight_rows_kernel(kernel_h, kernel_w):
    """The compiled weight-gradient rows (:func:`_weight_grad_source`) of a kernel_h x
    kernel_w kernel: ``(x, dy, g, rows, pad)``."""
    return _slp_compiled(_weight_grad_source(kernel_h, kernel_w), (4, 4, "g", 3, 3))


@functools.cache
def gradients_kernel(kernel_h, kernel_w):
    """The compiled backward (:func:`_gradients_source`) of a kernel_h x kernel_w kernel:
    ``(x, wt, dy, g, dx, rows, pad, pad_dx)``."""
    return _slp_compiled(_gradients_source(kernel_h, kernel_w), (4, 2, 4, "g", 4, 3, 3, 3))
