"""Narrow convolutions, grouped or not, with their sums in registers (numba, one loop per
kernel size and group width).

Per row of outputs, eight output pixels at a time, and per group and block of eight of
its output channels, 8 x 8 accumulators start at the bias and take every tap in (kh,
kw, c) order, then are stored once::

    y[n, oh, ow, g*Og + j] = b[g*Og + j]
        + sum_{kh, kw, c} x_pad[n, oh*SH + kh*DH, ow*SW + kw*DW, g*Cg + c] w[kh, kw, c, g*Og + j]

Each input value is one broadcast into the eight lanes of its pixel, each weight row of
eight output channels one load that the eight pixels share: eight independent chains of
fused multiply-adds, where one pixel's single chain waited on each add in turn (3x3, 4
groups of 8 channels, (32, 32, 32, 32) float32 on two threads: 5.7 ms for one pixel at a
time, 3.2 for four, 2.6 for eight; im2col and batched GEMMs 4.6). The kernel size and
the group width are constants of each compiled loop, so the taps unroll into straight-line
code that LLVM's SLP vectorizer packs (:func:`.register_taps.slp_compiled`). Pixels past
the last block of eight take one pixel at a time. Each image is first copied into a
zero-padded scratch image (the caller's ``pad``), so no tap is checked. float32 loops
whose outputs per group are a multiple of 16 take four pixels by 16 channels instead (the
weight gradient: four input by 16 output channels), one 512-bit register per row where
float32's eight lanes filled half of one (:data:`WIDE_LANES`).

A dense convolution of few channels (1 to 16 inputs, at most ``MAX_DENSE_OUTPUTS``
outputs) is one such group: its GEMM is as thin (3x3 dilated 16 -> 16, (32, 32, 32, 16),
forward + backward: float32 11.3 -> 7.2 ms, float64 35.9 -> 11.7; torch 13.3 and 23.9;
a first layer on one channel, 3x3 1 -> 32 of (64, 28, 28, 1): 4.1 -> 3.8 ms).

:mod:`.grouped_conv` calls these loops: on the two threads, and a 3-D convolution's
depth taps as calls on slabs of planes (the forward compiled with ``accumulate``).

With unit strides the same loop gives dx: the correlation of dy with the flipped kernel
whose groups map Og channels to Cg (:func:`transposed_weight`).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from . import register_taps
from .register_taps import _inline, _into_padding, _lanes, _steps, _store

u = np.uint64

LANES = 8
"""Output channels per register block: a group's outputs must be a multiple of it."""
MAX_GROUP_WIDTH = 16
"""The widest group (input channels) the loops take; their unrolled code grows with it."""
WIDE_LANES = 16
"""float32 forwards whose outputs per group are a multiple of 16 sum four pixels by 16
output channels (one 512-bit register per pixel where the CPU has them) instead of eight
by eight: the same sums in the same order, with half the broadcast loads per weight row
(one core, the dilated 3x3 16 -> 16 of (16, 32, 32, 16): 0.99 -> 0.78 ms; eight pixels
by 16 channels gained nothing, 1.00). float64's eight lanes already fill such a
register."""
MAX_DENSE_OUTPUTS = 32
"""The most output channels of a convolution of one group that the loops take: past it
the GEMM, which reuses each gathered window for every output, wins (16 -> 48 channels,
3x3, (32, 32, 32, 16) float32: 17.0 against 15.1 ms; 16 -> 16: 7.7 against 9.4)."""


@_inline
def _fma(acc, v, w, j):
    """acc[k] + v * w[j + k] for the eight lanes k."""
    return (acc[0] + v * w[j], acc[1] + v * w[j + u(1)], acc[2] + v * w[j + u(2)],
            acc[3] + v * w[j + u(3)], acc[4] + v * w[j + u(4)], acc[5] + v * w[j + u(5)],
            acc[6] + v * w[j + u(6)], acc[7] + v * w[j + u(7)])


# Eight rows of eight lanes. Narrow (wide = 0): row r is pixel r, the block's eight
# channels; wide (1): row r is pixel r // 2, channels 8 * (r % 2) to 8 * (r % 2) + 7 of
# the block's 16 (:data:`WIDE_LANES`). Pixel p_r = r >> wide, lanes from l_r = 8 * (r & wide).
@_inline
def _fma_rows(rows, a, i, step, w, j, wide):
    """rows[r] + a[i + p_r * step] * w[j + l_r:][:8] for the eight rows r: eight
    independent chains of multiply-adds sharing the block's weights."""
    return (_fma(rows[0], a[i], w, j),
            _fma(rows[1], a[i + u(1 >> wide) * step], w, j + u(8 * (1 & wide))),
            _fma(rows[2], a[i + u(2 >> wide) * step], w, j),
            _fma(rows[3], a[i + u(3 >> wide) * step], w, j + u(8 * (3 & wide))),
            _fma(rows[4], a[i + u(4 >> wide) * step], w, j),
            _fma(rows[5], a[i + u(5 >> wide) * step], w, j + u(8 * (5 & wide))),
            _fma(rows[6], a[i + u(6 >> wide) * step], w, j),
            _fma(rows[7], a[i + u(7 >> wide) * step], w, j + u(8 * (7 & wide))))


@_inline
def _row_at(t, step, r, wide):
    """Where row r of a block lies: t + p_r * step + l_r."""
    return t + u(r >> wide) * step + u(8 * (r & wide))


@_inline
def _load_rows(a, t, step, wide):
    """The eight rows of eight lanes at a[t + p_r * step + l_r:][:8]."""
    return (_lanes(a, t), _lanes(a, _row_at(t, step, 1, wide)),
            _lanes(a, _row_at(t, step, 2, wide)), _lanes(a, _row_at(t, step, 3, wide)),
            _lanes(a, _row_at(t, step, 4, wide)), _lanes(a, _row_at(t, step, 5, wide)),
            _lanes(a, _row_at(t, step, 6, wide)), _lanes(a, _row_at(t, step, 7, wide)))


@_inline
def _store_rows(target, t, step, rows, wide):
    """target[t + p_r * step + l_r:][:8] = rows[r] for the eight rows r."""
    for r in range(8):
        _store(target, _row_at(t, step, r, wide), rows[r])


@_inline
def _layout(x, out, g, pad, width):
    """(groups, outputs per group, output channels, the flat padded scratch, and the flat
    offsets of one tap down and across and of one output row and column) of a grouped
    loop over x (N, H, W, C) whose output (or dy) is ``out``."""
    groups = x.shape[3] // width
    return (groups, out.shape[3] // groups, u(out.shape[3]), pad.reshape(-1),
            *_steps(g, pad.shape[1], x.shape[3]))


def _grouped_source(kernel_h, kernel_w, width, accumulate, wide=False):
    """The forward loop for a kernel_h x kernel_w kernel over groups of ``width`` input
    channels (closure constants: the taps unroll); with ``accumulate`` the sums start at
    y's values instead of the bias (a 3-D convolution's planes: one call per depth tap);
    ``wide``: four pixels by :data:`WIDE_LANES` channels per register block."""
    wide = int(wide)  # 0 or 1: see _fma_rows
    pixels, block_lanes = 8 >> wide, LANES << wide

    def grouped_registers(x, wt, g, bias, y, pad):
        """y (N, OH, OW, C_y) for x (N, H, W, C), wt (kernel_h * kernel_w * width, C_y),
        bias (C_y,) (unread with ``accumulate``); ``pad`` one zero-padded image (see the
        module doc)."""
        OH, OW = g[2], g[3]
        groups, per_group, outs, pf, tap_h, tap_w, step_h, step_w = _layout(x, y, g, pad,
                                                                            width)
        wf = wt.reshape(-1)
        for n in range(y.shape[0]):
            _into_padding(x[n], pf, pad.shape[1], g[10], g[11])
            yn = y[n].reshape(-1)
            for oh in range(OH):
                for ow in range(0, OW - pixels + 1, pixels):
                    base, out = u(oh) * step_h + u(ow) * step_w, u(oh * OW + ow) * outs
                    for grp in range(groups):
                        for block in range(0, per_group, block_lanes):
                            o = u(grp * per_group + block)
                            # y's sums so far, or the bias for every pixel
                            source, first, stride = ((yn, out + o, outs) if accumulate
                                                     else (bias, o, u(0)))
                            acc = _load_rows(source, first, stride, wide)
                            for kh in range(kernel_h):
                                for kw in range(kernel_w):
                                    i = base + u(kh) * tap_h + u(kw) * tap_w + u(grp * width)
                                    for c in range(width):
                                        j = u((kh * kernel_w + kw) * width + c) * outs + o
                                        acc = _fma_rows(acc, pf, i + u(c), step_w, wf, j,
                                                        wide)
                            _store_rows(yn, out + o, outs, acc, wide)
                for ow in range(OW - OW % pixels, OW):
                    base, out = u(oh) * step_h + u(ow) * step_w, u(oh * OW + ow) * outs
                    for grp in range(groups):
                        for block in range(0, per_group, LANES):
                            o = u(grp * per_group + block)
                            a0 = _lanes(yn, out + o) if accumulate else _lanes(bias, o)
                            for kh in range(kernel_h):
                                for kw in range(kernel_w):
                                    i = base + u(kh) * tap_h + u(kw) * tap_w + u(grp * width)
                                    for c in range(width):
                                        j = u((kh * kernel_w + kw) * width + c) * outs + o
                                        a0 = _fma(a0, pf[i + u(c)], wf, j)
                            _store(yn, out + o, a0)

    return grouped_registers


def _weight_grad_source(kernel_h, kernel_w, width, wide=False):
    """The weight-gradient loop for a kernel_h x kernel_w kernel over groups of ``width``
    input channels (a multiple of 8; closure constants: the taps unroll); ``wide``: blocks
    of four input by :data:`WIDE_LANES` output channels."""
    wide = int(wide)  # 0 or 1: see _fma_rows
    inputs, block_lanes = 8 >> wide, LANES << wide

    def grouped_weight_rows(x, dy, g, rows, pad):
        """rows (kernel_h * kernel_w * width, C_y), += the products of the padded x and dy
        summed over the images and output positions: per output row, tap, group and 8 x 8
        block of (input, output) channels, eight accumulators of eight lanes take the row's
        pixels, then go back to ``rows``."""
        OH, OW = g[2], g[3]
        groups, per_group, outs, pf, tap_h, tap_w, step_h, step_w = _layout(x, dy, g, pad,
                                                                            width)
        rf = rows.reshape(-1)
        for n in range(dy.shape[0]):
            _into_padding(x[n], pf, pad.shape[1], g[10], g[11])
            dyn = dy[n].reshape(-1)
            for oh in range(OH):
                for kh in range(kernel_h):
                    for kw in range(kernel_w):
                        start = u(oh) * step_h + u(kh) * tap_h + u(kw) * tap_w
                        for grp in range(groups):
                            for block in range(0, per_group, block_lanes):
                                o = u(grp * per_group + block)
                                for first in range(0, width, inputs):
                                    r = u((kh * kernel_w + kw) * width + first) * outs + o
                                    acc = _load_rows(rf, r, outs, wide)
                                    for ow in range(OW):
                                        i = start + u(ow) * step_w + u(grp * width + first)
                                        j = u(oh * OW + ow) * outs + o
                                        acc = _fma_rows(acc, pf, i, u(1), dyn, j, wide)
                                    _store_rows(rf, r, outs, acc, wide)

    return grouped_weight_rows


@functools.cache
def grouped_kernel(kernel_h, kernel_w, width, accumulate=False, wide=False):
    """The compiled forward (:func:`_grouped_source`): ``(x, wt, g, bias, y, pad)``; the
    ``wide`` loop for float32 only."""
    return register_taps.slp_compiled(
        _grouped_source(kernel_h, kernel_w, width, accumulate, wide), (4, 2, "g", 1, 4, 3),
        (np.float32,) if wide else (np.float32, np.float64))


def takes_wide(dtype, outs_per_group) -> bool:
    """Whether the forward and weight-gradient loops run wide: float32, outputs per group
    a multiple of :data:`WIDE_LANES`."""
    return dtype == np.float32 and outs_per_group % WIDE_LANES == 0


def takes(w_shape, groups) -> bool:
    """Whether the register loop takes a convolution of weight ``w_shape`` (*K, Cg, C_y):
    groups of 2 to ``MAX_GROUP_WIDTH`` input channels (groups of one are depthwise:
    :mod:`.register_taps`) or one group of 1 to ``MAX_GROUP_WIDTH`` and at most
    ``MAX_DENSE_OUTPUTS`` outputs, outputs per group a multiple of ``LANES``, at most
    ``register_taps.MAX_TAPS`` taps per plane (the loop is 2-D: a 3-D kernel's depth taps
    are calls of it; the caller's ``grouped_conv.covers`` checks the axes)."""
    width, outs = w_shape[-2], w_shape[-1]
    if groups == 1:
        fits = width <= MAX_GROUP_WIDTH and outs <= MAX_DENSE_OUTPUTS
    else:
        fits = 1 < width <= MAX_GROUP_WIDTH
    return (fits and (outs // groups) % LANES == 0
            and math.prod(w_shape[-4:-2]) <= register_taps.MAX_TAPS)


def transposed_shape(w_shape, groups):
    """The shape of :func:`transposed_weight`: (*K, Og, groups * Cg)."""
    *kernel, width, outs = w_shape
    return (*kernel, outs // groups, groups * width)


def transposed_weight(w, groups):
    """The weight of dx as a correlation of dy with the flipped kernel: (*K, Og, groups *
    Cg), ``w_t[k, j, g*Cg + c] = w[K - 1 - k, c, g*Og + j]``."""
    *kernel, width, outs = w.shape
    flipped = w[tuple(slice(None, None, -1) for _ in kernel)]
    split = flipped.reshape(*kernel, width, groups, outs // groups)
    order = (*range(len(kernel)), len(kernel) + 2, len(kernel) + 1, len(kernel))
    return np.ascontiguousarray(split.transpose(order).reshape(transposed_shape(w.shape,
                                                                                groups)))


@functools.cache
def weight_grad_kernel(kernel_h, kernel_w, width, wide=False):
    """The compiled weight gradient (:func:`_weight_grad_source`): ``(x, dy, g, rows,
    pad)``; the ``wide`` loop for float32 only."""
    return register_taps.slp_compiled(_weight_grad_source(kernel_h, kernel_w, width, wide),
                                      (4, 4, "g", 2, 3),
                                      (np.float32,) if wide else (np.float32, np.float64))


def takes_weight_grad(w_shape, groups) -> bool:
    """Whether the register loop takes the weight gradient too: :func:`takes`, and input
    channels per group a multiple of ``LANES``."""
    return takes(w_shape, groups) and w_shape[-2] % LANES == 0
