"""Rectifier activations as ``(forward, backward)`` kernel pairs (and their second-order
kernels), with PyTorch's semantics.

Every forward is ``y, cache = op(x, ...)`` (``y`` has ``x``'s shape and dtype) and
every backward ``dx = op_backward(dy, cache)`` computes ``dx = dy * f'(x)``; the
``*_gradgrad(q, dy, cache)`` kernels return ``(q f'(x), q dy f''(x))`` (see
:mod:`.second_order`)::

    identity      x                                  f' = 1
    relu          max(x, 0)                          f' = [x > 0]        (0 at the kink)
    leaky_relu    x if x > 0 else a x                f' = 1 if x > 0 else a
    elu           x if x > 0 else alpha (e^x - 1)    f' = 1 if x > 0 else alpha e^x
                                                     f'' = alpha e^x for x < 0, else 0
    selu          scale * elu(x, alpha), fixed scale and alpha (Klambauer et al. 2017)
    hard_sigmoid  min(max(x + 3, 0), 6) / 6          f' = 1/6 on (-3, 3), else 0

Gradients at kinks follow PyTorch: relu'(0) = 0, leaky_relu'(0) = a, elu'(0) = alpha,
hard_sigmoid'(+-3) = 0; f'' = 0 for the piecewise-linear ones. ``exp`` is never taken of
a large positive number, so no input overflows or warns. The cache holds ``x`` or
``y``, whichever the derivative needs. Each op is declared at the end of the file
(:mod:`.declare`): its layer, loop-twin math, torch and ONNX forms, test samples.
"""

from __future__ import annotations

import math

import numpy as np

from .._checks import array_module, float_array
from .._hyper import number
from ._args.elementwise import make_cache, open_cache
from ._args.gradgrad import gradgrad_result, open_elementwise
from .declare import declare, exports

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


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
    return _zero_where(cache.saved <= 0, dy)


def _zero_where(mask, dy):
    """``where(mask, 0, dy)`` (dy's NaN, infinities and -0 kept where ``mask`` is False).
    For a NumPy float array: a bitwise and of dy's words with a word of all ones where
    ``mask`` is False (zero bits where it is True), one vectorized pass where NumPy's
    element-wise select is several times slower."""
    if type(dy) is not np.ndarray or dy.dtype.kind != "f" or dy.ndim == 0:
        return array_module(dy).where(mask, 0.0, dy)
    words = np.dtype(f"i{dy.dtype.itemsize}")
    keep = np.subtract(mask, 1, dtype=words)  # 0 where mask, -1 (all ones) elsewhere
    return np.bitwise_and(dy.view(words), keep, out=keep).view(dy.dtype)


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


# ---------------------------------------------------------------- second order
def identity_gradgrad(q, dy, cache):
    """Second order of :func:`identity`: (d_dy, d_x) = (q, 0)."""
    q, dy, _ = open_elementwise("identity_gradgrad", "identity", q, dy, cache)
    return gradgrad_result(q, q, dy)


def relu_gradgrad(q, dy, cache):
    """Second order of :func:`relu`: (q [y > 0], 0)."""
    q, dy, cache = open_elementwise("relu_gradgrad", "relu", q, dy, cache)
    return gradgrad_result(array_module(q).where(cache.saved <= 0, 0.0, q), q, dy)


def leaky_relu_gradgrad(q, dy, cache):
    """Second order of :func:`leaky_relu`: (q where x > 0 else slope q, 0)."""
    q, dy, cache = open_elementwise("leaky_relu_gradgrad", "leaky_relu", q, dy, cache)
    (slope,) = cache.params
    return gradgrad_result(array_module(q).where(cache.saved > 0, q, q * slope), q, dy)


def _elu_gradgrad(op, forward, q, dy, cache):
    q, dy, cache = open_elementwise(op, forward, q, dy, cache)
    xp, x, (alpha, scale) = array_module(q), cache.saved, cache.params
    negative = (scale * alpha) * xp.exp(xp.minimum(x, 0.0))
    return gradgrad_result(q * xp.where(x > 0, scale, negative), q, dy,
                           xp.where(x < 0, negative, 0.0))


def elu_gradgrad(q, dy, cache):
    """Second order of :func:`elu`: f' = 1 (x > 0) or alpha e^x; f'' = alpha e^x for
    x < 0, else 0."""
    return _elu_gradgrad("elu_gradgrad", "elu", q, dy, cache)


def selu_gradgrad(q, dy, cache):
    """Second order of :func:`selu`: :func:`elu_gradgrad` times SELU's scale."""
    return _elu_gradgrad("selu_gradgrad", "selu", q, dy, cache)


def hard_sigmoid_gradgrad(q, dy, cache):
    """Second order of :func:`hard_sigmoid`: (q / 6 inside (-3, 3), else 0; 0)."""
    q, dy, cache = open_elementwise("hard_sigmoid_gradgrad", "hard_sigmoid", q, dy, cache)
    x = cache.saved
    inside = (x > -3.0) & (x < 3.0)
    return gradgrad_result(array_module(q).where(inside, q * (1.0 / 6.0), 0.0), q, dy)


# ------------------------------------------------ scalar math of the loop twins
def _elu_value(x, alpha, scale):
    return scale * x if x > 0 else scale * alpha * (math.exp(x) - 1.0)


def _elu_slopes(x, alpha, scale):
    """f' = scale (x > 0) or scale alpha e^x; f'' the curve for x < 0 (PyTorch: f''(0) = 0)."""
    if x > 0:
        return scale, 0.0
    curve = scale * alpha * math.exp(x)
    return curve, (curve if x < 0 else 0.0)


# ---------------------------------------------------------------- declarations
declare(identity, identity_backward, gradgrad=identity_gradgrad, layer="Identity",
        value=lambda x: x, slopes=lambda x: (1.0, 0.0), torch=lambda F, t: t * 1,
        onnx=lambda g, x: x)
declare(relu, relu_backward, gradgrad=relu_gradgrad, layer="ReLU", saves="y",
        value=lambda x: max(x, 0.0), slopes=lambda y: ((1.0 if y > 0 else 0.0), 0.0),
        kinks=lambda: (0.0,), torch=lambda F, t: F.relu(t),
        onnx=lambda g, x: g.op("Relu", [x], "relu"))
declare(leaky_relu, leaky_relu_backward, gradgrad=leaky_relu_gradgrad, layer="LeakyReLU",
        value=lambda x, a: x if x > 0 else a * x,
        slopes=lambda x, a: ((1.0 if x > 0 else a), 0.0), kinks=lambda **_: (0.0,),
        samples=({}, {"negative_slope": 0.2}),
        torch=lambda F, t, negative_slope=0.01: F.leaky_relu(t, negative_slope),
        onnx=lambda g, x, negative_slope: g.op("LeakyRelu", [x], "leaky_relu",
                                               alpha=negative_slope))
declare(elu, elu_backward, gradgrad=elu_gradgrad, layer="ELU", value=_elu_value,
        slopes=_elu_slopes, kinks=lambda **_: (0.0,), samples=({}, {"alpha": 0.5}),
        torch=lambda F, t, alpha=1.0: F.elu(t, alpha),
        onnx=lambda g, x, alpha: g.op("Elu", [x], "elu", alpha=alpha))
declare(selu, selu_backward, gradgrad=selu_gradgrad, layer="SELU", value=_elu_value,
        slopes=_elu_slopes, kinks=lambda: (0.0,), torch=lambda F, t: F.selu(t),
        onnx=lambda g, x: g.op("Selu", [x], "selu", alpha=SELU_ALPHA, gamma=SELU_SCALE))
declare(hard_sigmoid, hard_sigmoid_backward, gradgrad=hard_sigmoid_gradgrad,
        layer="HardSigmoid", value=lambda x: min(max(x + 3.0, 0.0), 6.0) / 6.0,
        slopes=lambda x: ((1.0 / 6.0 if -3.0 < x < 3.0 else 0.0), 0.0),
        kinks=lambda: (-3.0, 3.0), torch=lambda F, t: F.hardsigmoid(t),
        onnx=lambda g, x: g.op("HardSigmoid", [x], "hard_sigmoid", alpha=1 / 6, beta=0.5))
__all__ = exports(__name__, globals())
