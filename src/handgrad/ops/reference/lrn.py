"""Naive local response normalization: plain loops over the positions and channels.
With n = size, window(c) = [c - n // 2, c + (n - 1) // 2] inside [0, C)::

    d_c  = k + alpha / n * sum over j in window(c) of x_j^2,   y_c = x_c d_c^(-beta)
    dx_i = dy_i d_i^(-beta) - 2 beta alpha / n * x_i * sum over c with i in window(c)
           of dy_c x_c d_c^(-beta - 1)
"""

from __future__ import annotations

import numpy as np

from ..._checks import upstream_grad
from .._args.cache import check_cache
from ..declare import exports
from ..lrn import LrnCache, prepare_lrn


def _window(c, size, channels):
    return range(max(0, c - size // 2), min(channels, c + (size - 1) // 2 + 1))


def local_response_norm(x, size, alpha=1e-4, beta=0.75, k=1.0):
    """Loop twin of :func:`handgrad.ops.local_response_norm`."""
    call = prepare_lrn("local_response_norm", x, size, alpha, beta, k)
    rows = call.x.reshape(-1, call.x.shape[-1])
    d, y = np.zeros_like(rows), np.zeros_like(rows)
    channels = rows.shape[1]
    for r in range(rows.shape[0]):
        for c in range(channels):
            total = sum(rows[r, j] * rows[r, j] for j in _window(c, call.size, channels))
            d[r, c] = call.k + call.alpha / call.size * total
            y[r, c] = rows[r, c] * d[r, c] ** -call.beta
    shape = call.x.shape
    return y.reshape(shape), LrnCache("local_response_norm", call, d.reshape(shape))


def local_response_norm_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.local_response_norm_backward`."""
    op = "local_response_norm_backward"
    cache = check_cache(op, cache, "local_response_norm", LrnCache)
    call = cache.call
    dy = upstream_grad(op, dy, call.x.shape, call.x.dtype)
    channels = call.x.shape[-1]
    x, d, g = (a.reshape(-1, channels) for a in (call.x, cache.d, dy))
    dx = np.zeros_like(g)
    for r in range(x.shape[0]):
        for c in range(channels):
            dx[r, c] += g[r, c] * d[r, c] ** -call.beta
            t = g[r, c] * x[r, c] * d[r, c] ** (-call.beta - 1.0)
            for i in _window(c, call.size, channels):
                dx[r, i] -= 2.0 * call.beta * call.alpha / call.size * x[r, i] * t
    return dx.reshape(call.x.shape)


__all__ = exports(__name__, globals())
