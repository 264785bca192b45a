"""The depthwise convolution forward with its sums in registers (numba, one per kernel size).

Per output pixel and block of 8 channels, eight accumulators start at the bias and take
every tap in (kh, kw) order, then are stored once::

    y[n, oh, ow, c] = b[c] + sum_{kh, kw} x_pad[n, oh*SH + kh*DH, ow*SW + kw*DW, c] w[kh, kw, c]

The eight lanes are written out and the kernel size is a constant of each compiled
kernel, so the taps unroll into straight-line code that LLVM's SLP vectorizer packs into
SIMD registers: a sum never goes through memory, where the row loops of
:mod:`.kernels` load and store ``y`` at every tap. Numba compiles with the SLP vectorizer
off, so these kernels are compiled with it on, under numba's compiler lock (no other
compilation sees the setting). Indices are unsigned: numba adds a negative-index branch
to every signed index, which stops the vectorizer. Channels past the last block of 8
take a scalar loop. Each image is first copied into a zero-padded scratch image (the
caller's ``pad``, (H + pads, W + pads, C), zero outside the copy), so no tap is checked.

The sum is the row loops' sum in the same order (taps outside the image add a zero
product), so the results are theirs, bit for bit. One core, (32, 32, 32, 32) float32,
3x3: 0.56-0.80 ms against the row loop's 1.27-1.29 ms.
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
