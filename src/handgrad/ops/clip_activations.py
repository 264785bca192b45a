"""Clipping, shrinking and affine activations (PyTorch's ReLU6, Hardtanh, Hardswish,
Softshrink, Hardshrink, Threshold; numpy-ml's Affine) as ``(forward, backward)`` kernel
pairs and their second-order kernels (see :mod:`.activations` for the conventions)::

    relu6       min(max(x, 0), 6)                    f' = [0 < x < 6]
    hardtanh    min(max(x, lo), hi)                  f' = [lo < x < hi]
    hardswish   x min(max(x + 3, 0), 6) / 6          f' = 0 (x <= -3), x/3 + 1/2 (x < 3),
                                                          1 (x >= 3); f'' = 1/3 on (-3, 3)
    softshrink  x - l (x > l), x + l (x < -l), else 0        f' = [|x| > l]
    hardshrink  x (|x| > l), else 0                          f' = [|x| > l]
    threshold   x (x > t), else value                        f' = [x > t]
    affine      slope x + intercept                          f' = slope

Gradients at kinks follow PyTorch (0 at the clip bounds and at +-l, 0 at x = t,
hardswish'(-3) = 0 and hardswish'(3) = 1); f'' = 0 for the piecewise-linear ones.
"""

from __future__ import annotations

from .._checks import array_module
from .._hyper import number
from ._args.derived import mask_kernels
from ._args.elementwise import make_cache, open_cache
from ._args.gradgrad import gradgrad_result, open_elementwise
from .activations import _input
from .declare import declare, exports

MASKS = {
    "relu6": lambda x: (x > 0.0) & (x < 6.0),
    "hardtanh": lambda x, lo, hi: (x > lo) & (x < hi),
    "softshrink": lambda x, lambd: (x < -lambd) | (x > lambd),
    "hardshrink": lambda x, lambd: (x < -lambd) | (x > lambd),
    "threshold": lambda x, limit, value: x > limit,
}
"""Op name -> ``mask(x, *params)``: where a piecewise-linear op's slope is 1 (else 0),
for arrays and for the loop twins' scalars alike."""


# ----------------------------- first and second order of the piecewise-linear ones
relu6_backward, relu6_gradgrad = mask_kernels(MASKS, "relu6", "0 < x < 6")
hardtanh_backward, hardtanh_gradgrad = mask_kernels(MASKS, "hardtanh", "min_val < x < max_val")
softshrink_backward, softshrink_gradgrad = mask_kernels(MASKS, "softshrink", "|x| > lambd")
hardshrink_backward, hardshrink_gradgrad = mask_kernels(MASKS, "hardshrink", "|x| > lambd")
threshold_backward, threshold_gradgrad = mask_kernels(MASKS, "threshold", "x > threshold")


def relu6(x):
    """y = min(max(x, 0), 6). The cache holds ``x``."""
    xp, x = _input("relu6", x)
    return xp.clip(x, 0.0, 6.0), make_cache("relu6", x, x)


def hardtanh(x, min_val=-1.0, max_val=1.0):
    """y = min(max(x, min_val), max_val). The cache holds ``x``."""
    op = "hardtanh"
    xp, x = _input(op, x)
    lo, hi = number(op, "min_val", min_val), number(op, "max_val", max_val)
    if lo > hi:
        raise ValueError(f"{op}: 'max_val' must be >= 'min_val' ({lo!r}); received {hi!r}")
    return xp.clip(x, lo, hi), make_cache(op, x, x, (lo, hi))


def hardswish(x):
    """y = x * min(max(x + 3, 0), 6) / 6 (Howard et al. 2019). The cache holds ``x``."""
    xp, x = _input("hardswish", x)
    return x * (xp.clip(x + 3.0, 0.0, 6.0) / 6.0), make_cache("hardswish", x, x)


def _hardswish_slope(xp, x):
    return xp.where(x <= -3.0, 0.0, xp.where(x < 3.0, x / 3.0 + 0.5, 1.0))


def hardswish_backward(dy, cache):
    """dx = dy * (0 for x <= -3, x / 3 + 1/2 for -3 < x < 3, 1 for x >= 3) (PyTorch's)."""
    dy, cache = open_cache("hardswish_backward", "hardswish", dy, cache)
    return dy * _hardswish_slope(array_module(dy), cache.saved)


def softshrink(x, lambd=0.5):
    """y = x - lambd (x > lambd), x + lambd (x < -lambd), else 0. The cache holds ``x``."""
    op = "softshrink"
    xp, x = _input(op, x)
    lambd = number(op, "lambd", lambd, low=0.0)
    y = xp.where(x > lambd, x - lambd, xp.where(x < -lambd, x + lambd, 0.0))
    return y, make_cache(op, x, x, (lambd,))


def hardshrink(x, lambd=0.5):
    """y = x where |x| > lambd, else 0. The cache holds ``x``."""
    op = "hardshrink"
    xp, x = _input(op, x)
    lambd = number(op, "lambd", lambd)
    y = xp.where(MASKS[op](x, lambd), x, 0.0)
    return y, make_cache(op, x, x, (lambd,))


def threshold(x, threshold=0.0, value=0.0):
    """y = x where x > threshold, else value (PyTorch's Threshold). The cache holds ``x``."""
    op = "threshold"
    xp, x = _input(op, x)
    limit, value = number(op, "threshold", threshold), number(op, "value", value)
    return xp.where(x > limit, x, value), make_cache(op, x, x, (limit, value))


def affine(x, slope=1.0, intercept=0.0):
    """y = slope * x + intercept (numpy-ml's Affine). The cache holds ``x``."""
    op = "affine"
    _, x = _input(op, x)
    slope, intercept = number(op, "slope", slope), number(op, "intercept", intercept)
    return x * slope + intercept, make_cache(op, x, x, (slope, intercept))


def affine_backward(dy, cache):
    """dx = slope * dy."""
    dy, cache = open_cache("affine_backward", "affine", dy, cache)
    return dy * cache.params[0]


# ---------------------------------------------------------------- second order
def hardswish_gradgrad(q, dy, cache):
    """Second order of :func:`hardswish`: f' as the backward, f'' = 1/3 on (-3, 3), else 0."""
    q, dy, cache = open_elementwise("hardswish_gradgrad", "hardswish", q, dy, cache)
    xp, x = array_module(q), cache.saved
    second = ((x > -3.0) & (x < 3.0)).astype(x.dtype) / 3.0
    return gradgrad_result(q * _hardswish_slope(xp, x), q, dy, second)


def affine_gradgrad(q, dy, cache):
    """Second order of :func:`affine`: (slope q, 0)."""
    q, dy, cache = open_elementwise("affine_gradgrad", "affine", q, dy, cache)
    return gradgrad_result(q * cache.params[0], q, dy)


# ------------------------------------------------ scalar math of the loop twins
def _mask_slopes(op):
    """(f', f'') = ([mask], 0) of a piecewise-linear op, on a scalar."""
    return lambda x, *params: (1.0 if MASKS[op](x, *params) else 0.0, 0.0)


def _hardswish_slopes(x):
    first = 0.0 if x <= -3.0 else (x / 3.0 + 0.5 if x < 3.0 else 1.0)
    return first, (1.0 / 3.0 if -3.0 < x < 3.0 else 0.0)


def _shrink_onnx(soft):
    """ONNX Shrink: bias lambd (soft) or 0 (hard)."""
    return lambda g, x, lambd: g.op("Shrink", [x], "shrink", bias=lambd if soft else 0.0,
                                    lambd=lambd)


def _clip_onnx(g, x, lo, hi):
    return g.op("Clip", [x, g.const(lo, "min"), g.const(hi, "max")], "clip")


# ---------------------------------------------------------------- declarations
declare(relu6, relu6_backward, gradgrad=relu6_gradgrad, layer="ReLU6",
        value=lambda x: min(max(x, 0.0), 6.0), slopes=_mask_slopes("relu6"),
        kinks=lambda: (0.0, 6.0), torch=lambda F, t: F.relu6(t),
        onnx=lambda g, x: _clip_onnx(g, x, 0.0, 6.0))
declare(hardtanh, hardtanh_backward, gradgrad=hardtanh_gradgrad, layer="Hardtanh",
        value=lambda x, lo, hi: min(max(x, lo), hi), slopes=_mask_slopes("hardtanh"),
        kinks=lambda min_val=-1.0, max_val=1.0: (min_val, max_val),
        samples=({}, {"min_val": -0.5, "max_val": 2.0}),
        torch=lambda F, t, min_val=-1.0, max_val=1.0: F.hardtanh(t, min_val, max_val),
        onnx=lambda g, x, min_val, max_val: _clip_onnx(g, x, min_val, max_val))
declare(hardswish, hardswish_backward, gradgrad=hardswish_gradgrad, layer="Hardswish",
        value=lambda x: x * min(max(x + 3.0, 0.0), 6.0) / 6.0, slopes=_hardswish_slopes,
        kinks=lambda: (-3.0, 3.0), torch=lambda F, t: F.hardswish(t),
        onnx=lambda g, x: g.op("HardSwish", [x], "hardswish"))
declare(softshrink, softshrink_backward, gradgrad=softshrink_gradgrad, layer="Softshrink",
        value=lambda x, lambd: x - lambd if x > lambd else (x + lambd if x < -lambd else 0.0),
        slopes=_mask_slopes("softshrink"), kinks=lambda lambd=0.5: (-lambd, lambd),
        samples=({}, {"lambd": 1.0}),
        torch=lambda F, t, lambd=0.5: F.softshrink(t, lambd), onnx=_shrink_onnx(True))
declare(hardshrink, hardshrink_backward, gradgrad=hardshrink_gradgrad, layer="Hardshrink",
        value=lambda x, lambd: x if MASKS["hardshrink"](x, lambd) else 0.0,
        slopes=_mask_slopes("hardshrink"), kinks=lambda lambd=0.5: (-lambd, lambd),
        samples=({}, {"lambd": 1.0}),
        torch=lambda F, t, lambd=0.5: F.hardshrink(t, lambd), onnx=_shrink_onnx(False))
declare(threshold, threshold_backward, gradgrad=threshold_gradgrad, layer="Threshold",
        value=lambda x, limit, value: x if x > limit else value,
        slopes=_mask_slopes("threshold"), kinks=lambda threshold=0.0, value=0.0: (threshold,),
        samples=({}, {"threshold": 0.5, "value": -2.0}),
        torch=lambda F, t, threshold=0.0, value=0.0: F.threshold(t, threshold, value),
        onnx=lambda g, x, threshold, value: g.op(
            "Where", [g.op("Greater", [x, g.const(threshold, "threshold")], "above"), x,
                      g.const(value, "value")], "threshold"))
declare(affine, affine_backward, gradgrad=affine_gradgrad, layer="Affine",
        value=lambda x, slope, intercept: slope * x + intercept,
        slopes=lambda _, slope, intercept: (slope, 0.0),
        samples=({}, {"slope": -1.5, "intercept": 0.25}),
        torch=lambda F, t, slope=1.0, intercept=0.0: t * slope + intercept,
        onnx=lambda g, x, slope, intercept: g.op(
            "Add", [g.op("Mul", [x, g.const(slope, "slope")], "scaled"),
                    g.const(intercept, "intercept")], "affine"))
__all__ = exports(__name__, globals())
