"""float32 3x3 convolutions with unit strides by Winograd's F(2x2, 3x3) (numba): 16
multiply-adds per input channel, output channel and 2x2 block of outputs, where summing
the taps takes 36.

A tile is a 2x2 block of outputs, spaced by the dilations (rows ``oh, oh + DH``, columns
``ow, ow + DW``); it reads a 4x4 patch ``d_c`` of the zero-padded input per input channel
c (rows ``oh + i*DH``, columns ``ow + j*DW``, i, j < 4). With ``g_co`` the 3x3 kernel of
channels (c, o)::

    y_tile[o] = b[o] + A^T [ sum_c  (G g_co G^T)  *  (B^T d_c B) ] A      (* elementwise)

    B^T = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]
    G   = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]]
    A^T = [[1, 1, 1, 0], [0, 1, -1, -1]]

which is the tile's correlation exactly in real arithmetic (the minimal filtering
algorithm with interpolation points 0, 1, -1 and infinity). The caller transforms the
weights once (:func:`transformed_weight`, in float64, rounded once to float32); per block
of ``TILE_BLOCK`` tiles the loop transforms their patches (eight channels at a time: only
additions), then each of the 16 positions of the 4x4 transform is a small matrix product
(tiles x Cin) @ (Cin x Cout) whose sums stay in registers (:mod:`.grouped_taps`' rows of
lanes: four tiles by 16 output channels, or eight by eight), and last the output
transform (additions) adds the bias, or y's sums so far with ``accumulate`` (a 3-D
convolution's depth taps, as :mod:`.grouped_conv` calls them).

Rounding: each output is 16 sums of Cin products combined by the two transforms, where
the direct loops chain 9 * Cin products; against float64, 3x3 16 -> 16 of (2, 32, 32, 16)
dilation 2: max error 9.8e-6 here, 2.6e-5 for the direct loop (outputs up to 49).
float64 keeps the direct loops: its rows already run at 0.2-0.5 of torch's time, and its
sums stay the taps' own. An inf among the inputs becomes NaN through the transforms'
differences (inf - inf) where the direct sums give inf: :func:`run` reports whether the
values it stored are all finite, and the caller takes the direct sums where they are not.

Tiles past the output's edge (when a size is not a multiple of twice the dilation) are
computed on the scratch's zeros and not stored; the scratch image is large enough for
every patch (:func:`scratch_shape`). (32, 32, 32, 16) float32, 3x3 dilation 2, 16 -> 16,
the forward beside the direct loop in random order: one core 1.18 ms against 1.65, two
0.80 against 0.98 (the transforms take about 0.42 ms of one core's 1.1); 16 -> 32 2.24
against 3.11, two 1.56 against 2.32. Forward + backward beside torch, three processes:
3x3 16 -> 32 12.8-15.4 -> 10.0-12.7 ms (torch 13.3-15.7; its dx, of 32 input channels,
had run im2col + GEMM), dilated 16 -> 16 4.0-4.6 -> 3.7-4.3 (torch 4.1-4.5), 3x3x3 16 ->
16 of (2, 16, 16, 16, 16) 4.1-4.5 -> 3.5-3.9 (torch 3.5-4.2); the weight gradient keeps
the direct loop (a Winograd one gained 8%: not kept).
"""

from __future__ import annotations

import functools

import numpy as np

from . import register_taps
from .grouped_taps import LANES, WIDE_LANES, _fma_rows, _store_rows
from .register_taps import _inline, _into_padding, _lanes, _store, u

TILE_BLOCK = 8
"""Tiles whose transformed patches and products one pass of the loop holds (16 x 8 x C
values each: they stay in the L1 cache)."""
MAX_CHANNELS = 32
"""The widest input and output the loop takes (measured up to 32; wider convolutions keep
im2col + GEMM, which reuses each gathered window for every output)."""
G = np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]])


def takes(w_shape, groups, axes, dtype) -> bool:
    """Whether the loop takes a convolution: float32, one group, a 3x3 kernel per plane
    with unit strides (2-D axes, or the last two of 3-D ones), input and output channels
    multiples of 8 up to ``MAX_CHANNELS``."""
    plane = axes[-2:]
    width, outs = w_shape[-2], w_shape[-1]
    return (np.dtype(dtype) == np.float32 and groups == 1 and len(axes) >= 2
            and all(a.kernel == 3 and a.stride == 1 for a in plane)
            and all(c % LANES == 0 and c <= MAX_CHANNELS for c in (width, outs)))


def transformed_weight(w, dtype=np.float32):
    """w (*K, 3, 3, Cin, Cout) -> (prod(K), 16 * Cin, Cout) in ``dtype``: G g G^T of every
    channel pair (in float64, rounded once), row ``(4 i + j) * Cin + c`` holding position
    (i, j) of input channel c."""
    cin, outs = w.shape[-2:]
    planes = w.reshape(-1, 3, 3 * cin * outs).astype(np.float64)
    rows = np.matmul(G, planes).reshape(len(planes), 4, 3, cin * outs)  # G along kh
    both = np.matmul(G, rows)  # and along kw: (planes, 4, 4, Cin * Cout)
    return np.ascontiguousarray(both.reshape(len(planes), 16 * cin, outs), dtype=dtype)


@functools.cache
def tiles(oh, ow, dh, dw):
    """(T, 3) int64: each tile's first output (row, column) and whether the loop stores it,
    row-major over the tiles, padded to a multiple of ``TILE_BLOCK`` with copies of the
    last that it does not store (read-only)."""
    rows = [b + p for b in range(0, oh, 2 * dh) for p in range(dh) if b + p < oh]
    cols = [b + p for b in range(0, ow, 2 * dw) for p in range(dw) if b + p < ow]
    firsts = [(r, c, 1) for r in rows for c in cols]
    firsts += [(*firsts[-1][:2], 0)] * (-len(firsts) % TILE_BLOCK) if firsts else []
    table = np.array(firsts, dtype=np.int64).reshape(-1, 3)
    table.flags.writeable = False
    return table


def scratch_shape(g, channels, table):
    """The padded scratch image (Hp, Wp, C): the padded input, and every patch of every
    tile in ``table`` (g: :func:`.dispatch.geometry_2d`)."""
    h, w, dh, dw, ph, pw = g[0], g[1], g[8], g[9], g[10], g[11]
    last_row = int(table[:, 0].max(initial=0)) + 3 * dh + 1
    last_col = int(table[:, 1].max(initial=0)) + 3 * dw + 1
    return max(h + 2 * ph, last_row), max(w + 2 * pw, last_col), channels


@_inline
def _add(a, b):
    return (a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3], a[4] + b[4], a[5] + b[5],
            a[6] + b[6], a[7] + b[7])


@_inline
def _sub(a, b):
    return (a[0] - b[0], a[1] - b[1], a[2] - b[2], a[3] - b[3], a[4] - b[4], a[5] - b[5],
            a[6] - b[6], a[7] - b[7])


@_inline
def _bt(a0, a1, a2, a3):
    """B^T applied to four lane rows."""
    return _sub(a0, a2), _add(a1, a2), _sub(a2, a1), _sub(a1, a3)


@_inline
def _at(m0, m1, m2, m3):
    """A^T applied to four lane rows."""
    return _add(_add(m0, m1), m2), _sub(_sub(m1, m2), m3)


@_inline
def _patch_column(pf, at, tap_h):
    """The four lane rows down a patch column from ``at``, B^T applied."""
    return _bt(_lanes(pf, at), _lanes(pf, at + tap_h), _lanes(pf, at + u(2) * tap_h),
               _lanes(pf, at + u(3) * tap_h))


@_inline
def _zero_rows():
    """Eight rows of eight float32 zeros: the products' sums start there."""
    z = np.float32(0.0)
    row = (z, z, z, z, z, z, z, z)
    return (row, row, row, row, row, row, row, row)


@_inline
def _store_four(target, at, step, rows):
    """target[at + k * step:][:8] = rows[k] for the four lane rows k."""
    _store(target, at, rows[0])
    _store(target, at + step, rows[1])
    _store(target, at + u(2) * step, rows[2])
    _store(target, at + u(3) * step, rows[3])


@_inline
def _output_column(mf, at, step):
    """A^T applied to a column of the 4x4 products: positions at, at + 4, 8, 12 steps."""
    return _at(_lanes(mf, at), _lanes(mf, at + u(4) * step), _lanes(mf, at + u(8) * step),
               _lanes(mf, at + u(12) * step))


@_inline
def _put(y, at, sums, bias, o, accumulate, total):
    """y[at:][:8] = sums + (y's values there, or the bias); returns ``total`` plus the
    values stored."""
    value = _add(_lanes(y, at) if accumulate else _lanes(bias, o), sums)
    _store(y, at, value)
    return _add(total, value)


@_inline
def _transform_patches(pf, vf, oh, ow, Wp, t, channels, tap_h, tap_w, v_step):
    """B^T d B of tile t's patches (first output (oh, ow)), eight channels at a time, into
    vf: position p of channel c at ``p * v_step + t * channels + c``."""
    cin, base = u(channels), (u(oh) * u(Wp) + u(ow)) * u(channels)
    for c in range(0, channels, 8):
        at = base + u(c)
        c0 = _patch_column(pf, at, tap_h)
        c1 = _patch_column(pf, at + tap_w, tap_h)
        c2 = _patch_column(pf, at + u(2) * tap_w, tap_h)
        c3 = _patch_column(pf, at + u(3) * tap_w, tap_h)
        first = u(t) * cin + u(c)
        _store_four(vf, first, v_step, _bt(c0[0], c1[0], c2[0], c3[0]))
        _store_four(vf, first + u(4) * v_step, v_step, _bt(c0[1], c1[1], c2[1], c3[1]))
        _store_four(vf, first + u(8) * v_step, v_step, _bt(c0[2], c1[2], c2[2], c3[2]))
        _store_four(vf, first + u(12) * v_step, v_step, _bt(c0[3], c1[3], c2[3], c3[3]))


def _winograd_source(accumulate, wide):
    """The loop (closure constants: ``accumulate``: the sums start at y's values instead
    of the bias; ``wide``: the products in rows of four tiles by 16 output channels)."""
    wide = int(wide)
    tiles_per, block_lanes, block = 8 >> wide, LANES << wide, TILE_BLOCK

    def winograd_registers(x, ut, g, bias, y, pad, vs, ms, table, check):
        """y (N, OH, OW, Cout) for x (N, H, W, Cin), ut (16 * Cin, Cout)
        (:func:`transformed_weight`), bias (Cout,); scratch: ``pad`` the padded image
        (:func:`scratch_shape`, zero outside the image), ``vs`` (16, TILE_BLOCK, Cin) and
        ``ms`` (16, TILE_BLOCK, Cout); ``table`` the tiles (:func:`tiles`); ``check`` (8,)
        += the sum of the values stored (not finite where an output is not)."""
        total = _lanes(check, u(0))
        OH, OW, DH, DW = g[2], g[3], g[8], g[9]
        Wp, cin, outs = pad.shape[1], u(x.shape[3]), u(y.shape[3])
        pf, uf, vf, mf = pad.reshape(-1), ut.reshape(-1), vs.reshape(-1), ms.reshape(-1)
        tap_h, tap_w, bt = u(DH * Wp) * cin, u(DW) * cin, u(block)
        v_step, m_step = bt * cin, bt * outs  # from one transform position to the next
        for n in range(y.shape[0]):
            _into_padding(x[n], pf, Wp, g[10], g[11])
            yn = y[n].reshape(-1)
            for t0 in range(0, table.shape[0], block):
                for t in range(block):
                    _transform_patches(pf, vf, table[t0 + t, 0], table[t0 + t, 1], Wp, t,
                                       x.shape[3], tap_h, tap_w, v_step)
                for p in range(16):
                    for o in range(0, y.shape[3], block_lanes):
                        i, j = u(p) * v_step, u(p) * cin * outs + u(o)
                        # wide: the block's later four tiles (narrow rows hold all eight)
                        second = i + u(tiles_per) * cin
                        acc = more = _zero_rows()
                        for c in range(x.shape[3]):
                            k = j + u(c) * outs
                            acc = _fma_rows(acc, vf, i + u(c), cin, uf, k, wide)
                            if wide:
                                more = _fma_rows(more, vf, second + u(c), cin, uf, k, wide)
                        r = u(p) * m_step + u(o)
                        _store_rows(mf, r, outs, acc, wide)
                        if wide:
                            _store_rows(mf, r + u(tiles_per) * outs, outs, more, wide)
                for t in range(block):
                    oh, ow, stored = table[t0 + t, 0], table[t0 + t, 1], table[t0 + t, 2]
                    if stored == 0:
                        continue
                    below, right = oh + DH < OH, ow + DW < OW
                    for o in range(0, y.shape[3], 8):
                        first = u(t) * outs + u(o)
                        s0 = _output_column(mf, first, m_step)
                        s1 = _output_column(mf, first + m_step, m_step)
                        s2 = _output_column(mf, first + u(2) * m_step, m_step)
                        s3 = _output_column(mf, first + u(3) * m_step, m_step)
                        top, bottom = _at(s0[0], s1[0], s2[0], s3[0]), _at(s0[1], s1[1], s2[1],
                                                                           s3[1])
                        out = (u(oh) * u(OW) + u(ow)) * outs + u(o)
                        total = _put(yn, out, top[0], bias, u(o), accumulate, total)
                        if right:
                            total = _put(yn, out + u(DW) * outs, top[1], bias, u(o),
                                         accumulate, total)
                        if below:
                            down = out + u(DH) * u(OW) * outs
                            total = _put(yn, down, bottom[0], bias, u(o), accumulate, total)
                            if right:
                                total = _put(yn, down + u(DW) * outs, bottom[1], bias, u(o),
                                             accumulate, total)
        _store(check, u(0), total)

    return winograd_registers


@functools.cache
def winograd_kernel(accumulate=False, wide=False):
    """The compiled loop (:func:`_winograd_source`): ``(x, ut, g, bias, y, pad, vs, ms,
    table, check)``, float32."""
    return register_taps.slp_compiled(_winograd_source(accumulate, wide),
                                      (4, 2, "g", 1, 4, 3, 3, 3, "t", 1), (np.float32,))


def run(x_maps, taps, g, bias, y_maps, calls, accumulate):
    """The loop on each call ``(depth tap, x index, y index)`` of one thread's share, with
    scratch of its own: y_maps[target] from x_maps[source] and taps[depth tap]. Returns
    whether every value it stored is finite (their sum is): an inf among the inputs
    becomes NaN through the transforms' differences (inf - inf) where the direct sums
    give inf, so the caller then takes the direct sums."""
    table = tiles(g[2], g[3], g[8], g[9])
    if len(table) == 0:
        return True
    cin, outs = taps.shape[1] // 16, taps.shape[2]
    kernel = winograd_kernel(accumulate, outs % WIDE_LANES == 0)
    pad = np.zeros(scratch_shape(g, cin, table), np.float32)
    vs = np.empty((16, TILE_BLOCK, cin), np.float32)
    ms = np.empty((16, TILE_BLOCK, outs), np.float32)
    check = np.zeros(LANES, np.float32)
    for depth_tap, source, target in calls:
        kernel(x_maps[source], taps[depth_tap], g, bias, y_maps[target], pad, vs, ms, table,
               check)
    return bool(np.isfinite(check).all())

