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
A "same" convolution (unit strides, the input's size out) of up to 9 taps takes the
one-pass backward of :mod:`.unrolled_taps` instead, whose sums stay in registers.

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

MAX_TAPS = 25
"""The largest kernel (in taps) the register loops take; larger ones keep the row loops
of :mod:`.kernels`. Their unrolled code then outgrows what LLVM unrolls and packs well:
one core, (16, 28, 28, 64) float32, forward / backward ms against the row loops: 5x5
1.59 / 4.30 against 1.95 / 5.04; 7x7 3.74 / 12.5 against 3.33 / 8.07; 9x9 6.40 / 29.1
against 5.58 / 13.6."""


def _helper(function):
    """A loop the kernels call, compiled where numba is installed."""
    return function if numba is None else numba.njit(cache=True, nogil=True)(function)


def _inline(function):
    """A few lines the kernels take in as their own (numba inlines them before LLVM sees
    the code, so the vectorizer packs their lanes with the caller's)."""
    return function if numba is None else numba.njit(inline="always")(function)


@_helper
def _into_padding(image, pf, Wp, PH, PW):
    """The image (H, W, C) into the flat padded scratch ``pf`` (rows of Wp positions),
    from row PH and column PW."""
    H, W, C = image.shape
    for h in range(H):
        source, start = image[h].reshape(-1), u((h + PH) * Wp + PW) * u(C)
        for i in range(W * C):
            pf[start + u(i)] = source[i]


@_helper
def _out_of_padding(pf, image, Wp, PH, PW):
    """The inverse of :func:`_into_padding`: the image part of ``pf`` into ``image``."""
    H, W, C = image.shape
    for h in range(H):
        target, start = image[h].reshape(-1), u((h + PH) * Wp + PW) * u(C)
        for i in range(W * C):
            target[i] = pf[start + u(i)]


@_helper
def _steps(g, Wp, C):
    """(tap_h, tap_w, step_h, step_w): the flat offsets in the padded image of one tap
    down and across (the dilations) and of one output row and column (the strides)."""
    SH, SW, DH, DW = g[6], g[7], g[8], g[9]
    return u(DH * Wp * C), u(DW * C), u(SH * Wp * C), u(SW * C)


@_inline
def _lanes(a, i):
    """a[i], ..., a[i + 7]: eight lanes, one SIMD register once packed."""
    return (a[i], a[i + u(1)], a[i + u(2)], a[i + u(3)],
            a[i + u(4)], a[i + u(5)], a[i + u(6)], a[i + u(7)])


@_inline
def _store(target, t, s):
    """target[t + k] = s[k] for the eight lanes k."""
    target[t], target[t + u(1)], target[t + u(2)], target[t + u(3)] = s[0], s[1], s[2], s[3]
    target[t + u(4)], target[t + u(5)], target[t + u(6)], target[t + u(7)] = s[4], s[5], s[6], s[7]


@_inline
def _add_products(target, t, a, i, d):
    """target[t + k] += a[i + k] * d[k] for the eight lanes k, every lane read before any
    is written (so the vectorizer may pack them: target may alias a)."""
    _store(target, t, (target[t] + a[i] * d[0], target[t + u(1)] + a[i + u(1)] * d[1],
                       target[t + u(2)] + a[i + u(2)] * d[2],
                       target[t + u(3)] + a[i + u(3)] * d[3],
                       target[t + u(4)] + a[i + u(4)] * d[4],
                       target[t + u(5)] + a[i + u(5)] * d[5],
                       target[t + u(6)] + a[i + u(6)] * d[6],
                       target[t + u(7)] + a[i + u(7)] * d[7]))


def _depthwise_source(kernel_h, kernel_w):
    """The forward loop for a kernel_h x kernel_w kernel (closure constants: the taps
    unroll)."""

    def depthwise_registers(x, wt, g, bias, y, pad):
        """y (N, OH, OW, C) for x (N, H, W, C), wt (kernel_h * kernel_w, C), bias (C,);
        ``pad`` one zero-padded image (see the module doc)."""
        OH, OW, PH, PW = g[2], g[3], g[10], g[11]
        N, C = y.shape[0], y.shape[3]
        Wp = pad.shape[1]
        pf, wf = pad.reshape(-1), wt.reshape(-1)
        chans = u(C)
        tap_h, tap_w, step_h, step_w = _steps(g, Wp, C)
        for n in range(N):
            _into_padding(x[n], pf, Wp, PH, PW)
            yn = y[n].reshape(-1)
            for oh in range(OH):
                for ow in range(OW):
                    base, out = u(oh) * step_h + u(ow) * step_w, u(oh * OW + ow) * chans
                    for block in range(0, C - 7, 8):
                        c = u(block)
                        a0, a1, a2, a3, a4, a5, a6, a7 = _lanes(bias, c)
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
                        _store(yn, out + c, (a0, a1, a2, a3, a4, a5, a6, a7))
                    for rest in range(C - C % 8, C):
                        c = u(rest)
                        total = bias[c]
                        for kh in range(kernel_h):
                            for kw in range(kernel_w):
                                total += (pf[base + u(kh) * tap_h + u(kw) * tap_w + c]
                                          * wf[u(kh * kernel_w + kw) * chans + c])
                        yn[out + c] = total

    return depthwise_registers


def _backward_source(kernel_h, kernel_w, with_dx):
    """The backward loop for a kernel_h x kernel_w kernel: the weight-gradient rows, and
    dx too where ``with_dx`` (closure constants: the taps unroll, the dx code goes)."""

    def depthwise_backward_registers(x, wt, dy, g, dx, rows, pad, pad_dx):
        """rows (OW, kernel_h * kernel_w, C), zero on entry, += the products of the padded
        x and dy summed over the images and output rows (the caller sums over ow, so each
        chain has N*OH terms); with dx, each dy also goes into the padded dx scratch
        ``pad_dx`` (``pad``'s shape) times w, whose image part is then dx's image. The
        rows of one output column lie together: laid out per tap, each tap's row was 4 KB
        from the next one's, and loads and stores 4 KB apart stalled each other."""
        OH, OW, PH, PW = g[2], g[3], g[10], g[11]
        N, C = dy.shape[0], dy.shape[3]
        Wp = pad.shape[1]
        pf, qf = pad.reshape(-1), pad_dx.reshape(-1)
        rf, wf = rows.reshape(-1), wt.reshape(-1)
        chans, taps = u(C), u(kernel_h * kernel_w)
        tap_h, tap_w, step_h, step_w = _steps(g, Wp, C)
        for n in range(N):
            _into_padding(x[n], pf, Wp, PH, PW)
            if with_dx:
                qf[:] = 0
            dyn = dy[n].reshape(-1)
            for oh in range(OH):
                for ow in range(OW):
                    base, grad = u(oh) * step_h + u(ow) * step_w, u(oh * OW + ow) * chans
                    for block in range(0, C - 7, 8):
                        lanes = _lanes(dyn, grad + u(block))
                        for kh in range(kernel_h):
                            for kw in range(kernel_w):
                                t = u(kh * kernel_w + kw)
                                i = base + u(kh) * tap_h + u(kw) * tap_w + u(block)
                                _add_products(rf, (u(ow) * taps + t) * chans + u(block), pf, i,
                                              lanes)
                                if with_dx:
                                    _add_products(qf, i, wf, t * chans + u(block), lanes)
                    for rest in range(C - C % 8, C):
                        c, d = u(rest), dyn[grad + u(rest)]
                        for kh in range(kernel_h):
                            for kw in range(kernel_w):
                                t = u(kh * kernel_w + kw)
                                i = base + u(kh) * tap_h + u(kw) * tap_w + c
                                rf[(u(ow) * taps + t) * chans + c] += pf[i] * d
                                if with_dx:
                                    qf[i] += wf[t * chans + c] * d
            if with_dx:
                _out_of_padding(qf, dx[n], Wp, PH, PW)

    return depthwise_backward_registers


def _signature(dtype, ranks):
    """numba types of C-contiguous ``dtype`` arrays of these ranks ("g": the geometry
    tuple of 12 ints; "t": a read-only 2-D table of int64)."""
    item = numba.from_dtype(np.dtype(dtype))
    special = {"g": numba.types.UniTuple(numba.int64, 12),
               "t": numba.types.Array(numba.int64, 2, "C", readonly=True)}
    return tuple(special[rank] if rank in special else numba.types.Array(item, rank, "C")
                 for rank in ranks)


def slp_compiled(function, ranks, dtypes=(np.float32, np.float64)):
    """``function`` compiled for ``dtypes`` (:func:`_signature` of ``ranks``) with the SLP
    vectorizer on, and no other signature."""
    kernel = numba.njit(cache=True, nogil=True)(function)
    with global_compiler_lock:  # reentrant; every numba compilation takes it
        previous = config.SLP_VECTORIZE
        config.SLP_VECTORIZE = 1
        try:
            for dtype in dtypes:
                kernel.compile(_signature(dtype, ranks))
        finally:
            config.SLP_VECTORIZE = previous
    kernel.disable_compile()  # another signature would compile without the vectorizer
    return kernel


@functools.cache
def depthwise_kernel(kernel_h, kernel_w):
    """The compiled forward (:func:`_depthwise_source`) of a kernel_h x kernel_w kernel:
    ``(x, wt, g, bias, y, pad)``."""
    return slp_compiled(_depthwise_source(kernel_h, kernel_w), (4, 2, "g", 1, 4, 3))


@functools.cache
def backward_kernel(kernel_h, kernel_w, with_dx=True):
    """The compiled backward (:func:`_backward_source`) of a kernel_h x kernel_w kernel:
    ``(x, wt, dy, g, dx, rows, pad, pad_dx)`` (without dx, ``dx`` and ``pad_dx`` are not
    touched)."""
    source = _backward_source(kernel_h, kernel_w, with_dx)
    return slp_compiled(source, (4, 2, 4, "g", 4, 3, 3, 3))
