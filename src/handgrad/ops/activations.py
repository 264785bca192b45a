"""Elementwise activations as ``(forward, backward)`` kernel pairs, with PyTorch's semantics.

Every forward is ``y, cache = op(x, ...)`` (``y`` has ``x``'s shape and dtype) and
every backward ``dx = op_backward(dy, cache)`` computes ``dx = dy * f'(x)``::

    relu          max(x, 0)                          f' = [x > 0]        (0 at the kink)
    leaky_relu    x if x > 0 else a x                f' = 1 if x > 0 else a
    elu           x if x > 0 else alpha (e^x - 1)    f' = 1 if x > 0 else alpha e^x
    selu          scale * elu(x, alpha), fixed scale and alpha (Klambauer et al. 2017)
    gelu          x Phi(x)                           f' = Phi(x) + x phi(x)
    gelu tanh     x (1 + tanh(u)) / 2, u = c (x + k x^3), c = sqrt(2/pi), k = 0.044715
                                                     f' = (1 + t)/2 + x (1 - t^2) u' / 2
    tanh          tanh(x)                            f' = 1 - y^2
    sigmoid       1 / (1 + e^-x)                     f' = y (1 - y)
    softplus      log(1 + e^(b x)) / b, or x where b x > threshold
                                                     f' = sigmoid(b x), or 1 there
    hard_sigmoid  min(max(x + 3, 0), 6) / 6          f' = 1/6 on (-3, 3), else 0

Gradients at kinks follow PyTorch: relu'(0) = 0, leaky_relu'(0) = a, elu'(0) = alpha,
hard_sigmoid'(+-3) = 0. The exact GELU uses a float64/float32-accurate ``erfc``
(see ``special``); ``exp`` is never taken of a large positive number, so no input
overflows or warns. The cache holds ``x`` or ``y``, whichever the derivative needs.
"""

from __future__ import annotations

import math

from .._checks import array_module, choice, float_array
from .._hyper import number
from . import special
from ._args.elementwise import make_cache, open_cache
from .softmax import log_softmax, log_softmax_backward, softmax, softmax_backward

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946
_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_K = 0.044715
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_GELU_CLIP = 100.0  # |x| beyond which every GELU term is saturated (keeps x^2, x^3 finite)


def _input(op, x):
    x = float_array(op, "x", x)
    return array_module(x), x


def identity(x):
    """y = x (returned as is, not copied)."""
    _, x = _input("identity", x)
    return x, make_cache("identity", x)


def identity_backward(dy, cache):
    """dx = dy."""
    dy, _ = open_cache("identity_backward", "identity", dy, cache)
    return dy


def relu(x):
    """y = max(x, 0). The cache holds ``y``."""
    xp, x = _input("relu", x)
    y = xp.maximum(x, 0.0)
    return y, make_cache("relu", x, y)


def relu_backward(dy, cache):
    """dx = dy where y > 0, else 0 (so relu'(0) = 0, as PyTorch)."""
    dy, cache = open_cache("relu_backward", "relu", dy, cache)
    return array_module(dy).where(cache.saved <= 0, 0.0, dy)


def leaky_relu(x, negative_slope=0.01):
    """y = x where x > 0, else negative_slope * x. The cache holds ``x``."""
    op = "leaky_relu"
    xp, x = _input(op, x)
    slope = number(op, "negative_slope", negative_slope)
    y = xp.where(x > 0, x, x * slope)
    return y, make_cache(op, x, x, (slope,))


def leaky_relu_backward(dy, cache):
    """dx = dy where x > 0, else negative_slope * dy (the slope at x = 0, as PyTorch)."""
    dy, cache = open_cache("leaky_relu_backward", "leaky_relu", dy, cache)
    xp, x, (slope,) = array_module(dy), cache.saved, cache.params
    return xp.where(x > 0, dy, dy * slope)


def _elu_forward(op, x, alpha, scale):
    xp, x = _input(op, x)
    negative = (scale * alpha) * xp.expm1(xp.minimum(x, 0.0))
    y = xp.where(x > 0, x * scale, negative)
    return y, make_cache(op, x, x, (alpha, scale))


def _elu_backward(op, forward, dy, cache):
    dy, cache = open_cache(op, forward, dy, cache)
    xp, x, (alpha, scale) = array_module(dy), cache.saved, cache.params
    negative = dy * ((scale * alpha) * xp.exp(xp.minimum(x, 0.0)))
    return xp.where(x > 0, dy * scale, negative)


def elu(x, alpha=1.0):
    """y = x where x > 0, else alpha * (exp(x) - 1). The cache holds ``x``."""
    return _elu_forward("elu", x, number("elu", "alpha", alpha), 1.0)


def elu_backward(dy, cache):
    """dx = dy where x > 0, else alpha * exp(x) * dy (alpha at x = 0, as PyTorch)."""
    return _elu_backward("elu_backward", "elu", dy, cache)


def selu(x):
    """y = SELU_SCALE * elu(x, SELU_ALPHA). The cache holds ``x``."""
    return _elu_forward("selu", x, SELU_ALPHA, SELU_SCALE)


def selu_backward(dy, cache):
    """dx = SELU_SCALE * dy where x > 0, else SELU_SCALE * SELU_ALPHA * exp(x) * dy."""
    return _elu_backward("selu_backward", "selu", dy, cache)


def _gelu_tanh_parts(xp, x):
    """(t, du/dx) for u = c (x + k x^3), t = tanh(u), with x clipped where both saturate."""
    x = xp.clip(x, -_GELU_CLIP, _GELU_CLIP)
    x2 = x * x
    t = xp.tanh(_GELU_C * (x + _GELU_K * x2 * x))
    return t, _GELU_C * (1.0 + 3.0 * _GELU_K * x2)


def gelu(x, approximate="none"):
    """y = x * Phi(x), Phi the standard normal CDF (``approximate="none"``), or
    y = x * (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) / 2 (``approximate="tanh"``).
    The cache holds ``x``."""
    op = "gelu"
    xp, x = _input(op, x)
    approximate = choice(op, "approximate", approximate, ("none", "tanh"))
    if approximate == "none":
        y = x * special.normal_cdf(xp, x)
    else:
        t, _ = _gelu_tanh_parts(xp, x)
        y = (0.5 * x) * (1.0 + t)
    return y, make_cache(op, x, x, (approximate,))


def gelu_backward(dy, cache):
    """dx = dy * (Phi(x) + x phi(x)), or for the tanh form
    dx = dy * ((1 + t) / 2 + (x / 2) (1 - t^2) c (1 + 3 k x^2))."""
    dy, cache = open_cache("gelu_backward", "gelu", dy, cache)
    xp, x, (approximate,) = array_module(dy), cache.saved, cache.params
    if approximate == "none":
        xc = xp.clip(x, -_GELU_CLIP, _GELU_CLIP)
        pdf = _INV_SQRT_2PI * xp.exp(-0.5 * xc * xc)
        return dy * (special.normal_cdf(xp, x) + xc * pdf)
    t, du = _gelu_tanh_parts(xp, x)
    xc = xp.clip(x, -_GELU_CLIP, _GELU_CLIP)
    return dy * (0.5 * (1.0 + t) + (0.5 * xc) * (1.0 - t * t) * du)


def _gelu_tanh(x):
    """:func:`gelu` with ``approximate="tanh"`` (for the ``ACTIVATIONS`` table)."""
    return gelu(x, approximate="tanh")


def tanh(x):
    """y = tanh(x). The cache holds ``y``."""
    xp, x = _input("tanh", x)
    y = xp.tanh(x)
    return y, make_cache("tanh", x, y)


def tanh_backward(dy, cache):
    """dx = dy * (1 - y^2)."""
    dy, cache = open_cache("tanh_backward", "tanh", dy, cache)
    y = cache.saved
    return dy * (1.0 - y * y)


def sigmoid(x):
    """y = 1 / (1 + exp(-x)), evaluated without overflow. The cache holds ``y``."""
    xp, x = _input("sigmoid", x)
    y = special.sigmoid(xp, x)
    return y, make_cache("sigmoid", x, y)


def sigmoid_backward(dy, cache):
    """dx = dy * (1 - y) * y."""
    dy, cache = open_cache("sigmoid_backward", "sigmoid", dy, cache)
    y = cache.saved
    return dy * (1.0 - y) * y


def softplus(x, beta=1.0, threshold=20.0):
    """y = log(1 + exp(beta x)) / beta, or y = x where beta x > threshold (PyTorch's rule).
    The cache holds ``x``."""
    op = "softplus"
    xp, x = _input(op, x)
    beta = number(op, "beta", beta)
    if beta == 0:
        raise ValueError(f"{op}: 'beta' must be nonzero; received {beta!r}")
    threshold = number(op, "threshold", threshold)
    bx = x * beta
    y = xp.where(bx > threshold, x, special.softplus(xp, bx) / beta)
    return y, make_cache(op, x, x, (beta, threshold))


def softplus_backward(dy, cache):
    """dx = dy * sigmoid(beta x), or dy where beta x > threshold."""
    dy, cache = open_cache("softplus_backward", "softplus", dy, cache)
    xp, x, (beta, threshold) = array_module(dy), cache.saved, cache.params
    bx = x * beta
    return xp.where(bx > threshold, dy, dy * special.sigmoid(xp, bx))


def hard_sigmoid(x):
    """y = min(max(x + 3, 0), 6) / 6 (PyTorch's hardsigmoid). The cache holds ``x``."""
    xp, x = _input("hard_sigmoid", x)
    y = xp.clip(x + 3.0, 0.0, 6.0) / 6.0
    return y, make_cache("hard_sigmoid", x, x)


def hard_sigmoid_backward(dy, cache):
    """dx = dy / 6 strictly inside (-3, 3), else 0."""
    dy, cache = open_cache("hard_sigmoid_backward", "hard_sigmoid", dy, cache)
    xp, x = array_module(dy), cache.saved
    return xp.where((x > -3.0) & (x < 3.0), dy * (1.0 / 6.0), 0.0)


ACTIVATIONS = {
    "identity": (identity, identity_backward),
    "relu": (relu, relu_backward),
    "leaky_relu": (leaky_relu, leaky_relu_backward),
    "elu": (elu, elu_backward),
    "selu": (selu, selu_backward),
    "gelu": (gelu, gelu_backward),
    "gelu_tanh": (_gelu_tanh, gelu_backward),
    "tanh": (tanh, tanh_backward),
    "sigmoid": (sigmoid, sigmoid_backward),
    "softplus": (softplus, softplus_backward),
    "hard_sigmoid": (hard_sigmoid, hard_sigmoid_backward),
    "softmax": (softmax, softmax_backward),
    "log_softmax": (log_softmax, log_softmax_backward),
}
"""Lower-case activation name -> ``(forward, backward)``; forwards use their defaults."""
