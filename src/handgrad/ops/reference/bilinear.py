"""Naive bilinear map: loops over the rows (leading indices) and over i, j, o."""

from __future__ import annotations

import numpy as np

from .._args.elementwise import make_cache, open_cache
from ..bilinear import _check
from ..declare import exports


def bilinear(x1, x2, W, b=None):
    """Loop twin of :func:`handgrad.ops.bilinear`."""
    x1, x2, W, b = _check("bilinear", x1, x2, W, b)
    I, J, O = W.shape
    r1, r2 = x1.reshape(-1, I), x2.reshape(-1, J)
    y = np.zeros((len(r1), O), dtype=x1.dtype)
    for n in range(len(r1)):
        for o in range(O):
            total = 0.0 if b is None else b[o]
            for i in range(I):
                for j in range(J):
                    total += r1[n, i] * W[i, j, o] * r2[n, j]
            y[n, o] = total
    y = y.reshape(*x1.shape[:-1], O)
    return y, make_cache("bilinear", y, (r1, r2, W, x1.shape, x2.shape), (b is not None,))


def bilinear_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.bilinear_backward`."""
    dy, cache = open_cache("bilinear_backward", "bilinear", dy, cache)
    r1, r2, W, shape1, shape2 = cache.saved
    I, J, O = W.shape
    g = dy.reshape(-1, O)
    dx1, dx2, dW = np.zeros_like(r1), np.zeros_like(r2), np.zeros_like(W)
    for n in range(len(r1)):
        for i in range(I):
            for j in range(J):
                for o in range(O):
                    dx1[n, i] += g[n, o] * W[i, j, o] * r2[n, j]
                    dx2[n, j] += g[n, o] * W[i, j, o] * r1[n, i]
                    dW[i, j, o] += r1[n, i] * r2[n, j] * g[n, o]
    db = g.sum(axis=0) if cache.params[0] else None
    return dx1.reshape(shape1), dx2.reshape(shape2), dW, db


__all__ = exports(__name__, globals())
