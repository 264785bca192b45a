"""Naive second-order kernels: loops over elements (or products), scalar math.

The readable specification of :mod:`handgrad.ops.second_order`, with the same
signatures (they take the caches of the vectorized forwards). For an elementwise
``f``, each entry is ``d_dy = q f'(x)`` and ``d_x = q dy f''(x)``, with ``f'`` and ``f''``
written out below the way one derives them on paper (product and chain rules, not
simplified), so that they check the vectorized closed forms. Linear ops loop over the
products of their sums; a convolution applies the loop convolutions to ``q``.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .._args.gradgrad import open_conv, open_elementwise, open_linear
from .conv import _backward as _conv_backward
from .conv import _forward as _conv_forward

_C = math.sqrt(2.0 / math.pi)  # tanh-GELU: u = c (x + k x^3)
_K = 0.044715
_SATURATED = 100.0  # |x| beyond which every GELU term is saturated


def _elementwise(op, forward, q, dy, cache, derivatives):
    """Loop over entries: d_dy = q f', d_x = q dy f'' with (f', f'') = derivatives(saved)."""
    q, dy, cache = open_elementwise(op, forward, q, dy, cache)
    d_dy, d_x = np.zeros_like(q), np.zeros_like(q)
    for index in np.ndindex(*q.shape):
        first, second = derivatives(float(cache.saved[index]), *cache.params)
        d_dy[index] = float(q[index]) * first
        d_x[index] = float(q[index]) * float(dy[index]) * second
    return d_dy, d_x


def _logistic(z):
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def _relu(y):
    return (1.0 if y > 0 else 0.0), 0.0


def _leaky_relu(x, slope):
    return (1.0 if x > 0 else slope), 0.0


def _elu(x, alpha, scale):
    """f = scale x (x > 0) or scale alpha (e^x - 1): f' = scale alpha e^x, f'' the same
    for x < 0 (PyTorch takes f''(0) = 0)."""
    if x > 0:
        return scale, 0.0
    curve = scale * alpha * math.exp(x)
    return curve, (curve if x < 0 else 0.0)


def _gelu(x, approximate):
    """f = x g(x): f' = g + x g', f'' = 2 g' + x g''; g = Phi (g' = phi, g'' = -x phi) or
    g = (1 + tanh u) / 2 (g' = (1 - t^2) u' / 2, g'' = ((1 - t^2) u'' - 2 t (1 - t^2) u'^2) / 2)."""
    x = min(max(x, -_SATURATED), _SATURATED)
    if approximate == "none":
        g = 0.5 * math.erfc(-x / math.sqrt(2.0))
        dg = math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        d2g = -x * dg
    else:
        t = math.tanh(_C * (x + _K * x ** 3))
        du, d2u = _C * (1.0 + 3.0 * _K * x * x), 6.0 * _C * _K * x
        g, dg = 0.5 * (1.0 + t), 0.5 * (1.0 - t * t) * du
        d2g = 0.5 * ((1.0 - t * t) * d2u - 2.0 * t * (1.0 - t * t) * du * du)
    return g + x * dg, 2.0 * dg + x * d2g


def _tanh(y):
    """y = tanh x: y' = 1 - y^2, y'' = d(1 - y^2)/dx = -2 y y'."""
    first = 1.0 - y * y
    return first, -2.0 * y * first


def _sigmoid(y):
    """y = sigmoid x: y' = y (1 - y), y'' = y' (1 - y) - y y' = y' (1 - 2 y)."""
    first = y * (1.0 - y)
    return first, first * (1.0 - y) - y * first


def _softplus(x, beta, threshold):
    """f' = sigmoid(beta x) (1 where beta x > threshold); f'' = beta s (1 - s) where
    beta x < threshold, else 0 (PyTorch's masks)."""
    s = _logistic(beta * x)
    first = 1.0 if beta * x > threshold else s
    return first, (beta * s * (1.0 - s) if beta * x < threshold else 0.0)


def _hard_sigmoid(x):
    return (1.0 / 6.0 if -3.0 < x < 3.0 else 0.0), 0.0


def identity_gradgrad(q, dy, cache):
    """Loop twin of :func:`handgrad.ops.identity_gradgrad`: d_dy = q, d_x = 0."""
    q, dy, _ = open_elementwise("identity_gradgrad", "identity", q, dy, cache)
    d_dy = np.zeros_like(q)
    for index in np.ndindex(*q.shape):
        d_dy[index] = q[index]
    return d_dy, np.zeros_like(q)


def relu_gradgrad(q, dy, cache):
    """Loop twin of :func:`handgrad.ops.relu_gradgrad`."""
    return _elementwise("relu_gradgrad", "relu", q, dy, cache, _relu)


def leaky_relu_gradgrad(q, dy, cache):
    """Loop twin of :func:`handgrad.ops.leaky_relu_gradgrad`."""
    return _elementwise("leaky_relu_gradgrad", "leaky_relu", q, dy, cache, _leaky_relu)


def elu_gradgrad(q, dy, cache):
    """Loop twin of :func:`handgrad.ops.elu_gradgrad`."""
    return _elementwise("elu_gradgrad", "elu", q, dy, cache, _elu)


def selu_gradgrad(q, dy, cache):
    """Loop twin of :func:`handgrad.ops.selu_gradgrad`."""
    return _elementwise("selu_gradgrad", "selu", q, dy, cache, _elu)


def gelu_gradgrad(q, dy, cache):
    """Loop twin of :func:`handgrad.ops.gelu_gradgrad` (both forms)."""
    return _elementwise("gelu_gradgrad", "gelu", q, dy, cache, _gelu)


def tanh_gradgrad(q, dy, cache):
    """Loop twin of :func:`handgrad.ops.tanh_gradgrad`."""
    return _elementwise("tanh_gradgrad", "tanh", q, dy, cache, _tanh)


def sigmoid_gradgrad(q, dy, cache):
    """Loop twin of :func:`handgrad.ops.sigmoid_gradgrad`."""
    return _elementwise("sigmoid_gradgrad", "sigmoid", q, dy, cache, _sigmoid)


def softplus_gradgrad(q, dy, cache):
    """Loop twin of :func:`handgrad.ops.softplus_gradgrad`."""
    return _elementwise("softplus_gradgrad", "softplus", q, dy, cache, _softplus)


def hard_sigmoid_gradgrad(q, dy, cache):
    """Loop twin of :func:`handgrad.ops.hard_sigmoid_gradgrad`."""
    return _elementwise("hard_sigmoid_gradgrad", "hard_sigmoid", q, dy, cache, _hard_sigmoid)


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
