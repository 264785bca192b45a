"""The compiled max and average pooling loops, written for 3-D channels-last data
(N, D, H, W, C); 1-D and 2-D data get unit axes in front (``dispatch.as_3d``). ``g`` is
the flat geometry of ``dispatch.geometry_3d``: output ``o`` and tap ``k`` read input
``o*stride + k*dilation - pad`` along each axis.

Every loop keeps the channel axis innermost: it is contiguous, so the per-tap work is
one vectorized pass over C values. For each row of outputs, the forwards and the
average backward sweep each input row the windows read (one per (kd, kh)) from left to
right, window by window, rather than all taps of one window before the next: each
window still sees its taps in row-major order, and the memory is read as one sequential
stream (1.3-2x faster than KD*KH interleaved ones once the input is out of the cache).
A backward clears each image's dx just before it scatters into it, while the image is
in the cache. The loops are compiled twice by :func:`.kernels.twins`: ``prange`` over
the batch and serially.
"""

from __future__ import annotations

import numpy as np


def pool_kernels(jit, prange):
    """The pooling loops compiled with ``jit``; ``prange`` is numba.prange or range."""

    @jit
    def max_pool(x, g, y, index):
        """y = each window's maximum by PyTorch's rule: the first in-bounds value,
        replaced by any later one that is larger or NaN; ``index`` is the winner's flat
        position (d*H + h)*W + w in its image (-1 and y = -inf: no in-bounds tap)."""
        D, H, W, OD, OH, OW, KD, KH, KW, SD, SH, SW, DD, DH, DW, PD, PH, PW = g
        N, C = x.shape[0], x.shape[4]
        for row in prange(N * OD * OH):
            n, od, oh = row // (OD * OH), row // OH % OD, row % OH
            for ow in range(OW):
                for c in range(C):
                    y[n, od, oh, ow, c] = -np.inf
                    index[n, od, oh, ow, c] = -1
            for kd in range(KD):
                d = od * SD + kd * DD - PD
                if d < 0 or d >= D:
                    continue
                for kh in range(KH):
                    h = oh * SH + kh * DH - PH
                    if h < 0 or h >= H:
                        continue
                    for ow in range(OW):  # along input row (d, h), window by window
                        for kw in range(KW):
                            w = ow * SW + kw * DW - PW
                            if w < 0 or w >= W:
                                continue
                            p = (d * H + h) * W + w
                            for c in range(C):  # branch-free, so it vectorizes
                                v, best = x[n, d, h, w, c], y[n, od, oh, ow, c]
                                i = index[n, od, oh, ow, c]
                                take = (i < 0) | (v > best) | (v != v)
                                y[n, od, oh, ow, c] = v if take else best
                                index[n, od, oh, ow, c] = p if take else i

    @jit
    def max_pool_backward(dy, index, dx):
        """dx[n, winner, c] = sum of the dy whose window it won; ``dx`` is (N, D*H*W*C)
        and each image's row is cleared here first."""
        N, OD, OH, OW, C = dy.shape
        for n in prange(N):
            dx[n] = 0
            for od in range(OD):
                for oh in range(OH):
                    for ow in range(OW):
                        for c in range(C):
                            p = index[n, od, oh, ow, c]
                            if p >= 0:
                                dx[n, p * C + c] += dy[n, od, oh, ow, c]

    @jit
    def avg_pool(x, g, scale, y):
        """y = (the sum of the in-bounds window values) * scale[od, oh, ow] (= 1/divisor)."""
        D, H, W, OD, OH, OW, KD, KH, KW, SD, SH, SW, DD, DH, DW, PD, PH, PW = g
        N, C = x.shape[0], x.shape[4]
        for row in prange(N * OD * OH):
            n, od, oh = row // (OD * OH), row // OH % OD, row % OH
            for ow in range(OW):
                for c in range(C):
                    y[n, od, oh, ow, c] = 0
            for kd in range(KD):
                d = od * SD + kd * DD - PD
                if d < 0 or d >= D:
                    continue
                for kh in range(KH):
                    h = oh * SH + kh * DH - PH
                    if h < 0 or h >= H:
                        continue
                    for ow in range(OW):
                        for kw in range(KW):
                            w = ow * SW + kw * DW - PW
                            if w < 0 or w >= W:
                                continue
                            for c in range(C):
                                y[n, od, oh, ow, c] += x[n, d, h, w, c]
            for ow in range(OW):
                s = scale[od, oh, ow]
                for c in range(C):
                    y[n, od, oh, ow, c] *= s

    @jit
    def avg_pool_backward(dy, g, scale, dx, tiles):
        """dx[n, i, c] = sum of dy[n, o, c] * scale[o] over the windows o holding i. With
        ``tiles`` (each input in exactly one window) every share is stored once, else
        each image's dx is cleared and the shares added."""
        D, H, W, OD, OH, OW, KD, KH, KW, SD, SH, SW, DD, DH, DW, PD, PH, PW = g
        N, C = dy.shape[0], dy.shape[4]
        for n in prange(N):
            if not tiles:
                dx[n] = 0
            for od in range(OD):
                for oh in range(OH):
                    for kd in range(KD):
                        d = od * SD + kd * DD - PD
                        if d < 0 or d >= D:
                            continue
                        for kh in range(KH):
                            h = oh * SH + kh * DH - PH
                            if h < 0 or h >= H:
                                continue
                            for ow in range(OW):
                                s = scale[od, oh, ow]
                                for kw in range(KW):
                                    w = ow * SW + kw * DW - PW
                                    if w < 0 or w >= W:
                                        continue
                                    if tiles:
                                        for c in range(C):
                                            dx[n, d, h, w, c] = dy[n, od, oh, ow, c] * s
                                    else:
                                        for c in range(C):
                                            dx[n, d, h, w, c] += dy[n, od, oh, ow, c] * s

    return {"max_pool": max_pool, "max_pool_backward": max_pool_backward,
            "avg_pool": avg_pool, "avg_pool_backward": avg_pool_backward}
