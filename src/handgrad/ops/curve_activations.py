"""More smooth activations (SiLU, Mish, CELU, LogSigmoid, Softsign, Tanhshrink and
numpy-ml's Exponential) as ``(forward, backward)`` kernel pairs and their second-order
kernels, with PyTorch's semantics (see :mod:`.activations` for the conventions).
With ``s = sigmoid(x)`` and, for Mish, ``t = tanh(softplus(x))``::

    silu        x s                      f' = s (1 + x (1 - s))
                                         f'' = s (1 - s) (2 + x (1 - 2 s))
    mish        x t                      f' = t + x s (1 - t^2)
                                         f'' = (1 - t^2) (2 s + x s (1 - s) - 2 x t s^2)
    celu        x (x > 0), else a (e^(x/a) - 1)    f' = 1 or e^(x/a); f'' = e^(x/a) / a (x < 0)
    log_sigmoid -softplus(-x)            f' = 1 - s = sigmoid(-x), f'' = -s (1 - s)
    softsign    x / (1 + |x|)            f' = 1 / (1 + |x|)^2, f'' = -2 sign(x) / (1 + |x|)^3
    tanhshrink  x - tanh(x)              f' = tanh(x)^2, f'' = 2 tanh(x) (1 - tanh(x)^2)
    exponential e^x                      f' = f'' = y

``exp`` is only taken of non-positive numbers (of ``x`` itself for Exponential, whose
output overflows to inf for x > log(max float), as in PyTorch, without a warning).
"""

from __future__ import annotations

import math

import numpy as np

from .._hyper import number
from . import special
from ._args.derived import slope_kernels
from ._args.elementwise import make_cache
from .activations import _input
from .declare import declare, exports
from .smooth_activations import _logistic


def _forward(op, x, value, saves="x", params=()):
    """``(y, cache)`` of an elementwise op: ``y = value(xp, x)``, the cache holds ``x`` or
    ``y``."""
    xp, x = _input(op, x)
    y = value(xp, x)
    return y, make_cache(op, x, x if saves == "x" else y, params)


def _silu_slopes(xp, x):
    """f' = s (1 + x (1 - s)), f'' = s (1 - s) (2 + x (1 - 2 s)), s = sigmoid(x)."""
    s = special.sigmoid(xp, x)
    return s * (1.0 + x * (1.0 - s)), s * (1.0 - s) * (2.0 + x * (1.0 - 2.0 * s))


def _mish_slopes(xp, x):
    """f' = t + x s (1 - t^2), f'' = (1 - t^2) (2 s + x s (1 - s) - 2 x t s^2),
    t = tanh(softplus(x)), s = sigmoid(x)."""
    s, t = special.sigmoid(xp, x), xp.tanh(special.softplus(xp, x))
    sech2 = 1.0 - t * t
    return t + x * s * sech2, sech2 * (2.0 * s + x * s * (1.0 - s) - 2.0 * x * t * s * s)


def _celu_slopes(xp, x, alpha):
    """f' = 1 (x > 0, and 1 at x = 0 as PyTorch) or e^(x/alpha); f'' = e^(x/alpha) / alpha
    for x < 0, else 0."""
    curve = xp.exp(xp.minimum(x, 0.0) / alpha)
    return xp.where(x > 0, 1.0, curve), xp.where(x < 0, curve / alpha, 0.0)


def _log_sigmoid_slopes(xp, x):
    """f' = sigmoid(-x) (= 1 - s), f'' = -s (1 - s), s = sigmoid(x)."""
    s, r = special.sigmoid(xp, x), special.sigmoid(xp, -x)  # r = 1 - s, without rounding
    return r, -s * r


def _softsign_slopes(xp, x):
    """f' = 1 / (1 + |x|)^2, f'' = -2 sign(x) / (1 + |x|)^3."""
    d = 1.0 / (1.0 + xp.abs(x))
    return d * d, -2.0 * xp.sign(x) * d * d * d


def _tanhshrink_slopes(xp, x):
    """f' = tanh(x)^2, f'' = 2 tanh(x) (1 - tanh(x)^2)."""
    t = xp.tanh(x)
    return t * t, 2.0 * t * (1.0 - t * t)


def _exponential_slopes(xp, y):
    """f' = f'' = y."""
    return y, y


def silu(x):
    """y = x * sigmoid(x) (SiLU, swish). The cache holds ``x``."""
    return _forward("silu", x, lambda xp, x: x * special.sigmoid(xp, x))


def mish(x):
    """y = x * tanh(softplus(x)) (Misra 2019). The cache holds ``x``."""
    return _forward("mish", x, lambda xp, x: x * xp.tanh(special.softplus(xp, x)))


def celu(x, alpha=1.0):
    """y = x where x > 0, else alpha * (exp(x / alpha) - 1). The cache holds ``x``."""
    alpha = number("celu", "alpha", alpha)
    if alpha == 0:
        raise ValueError(f"celu: 'alpha' must be nonzero; received {alpha!r}")
    return _forward("celu", x, lambda xp, x: xp.where(
        x > 0, x, alpha * xp.expm1(xp.minimum(x, 0.0) / alpha)), params=(alpha,))


def log_sigmoid(x):
    """y = log(sigmoid(x)) = -softplus(-x), finite for any finite x. The cache holds ``x``."""
    return _forward("log_sigmoid", x, lambda xp, x: -special.softplus(xp, -x))


def softsign(x):
    """y = x / (1 + |x|). The cache holds ``x``."""
    return _forward("softsign", x, lambda xp, x: x / (1.0 + xp.abs(x)))


def tanhshrink(x):
    """y = x - tanh(x). The cache holds ``x``."""
    return _forward("tanhshrink", x, lambda xp, x: x - xp.tanh(x))


def _exp(xp, x):
    with np.errstate(over="ignore"):
        return xp.exp(x)


def exponential(x):
    """y = exp(x) (numpy-ml's Exponential; inf past the float's range). The cache holds
    ``y``."""
    return _forward("exponential", x, _exp, saves="y")


# ------------------------------------------- first and second order, from the slopes
silu_backward, silu_gradgrad = slope_kernels("silu", _silu_slopes)
mish_backward, mish_gradgrad = slope_kernels("mish", _mish_slopes)
celu_backward, celu_gradgrad = slope_kernels("celu", _celu_slopes)
log_sigmoid_backward, log_sigmoid_gradgrad = slope_kernels("log_sigmoid", _log_sigmoid_slopes)
softsign_backward, softsign_gradgrad = slope_kernels("softsign", _softsign_slopes)
tanhshrink_backward, tanhshrink_gradgrad = slope_kernels("tanhshrink", _tanhshrink_slopes)
exponential_backward, exponential_gradgrad = slope_kernels("exponential", _exponential_slopes)


# ------------------------------------------------ scalar math of the loop twins
def _softplus(x):
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


def _silu_scalar(x):
    """f = x s: f' = s + x s', f'' = 2 s' + x s'' with s' = s (1 - s), s'' = s' (1 - 2 s)."""
    s = _logistic(x)
    ds = s * (1.0 - s)
    return s + x * ds, 2.0 * ds + x * ds * (1.0 - 2.0 * s)


def _mish_scalar(x):
    """f = x t: f' = t + x t', f'' = 2 t' + x t'' with t' = s (1 - t^2),
    t'' = s (1 - s) (1 - t^2) - 2 t s t'."""
    s, t = _logistic(x), math.tanh(_softplus(x))
    dt = s * (1.0 - t * t)
    return t + x * dt, 2.0 * dt + x * (s * (1.0 - s) * (1.0 - t * t) - 2.0 * t * s * dt)


def _celu_scalar(x, alpha):
    """f' = 1 (x > 0) or e^(x/a); f'' = e^(x/a) / a for x < 0 (PyTorch: f''(0) = 0)."""
    if x > 0:
        return 1.0, 0.0
    curve = math.exp(x / alpha)
    return curve, (curve / alpha if x < 0 else 0.0)


def _softsign_scalar(x):
    d = 1.0 / (1.0 + abs(x))
    return d * d, (-2.0 * d ** 3 if x > 0 else (2.0 * d ** 3 if x < 0 else 0.0))


def _tanhshrink_scalar(x):
    t = math.tanh(x)
    return t * t, 2.0 * t * (1.0 - t * t)


# ------------------------------------------------------- ONNX forms (opset 17)
def _times_x(op):
    """x * op(x): SiLU (Sigmoid) and Mish (Tanh of Softplus; opset 17 has no Mish)."""
    def form(g, x):
        inner = (g.op("Sigmoid", [x], "sigmoid") if op == "silu" else
                 g.op("Tanh", [g.op("Softplus", [x], "softplus")], "tanh_softplus"))
        return g.op("Mul", [x, inner], op)
    return form


# ---------------------------------------------------------------- declarations
declare(silu, silu_backward, gradgrad=silu_gradgrad, layer="SiLU",
        value=lambda x: x * _logistic(x), slopes=_silu_scalar,
        torch=lambda F, t: F.silu(t), onnx=_times_x("silu"))
declare(mish, mish_backward, gradgrad=mish_gradgrad, layer="Mish",
        value=lambda x: x * math.tanh(_softplus(x)), slopes=_mish_scalar,
        torch=lambda F, t: F.mish(t), onnx=_times_x("mish"))
declare(celu, celu_backward, gradgrad=celu_gradgrad, layer="CELU",
        value=lambda x, a: x if x > 0 else a * math.expm1(x / a),
        slopes=_celu_scalar, kinks=lambda **_: (0.0,), samples=({}, {"alpha": 0.5}),
        torch=lambda F, t, alpha=1.0: F.celu(t, alpha),
        onnx=lambda g, x, alpha: g.op("Celu", [x], "celu", alpha=alpha))
declare(log_sigmoid, log_sigmoid_backward, gradgrad=log_sigmoid_gradgrad, layer="LogSigmoid",
        value=lambda x: -_softplus(-x),
        slopes=lambda x: (_logistic(-x), -_logistic(x) * _logistic(-x)),
        torch=lambda F, t: F.logsigmoid(t),
        onnx=lambda g, x: g.op("Neg", [g.op("Softplus", [g.op("Neg", [x], "neg_x")],
                                            "softplus")], "log_sigmoid"))
declare(softsign, softsign_backward, gradgrad=softsign_gradgrad, layer="Softsign",
        value=lambda x: x / (1.0 + abs(x)), slopes=_softsign_scalar,
        kinks=lambda: (0.0,), torch=lambda F, t: F.softsign(t),
        onnx=lambda g, x: g.op("Softsign", [x], "softsign"))
declare(tanhshrink, tanhshrink_backward, gradgrad=tanhshrink_gradgrad, layer="Tanhshrink",
        value=lambda x: x - math.tanh(x), slopes=_tanhshrink_scalar,
        torch=lambda F, t: F.tanhshrink(t),
        onnx=lambda g, x: g.op("Sub", [x, g.op("Tanh", [x], "tanh")], "tanhshrink"))
declare(exponential, exponential_backward, gradgrad=exponential_gradgrad,
        layer="Exponential", saves="y", value=math.exp, slopes=lambda y: (y, y),
        torch=lambda F, t: t.exp(), onnx=lambda g, x: g.op("Exp", [x], "exp"))
__all__ = exports(__name__, globals())
