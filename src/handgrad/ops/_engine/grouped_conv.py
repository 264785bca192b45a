"""Calls of the register loops of narrow convolutions (:mod:`.grouped_taps`, and for the
float32 3x3 forwards of unit strides Winograd's, :mod:`.winograd_taps`): the forward and
the weight gradient on half the batch per NumPy thread, each half with a zero-padded
scratch image of its own.

A 3-D convolution with a unit depth stride is a sum over its depth taps of the 2-D loop
on slabs of planes: depth tap ``kd`` pairs output plane ``od`` with input plane ``od +
kd * dilation - pad``; for each tap, those planes form one contiguous slab of the input
and one of the output per image (a tap's planes in the depth padding are skipped)::

    y[n, od] = b + sum_kd conv2d(x[n, od + kd*DD - PD], w[kd])
    dw[kd]   = sum_{n, od} conv2d_weight_grad(x[n, od + kd*DD - PD], dy[n, od])

The forward starts y at the bias and each call adds its tap's sums (the loop compiled
with ``accumulate``); the weight-gradient loop adds into its tap's rows anyway. A unit-
stride dx is the forward of the flipped kernel (the caller's), in 3-D as in 2-D.
"""

from __future__ import annotations

import math

import numpy as np

from .._block_threads import on_halves
from . import dispatch, grouped_taps, winograd_taps

MACS_PER_COPIED_VALUE = 32
"""A loop's batch splits on the two threads as a copy of its output's bytes times its
multiply-adds per output value over this would (:func:`_split_bytes`). Forward + dx +
dw, split against one thread (3x3 16 -> 16 float32 unless named): (8, 32, 32, 16) 1.46
against 1.63 ms; (16, 16, 16, 16) float64 0.90 against 1.26 (float32 0.80 against 0.84,
left whole); (4, 16, 16, 16) float64 0.70 against 0.49, left whole; 3x3x3 (2, 16, 16,
16, 16) 3.5 against 5.0 ms, (2, 8, 8, 8, 16) 0.89 against 0.77, left whole."""


def covers(axes, *arrays) -> bool:
    """Whether the compiled loops take these axes: 1-D and 2-D, or 3-D with a unit depth
    stride (a sum of 2-D loops over the depth taps)."""
    return dispatch.covers(axes, *arrays, most=3) and (len(axes) < 3 or axes[0].stride == 1)


def depth_slabs(depth):
    """[(kd, input planes, output planes)] of a unit-stride depth axis: the slices of
    planes that depth tap kd pairs, for the taps that read any input plane."""
    slabs = []
    for kd in range(depth.kernel):
        shift = kd * depth.dilation - depth.pad_before  # input plane = output plane + shift
        first, stop = max(0, -shift), min(depth.size_out, depth.size_in - shift)
        if first < stop:
            slabs.append((kd, slice(first + shift, stop + shift), slice(first, stop)))
    return slabs


def _split_bytes(out, w_shape):
    """The bytes by which :func:`.._block_threads.on_halves` decides to split a loop's
    batch: the output's, times the multiply-adds per output value over
    ``MACS_PER_COPIED_VALUE`` (the loops do far more work per byte than a copy)."""
    macs = math.prod(w_shape[:-1])  # per output value: every tap of every input channel
    return out.nbytes * max(1, macs // MACS_PER_COPIED_VALUE)


def _plane(axes):
    """The axes of the 2-D loop: the last two of 3-D axes, else all."""
    return axes[1:] if len(axes) == 3 else axes


def _maps(a, axes):
    """``a`` C-contiguous, as the loop's 2-D maps (N, H, W, C) (1-D and 2-D data) or as
    it is (3-D data, whose calls index an image and a slab of planes)."""
    a = np.ascontiguousarray(a)
    return a if len(axes) == 3 else dispatch.as_2d(a)


def _calls(axes, images, n):
    """(depth tap, input index, output index) of each loop call on the slice ``images``
    of a batch of ``n``: one call on the images in 1-D and 2-D, one per image and depth
    tap in 3-D (:func:`depth_slabs`)."""
    if len(axes) < 3:
        return [(0, images, images)]
    slabs = depth_slabs(axes[0])
    return [(kd, (i, source), (i, target)) for i in range(*images.indices(n))
            for kd, source, target in slabs]


def _wide(x, w_shape):
    """Whether the loops for x and a weight of ``w_shape`` (*K, Cg, C_y) take 16 lanes
    (:func:`.grouped_taps.takes_wide`)."""
    groups = x.shape[-1] // w_shape[-2]
    return grouped_taps.takes_wide(x.dtype, w_shape[-1] // groups)


def takes(w_shape, groups, axes, dtype) -> bool:
    """Whether a convolution runs here: the register loop takes it
    (:func:`.grouped_taps.takes`), or Winograd's (:func:`.winograd_taps.takes`)."""
    return (grouped_taps.takes(w_shape, groups)
            or winograd_taps.takes(w_shape, groups, axes, dtype))


def forward(x, w, axes, b=None):
    """y (N, *O, C_y) of a convolution that :func:`takes`: x (N, *S, groups * Cg), w (*K,
    Cg, C_y), plus the bias b when given: float32 3x3 ones by Winograd's loop
    (:mod:`.winograd_taps`), the others (and those whose Winograd sums are not all
    finite) by the loop that sums eight pixels by eight channels in registers, on the two
    threads; 3-D as a sum over the depth taps, y starting at the bias (see the module
    doc). None where Winograd's sums are not finite and the register loop does not take
    the convolution (the caller's im2col + GEMM then gives inf where the sums do)."""
    deep, g = len(axes) == 3, dispatch.geometry_2d(_plane(axes))
    y = np.empty((x.shape[0], *(a.size_out for a in axes), w.shape[-1]), x.dtype)
    bias = dispatch.bias_array(b, w.shape[-1], x.dtype)
    x_maps, y_maps = _maps(x, axes), _maps(y, axes)
    groups = x.shape[-1] // w.shape[-2]
    split = _split_bytes(y, w.shape)
    if winograd_taps.takes(w.shape, groups, axes, x.dtype):
        taps = winograd_taps.transformed_weight(w)
        if deep:
            y[...] = bias

        def run_winograd(images):
            return winograd_taps.run(x_maps, taps, g, bias, y_maps,
                                     _calls(axes, images, len(x)), deep)

        if all(on_halves(y.shape[0], split, run_winograd, lambda: run_winograd(slice(None)))):
            return y
        if not grouped_taps.takes(w.shape, groups):
            return None
    if deep:
        y[...] = bias
    taps = np.ascontiguousarray(w.reshape(axes[0].kernel if deep else 1, -1, w.shape[-1]),
                                x.dtype)
    kernel = grouped_taps.grouped_kernel(g[4], g[5], w.shape[-2], accumulate=deep,
                                         wide=_wide(x, w.shape))
    pad_shape = dispatch.padded_image(_plane(axes), x.shape[-1])

    def run(images):
        pad = np.zeros(pad_shape, x.dtype)
        for kd, source, target in _calls(axes, images, len(x)):
            kernel(x_maps[source], taps[kd], g, bias, y_maps[target], pad)

    on_halves(y.shape[0], split, run, lambda: run(slice(None)))
    return y


def weight_grad(x, dy, axes, w_shape):
    """dw (``w_shape`` = (*K, Cg, C_y)) of a convolution that
    :func:`.grouped_taps.takes_weight_grad`: the register loop's sums on half the batch
    per NumPy thread, each half into rows of its own (per depth tap in 3-D), added at the
    end."""
    g = dispatch.geometry_2d(_plane(axes))
    kernel = grouped_taps.weight_grad_kernel(g[4], g[5], w_shape[-2], _wide(x, w_shape))
    x_maps, dy_maps = _maps(x, axes), _maps(dy, axes)
    pad_shape = dispatch.padded_image(_plane(axes), x.shape[-1])
    rows_shape = (axes[0].kernel if len(axes) == 3 else 1, -1, w_shape[-1])

    def run(images):
        rows = np.zeros(math.prod(w_shape), x.dtype).reshape(rows_shape)
        pad = np.zeros(pad_shape, x.dtype)
        for kd, source, target in _calls(axes, images, len(x)):
            kernel(x_maps[source], dy_maps[target], g, rows[kd], pad)
        return rows

    parts = on_halves(dy.shape[0], _split_bytes(dy, w_shape), run, lambda: run(slice(None)))
    return sum(parts[1:], parts[0]).reshape(w_shape)
