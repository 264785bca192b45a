"""Smooth activations (GELU, tanh, sigmoid, softplus) as ``(forward, backward)`` kernel
pairs and their second-order kernels, with PyTorch's semantics (see :mod:`.activations`
for the conventions)::

    gelu          x Phi(x)                           f' = Phi(x) + x phi(x)
                                                     f'' = phi(x) (2 - x^2)
    gelu tanh     x (1 + tanh(u)) / 2, u = c (x + k x^3), c = sqrt(2/pi), k = 0.044715
                                                     f' = (1 + t)/2 + x (1 - t^2) u' / 2
                                      f'' = (1 - t^2) (u' (1 - x t u') + 3 c k x^2)
    tanh          tanh(x)                            f' = 1 - y^2, f'' = -2 y (1 - y^2)
    sigmoid       1 / (1 + e^-x)                     f' = y (1 - y), f'' = f' (1 - 2 y)
    softplus      log(1 + e^(b x)) / b, or x where b x > threshold
                                  f' = s = sigmoid(b x), or 1 there; f'' = b s (1 - s)

The exact GELU uses a float64/float32-accurate ``erfc`` (see ``special``); ``exp`` is
never taken of a large positive number, so no input overflows or warns.
"""

from __future__ import annotations

import math

from .._checks import array_module, choice
from .._hyper import number
from . import special
from ._args.elementwise import make_cache, open_cache
from ._args.gradgrad import gradgrad_result, open_elementwise
from .activations import _input
from .declare import declare, exports

_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_K = 0.044715
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_GELU_CLIP = 100.0  # |x| beyond which every GELU term is saturated (keeps x^2, x^3 finite)


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


# ---------------------------------------------------------------- second order
def gelu_gradgrad(q, dy, cache):
    """Second order of :func:`gelu`: f'' = phi(x) (2 - x^2), or for the tanh form
    f'' = (1 - t^2) (u' (1 - x t u') + 3 c k x^2)."""
    q, dy, cache = open_elementwise("gelu_gradgrad", "gelu", q, dy, cache)
    xp, (approximate,) = array_module(q), cache.params
    x = xp.clip(cache.saved, -_GELU_CLIP, _GELU_CLIP)
    if approximate == "none":
        pdf = _INV_SQRT_2PI * xp.exp(-0.5 * x * x)
        return gradgrad_result(q * (special.normal_cdf(xp, x) + x * pdf), q, dy,
                               pdf * (2.0 - x * x))
    t, du = _gelu_tanh_parts(xp, x)
    sech2 = 1.0 - t * t
    first = 0.5 * (1.0 + t) + (0.5 * x) * sech2 * du
    second = sech2 * (du * (1.0 - x * t * du) + (3.0 * _GELU_C * _GELU_K) * x * x)
    return gradgrad_result(q * first, q, dy, second)


def tanh_gradgrad(q, dy, cache):
    """Second order of :func:`tanh`: f' = 1 - y^2, f'' = -2 y (1 - y^2)."""
    q, dy, cache = open_elementwise("tanh_gradgrad", "tanh", q, dy, cache)
    y = cache.saved
    first = 1.0 - y * y
    return gradgrad_result(q * first, q, dy, -2.0 * y * first)


def sigmoid_gradgrad(q, dy, cache):
    """Second order of :func:`sigmoid`: f' = y (1 - y), f'' = y (1 - y) (1 - 2 y)."""
    q, dy, cache = open_elementwise("sigmoid_gradgrad", "sigmoid", q, dy, cache)
    y = cache.saved
    first = y * (1.0 - y)
    return gradgrad_result(q * first, q, dy, first * (1.0 - 2.0 * y))


def softplus_gradgrad(q, dy, cache):
    """Second order of :func:`softplus`: f' = s = sigmoid(beta x) (1 above the
    threshold), f'' = beta s (1 - s) where beta x < threshold, else 0."""
    q, dy, cache = open_elementwise("softplus_gradgrad", "softplus", q, dy, cache)
    xp, (beta, threshold) = array_module(q), cache.params
    bx = cache.saved * beta
    s = special.sigmoid(xp, bx)
    second = xp.where(bx < threshold, (beta * s) * (1.0 - s), 0.0)
    return gradgrad_result(q * xp.where(bx > threshold, 1.0, s), q, dy, second)


# ----------------------------------------- scalar math of the loop twins (on paper)
def _logistic(z):
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def _gelu_parts(x, approximate):
    """f = x g(x) with x clipped where g saturates: (g, g', g''); g = Phi (g' = phi,
    g'' = -x phi) or g = (1 + tanh u) / 2 (g' = (1 - t^2) u' / 2,
    g'' = ((1 - t^2) u'' - 2 t (1 - t^2) u'^2) / 2)."""
    x = min(max(x, -_GELU_CLIP), _GELU_CLIP)
    if approximate == "none":
        dg = math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
        return 0.5 * math.erfc(-x / math.sqrt(2.0)), dg, -x * dg
    t = math.tanh(_GELU_C * (x + _GELU_K * x ** 3))
    du, d2u = _GELU_C * (1.0 + 3.0 * _GELU_K * x * x), 6.0 * _GELU_C * _GELU_K * x
    dg = 0.5 * (1.0 - t * t) * du
    return 0.5 * (1.0 + t), dg, 0.5 * ((1.0 - t * t) * d2u - 2.0 * t * (1.0 - t * t) * du * du)


def _gelu_slopes(x, approximate):
    """f' = g + x g', f'' = 2 g' + x g''."""
    g, dg, d2g = _gelu_parts(x, approximate)
    x = min(max(x, -_GELU_CLIP), _GELU_CLIP)
    return g + x * dg, 2.0 * dg + x * d2g


def _softplus_value(x, beta, threshold):
    bx = beta * x
    return x if bx > threshold else (max(bx, 0.0) + math.log1p(math.exp(-abs(bx)))) / beta


def _softplus_slopes(x, beta, threshold):
    """f' = s = sigmoid(beta x) (1 where beta x > threshold); f'' = beta s (1 - s) where
    beta x < threshold, else 0 (PyTorch's masks)."""
    s = _logistic(beta * x)
    return (1.0 if beta * x > threshold else s), (beta * s * (1.0 - s)
                                                  if beta * x < threshold else 0.0)


def _sigmoid_slopes(y):
    """y' = y (1 - y), y'' = y' (1 - y) - y y' (product rule)."""
    first = y * (1.0 - y)
    return first, first * (1.0 - y) - y * first


# ------------------------------------------------------- ONNX forms (opset 17)
def _gelu_onnx(g, x, approximate):
    """x (1 + Erf(x / sqrt 2)) 0.5, the node sequence torch exports (which load_onnx reads
    back as a GELU), or the tanh form 0.5 x (1 + Tanh(...)) (opset 17 has no Gelu)."""
    if approximate == "none":
        inner = g.op("Erf", [g.op("Div", [x, g.const(math.sqrt(2), "sqrt2")])], "erf")
        y = g.op("Mul", [x, g.op("Add", [inner, g.const(1.0, "one")])], "gelu")
        return g.op("Mul", [y, g.const(0.5, "half")], "gelu")
    half = g.op("Mul", [x, g.const(0.5, "half")], "half_x")
    cube = g.op("Mul", [g.op("Mul", [x, x], "x2"), x], "x3")
    u = g.op("Add", [x, g.op("Mul", [cube, g.const(_GELU_K, "k")])], "u")
    inner = g.op("Tanh", [g.op("Mul", [u, g.const(_GELU_C, "c")])], "t")
    return g.op("Mul", [half, g.op("Add", [inner, g.const(1.0, "one")])], "gelu")


def _softplus_onnx(g, x, beta, threshold):
    """Where(beta x > threshold, x, Softplus(Min(beta x, threshold)) / beta)."""
    bx = x if beta == 1 else g.op("Mul", [x, g.const(beta, "beta")], "beta_x")
    limit = g.const(threshold, "threshold")
    soft = g.op("Softplus", [g.op("Min", [bx, limit], "clipped")], "softplus")
    if beta != 1:
        soft = g.op("Div", [soft, g.const(beta, "beta")], "softplus")
    return g.op("Where", [g.op("Greater", [bx, limit], "linear"), x, soft], "softplus")


# ---------------------------------------------------------------- declarations
declare(gelu, gelu_backward, gradgrad=gelu_gradgrad, layer="GELU",
        value=lambda x, approximate: x * _gelu_parts(x, approximate)[0], slopes=_gelu_slopes,
        variants={"gelu_tanh": {"approximate": "tanh"}}, samples=({}, {"approximate": "tanh"}),
        torch=lambda F, t, approximate="none": F.gelu(t, approximate=approximate),
        onnx=_gelu_onnx)
declare(tanh, tanh_backward, gradgrad=tanh_gradgrad, layer="Tanh", saves="y",
        value=math.tanh, slopes=lambda y: (1.0 - y * y, -2.0 * y * (1.0 - y * y)),
        torch=lambda F, t: t.tanh(), onnx=lambda g, x: g.op("Tanh", [x], "tanh"))
declare(sigmoid, sigmoid_backward, gradgrad=sigmoid_gradgrad, layer="Sigmoid", saves="y",
        value=_logistic, slopes=_sigmoid_slopes, torch=lambda F, t: t.sigmoid(),
        onnx=lambda g, x: g.op("Sigmoid", [x], "sigmoid"))
declare(softplus, softplus_backward, gradgrad=softplus_gradgrad, layer="Softplus",
        value=_softplus_value, slopes=_softplus_slopes,
        kinks=lambda beta=1.0, threshold=20.0: (threshold / beta,),
        samples=({}, {"beta": 2.0, "threshold": 3.0}),
        torch=lambda F, t, beta=1.0, threshold=20.0: F.softplus(t, beta, threshold),
        onnx=_softplus_onnx)
__all__ = exports(__name__, globals())
