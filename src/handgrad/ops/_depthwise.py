"""Depthwise convolution (one input channel per group) as multiply-adds over taps.

With ``groups == C_x`` every output channel ``c = g*m + j`` (channel multiplier
``m``) reads only input channel ``g``, so im2col + GEMM would multiply mostly
zeros. Instead, with ``x_rep`` the input with each channel repeated ``m`` times::

    y  = sum_t  x_rep_pad[window t] * w[t, 0, :]
    dx_rep_pad[window t] += dy * w[t, 0, :]        (dx sums the m copies back)
    dw[t, 0, :] = sum over (n, o) of x_rep_pad[window t] * dy

Each line loops over kernel taps only; every pass is elementwise over the output.
The passes run block by block (a few images, or a few output rows of one image),
all taps of a block before the next, so a block's data stays in the CPU cache; on a
GPU (CuPy) the whole output is one block: kh*kw launches per pass.
"""

from __future__ import annotations

import numpy as np

from ._args.windows import pad_input, padded_zeros, taps
from ._blocks import block_taps, block_view, plan_blocks
from ._engine import dispatch as engine


def _repeated(xp, x, multiplier):
    return x if multiplier == 1 else xp.repeat(x, multiplier, axis=-1)


def depthwise_forward(xp, x, w, axes, groups):
    """y (N, *O, C_y) of a depthwise conv: x (N, *S, groups), w (*K, 1, C_y)."""
    if engine.covers(axes, x, w):
        return engine.depthwise(x, w, axes)
    taps_w = w.reshape(-1, w.shape[-1])
    x_pad = pad_input(xp, _repeated(xp, x, w.shape[-1] // groups), axes)
    y = xp.empty((x.shape[0], *(a.size_out for a in axes), w.shape[-1]), dtype=x.dtype)
    blocks, elements = plan_blocks(y.shape, y.dtype.itemsize, whole=xp is not np)
    scratch = xp.empty(elements, dtype=y.dtype)
    for images, rows in blocks:
        block = y[images, rows]
        product = block_view(scratch, block.shape)
        for tap, window in block_taps(axes, images, rows):
            if tap == 0:
                xp.multiply(x_pad[window], taps_w[0], out=block)
            else:
                xp.multiply(x_pad[window], taps_w[tap], out=product)
                xp.add(block, product, out=block)
    return y


def _gradient_passes(xp, dy, axes, groups, x_shape, w_shape, x=None, w=None):
    """``(dx, dw)`` in one blocked pass over ``dy``: ``dx`` when ``w`` is given,
    ``dw`` when ``x`` is given, None for the other."""
    multiplier = w_shape[-1] // groups
    n_taps = len(list(taps(axes)))
    rep_shape = (*x_shape[:-1], x_shape[-1] * multiplier)
    x_pad = None if x is None else pad_input(xp, _repeated(xp, x, multiplier), axes)
    if w is not None:
        taps_w = w.reshape(n_taps, w_shape[-1])
        buffer, inner = padded_zeros(xp, rep_shape, axes, dy.dtype)
    dw = None if x is None else xp.zeros((n_taps, w_shape[-1]), dtype=dy.dtype)
    blocks, elements = plan_blocks(dy.shape, dy.dtype.itemsize, whole=xp is not np)
    scratch = xp.empty(elements, dtype=dy.dtype)
    for images, rows in blocks:
        dy_block = dy[images, rows]
        product = block_view(scratch, dy_block.shape)
        flat = product.reshape(-1, w_shape[-1])
        ones = xp.ones(flat.shape[0], dtype=dy.dtype)
        for tap, window in block_taps(axes, images, rows):
            if w is not None:
                target = buffer[window]
                xp.multiply(dy_block, taps_w[tap], out=product)
                xp.add(target, product, out=target)
            if x is not None:
                xp.multiply(x_pad[window], dy_block, out=product)
                dw[tap] += ones @ flat
    dx = None
    if w is not None:
        dx = buffer[inner]
        if multiplier > 1:
            dx = dx.reshape(*x_shape, multiplier).sum(axis=-1)
        dx = xp.ascontiguousarray(dx)
    return dx, None if dw is None else dw.reshape(w_shape)


def depthwise_gradients(xp, x, w, dy, axes, groups):
    """(dx, dw) of a depthwise conv: one compiled pass when available, else one
    blocked pass over ``dy`` for both."""
    if engine.covers(axes, x, w, dy):
        return engine.depthwise_gradients(x.shape, w, dy, axes, x)
    return _gradient_passes(xp, dy, axes, groups, x.shape, w.shape, x=x, w=w)


def depthwise_input_grad(xp, dy, w, axes, groups, x_shape):
    """dx (x_shape) of a depthwise conv: the adjoint of :func:`depthwise_forward`."""
    if engine.covers(axes, dy, w):
        return engine.depthwise_gradients(x_shape, w, dy, axes)[0]
    return _gradient_passes(xp, dy, axes, groups, tuple(x_shape), w.shape, w=w)[0]


def depthwise_weight_grad(xp, x, dy, axes, groups, w_shape):
    """dw (*K, 1, C_y): per tap, the sum over batch and positions of window * dy."""
    return _gradient_passes(xp, dy, axes, groups, x.shape, tuple(w_shape), x=x)[1]
