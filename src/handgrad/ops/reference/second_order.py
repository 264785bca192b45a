"""Naive second-order kernels of the linear ops: loops over the products of their sums.

The readable specification of :mod:`handgrad.ops.second_order`, with the same
signatures (they take the caches of the vectorized forwards); a convolution applies
the loop convolutions to ``q``. The elementwise twins are built from each activation's
declared scalar math (:mod:`.activations`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from .._args.gradgrad import open_conv, open_linear
from ..declare import exports
from .conv import _backward as _conv_backward
from .conv import _forward as _conv_forward


def linear_gradgrad(q, dy, cache):
    """Loop twin of :func:`handgrad.ops.linear_gradgrad`: d_dy[m, j] = sum_i q[m, i] w[i, j],
    dw[i, j] = sum_m q[m, i] dy[m, j] over the rows m of the leading axes."""
    q, dy, cache = open_linear("linear_gradgrad", q, dy, cache)
    w = cache.w
    rows_q, rows_dy = q.reshape(-1, w.shape[0]), dy.reshape(-1, w.shape[1])
    d_dy, dw = np.zeros_like(rows_dy), np.zeros_like(w)
    for m in range(rows_q.shape[0]):
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                d_dy[m, j] += rows_q[m, i] * w[i, j]
                dw[i, j] += rows_q[m, i] * rows_dy[m, j]
    return d_dy.reshape(dy.shape), dw


def _conv_gradgrad(op, forward, q, dy, cache):
    """The loop convolution on q (no bias), and its loop weight gradient at input q."""
    q, dy, call = open_conv(op, forward, q, dy, cache)
    on_q = replace(call, x=q, b=None)
    d_dy, _ = _conv_forward(on_q)
    _, dw, _ = _conv_backward(op, forward, dy, on_q)
    return d_dy, dw


def conv1d_gradgrad(q, dy, cache):
    """Loop twin of :func:`handgrad.ops.conv1d_gradgrad`."""
    return _conv_gradgrad("conv1d_gradgrad", "conv1d", q, dy, cache)


def conv2d_gradgrad(q, dy, cache):
    """Loop twin of :func:`handgrad.ops.conv2d_gradgrad`."""
    return _conv_gradgrad("conv2d_gradgrad", "conv2d", q, dy, cache)


def conv_transpose1d_gradgrad(q, dy, cache):
    """Loop twin of :func:`handgrad.ops.conv_transpose1d_gradgrad`."""
    return _conv_gradgrad("conv_transpose1d_gradgrad", "conv_transpose1d", q, dy, cache)


def conv_transpose2d_gradgrad(q, dy, cache):
    """Loop twin of :func:`handgrad.ops.conv_transpose2d_gradgrad`."""
    return _conv_gradgrad("conv_transpose2d_gradgrad", "conv_transpose2d", q, dy, cache)



def conv3d_gradgrad(q, dy, cache):
    """Loop twin of :func:`handgrad.ops.conv3d_gradgrad`."""
    return _conv_gradgrad("conv3d_gradgrad", "conv3d", q, dy, cache)


def conv_transpose3d_gradgrad(q, dy, cache):
    """Loop twin of :func:`handgrad.ops.conv_transpose3d_gradgrad`."""
    return _conv_gradgrad("conv_transpose3d_gradgrad", "conv_transpose3d", q, dy, cache)

__all__ = exports(__name__, globals())
