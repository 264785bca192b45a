"""Naive PReLU and GLU: loops over the entries, with the signatures, caches and argument
checks of :mod:`handgrad.ops.gated_activations`."""

from __future__ import annotations

import math

import numpy as np

from ..._checks import float_array
from .. import gated_activations as vectorized
from .._args.elementwise import make_cache, open_cache
from ..declare import exports
from ..gated_activations import PReLUCache, _halves, open_prelu_cache, prepare_prelu


def _slope(weight, index):
    """The slope of entry ``index``: the weight of its channel (the last index)."""
    return float(weight[0 if weight.shape[0] == 1 else index[-1]])


def prelu(x, weight):
    """Loop twin of :func:`handgrad.ops.prelu`: y = x if x > 0 else w[c] x."""
    x, weight = prepare_prelu("prelu", x, weight)
    y = np.zeros_like(x)
    for index in np.ndindex(*x.shape):
        v = float(x[index])
        y[index] = v if v > 0 else _slope(weight, index) * v
    return y, PReLUCache("prelu", x, weight)


def prelu_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.prelu_backward`: dx = dy or w[c] dy;
    dw[c] += x dy where x <= 0."""
    dy, cache = open_prelu_cache("prelu_backward", dy, cache)
    x, weight = cache.x, cache.weight
    dx, dweight = np.zeros_like(dy), np.zeros_like(weight)
    for index in np.ndindex(*x.shape):
        v, g = float(x[index]), float(dy[index])
        dx[index] = g if v > 0 else _slope(weight, index) * g
        if v <= 0:
            dweight[0 if weight.shape[0] == 1 else index[-1]] += v * g
    return dx, dweight


def rrelu(x, noise=None, lower=0.125, upper=1.0 / 3.0, training=False):
    """Loop twin of :func:`handgrad.ops.rrelu`: y = x if x > 0 else r x (the arguments
    checked, and r chosen, by the vectorized forward)."""
    x = float_array("rrelu", "x", x)
    slopes = vectorized.rrelu(x, noise, lower, upper, training)[1].params[0]
    y = np.zeros_like(x)
    for index in np.ndindex(*x.shape):
        v = float(x[index])
        y[index] = v if v > 0 else float(slopes[index] if np.ndim(slopes) else slopes) * v
    return y, make_cache("rrelu", x, x, (slopes,))


def rrelu_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.rrelu_backward`: dx = dy if x > 0 else r dy."""
    dy, cache = open_cache("rrelu_backward", "rrelu", dy, cache)
    (slopes,) = cache.params
    dx = np.zeros_like(dy)
    for index in np.ndindex(*dy.shape):
        r = float(slopes[index] if np.ndim(slopes) else slopes)
        dx[index] = float(dy[index]) if cache.saved[index] > 0 else r * float(dy[index])
    return dx


def _sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def glu(x, axis=-1):
    """Loop twin of :func:`handgrad.ops.glu`: y[i] = a[i] sigmoid(b[i])."""
    _, x, axis, a, b = _halves("glu", x, axis)
    y = np.zeros_like(a)
    for index in np.ndindex(*a.shape):
        y[index] = float(a[index]) * _sigmoid(float(b[index]))
    return y, make_cache("glu", y, x, (axis,))


def glu_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.glu_backward`: da = dy s, db = dy a s (1 - s)."""
    dy, cache = open_cache("glu_backward", "glu", dy, cache)
    (axis,) = cache.params
    _, _, _, a, b = _halves("glu_backward", cache.saved, axis)
    da, db = np.zeros_like(a), np.zeros_like(b)
    for index in np.ndindex(*a.shape):
        s, g = _sigmoid(float(b[index])), float(dy[index])
        da[index], db[index] = g * s, g * float(a[index]) * s * (1.0 - s)
    return np.concatenate([da, db], axis=axis)


__all__ = exports(__name__, globals())
