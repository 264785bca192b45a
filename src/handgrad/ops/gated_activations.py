"""Activations with a learned or random slope or a gate: PReLU (PyTorch's ``prelu``,
channels last), RReLU (Xu et al. 2015) and GLU (Dauphin et al. 2017)::

    prelu   y = x (x > 0), else w x      dx = dy (x > 0), else w dy
            w (1,) or (C,) along x's last axis     dw = sum over all but the last axis of
                                                       [x <= 0] x dy   (or over all, for (1,))
    rrelu   y = x (x > 0), else r x      dx = dy (x > 0), else r dy
            r = noise (training: the slopes drawn uniform in [lower, upper) by the caller),
            or (lower + upper) / 2 (evaluation)
    glu     a, b = the halves of x along axis;  y = a s,  s = sigmoid(b)
            da = dy s,  db = dy a s (1 - s)

PReLU's and RReLU's slopes at x = 0 are ``w`` and ``r``, as PyTorch's.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._checks import array_module, describe, float_array, upstream_grad
from .._hyper import number
from . import special
from ._args.cache import Cache, check_cache
from ._args.elementwise import axis_index, make_cache, open_cache
from .declare import Data, Fixed, Sample, declare, exports


@dataclass(frozen=True)
class PReLUCache(Cache):
    """What :func:`prelu_backward` needs: the input ``x`` and the slopes ``weight``."""

    x: object
    weight: object


def prepare_prelu(op, x, weight):
    """``(x, weight)`` checked: float arrays of one dtype, ``weight`` of shape (1,) or
    (C,) with C the size of ``x``'s last axis."""
    x = float_array(op, "x", x)
    weight = float_array(op, "weight", weight, ndim=1)
    channels = x.shape[-1] if x.ndim else 1
    if weight.shape[0] not in (1, channels):
        raise ValueError(f"{op}: 'weight' must have shape (1,) or ({channels},) (the size of "
                         f"x's last axis); received {weight.shape}")
    if weight.dtype != x.dtype:
        raise TypeError(f"{op}: 'weight' must have x's dtype {x.dtype}; received "
                        f"{describe(weight)}")
    return x, weight


def open_prelu_cache(op, dy, cache):
    """``(dy, cache)`` of :func:`prelu_backward` (and its loop twin), checked."""
    cache = check_cache(op, cache, "prelu", PReLUCache)
    return upstream_grad(op, dy, cache.x.shape, cache.x.dtype), cache


def prelu(x, weight):
    """y = x where x > 0, else weight * x; x (..., C), weight (1,) or (C,).

    Returns ``(y, cache)`` for :func:`prelu_backward`.
    """
    x, weight = prepare_prelu("prelu", x, weight)
    y = array_module(x).where(x > 0, x, x * weight)
    return y, PReLUCache("prelu", x, weight)


def prelu_backward(dy, cache):
    """(dx, dweight): dx = dy where x > 0, else weight * dy; dweight = the sum of
    x * dy where x <= 0 over every axis but the last (over all for a (1,) weight)."""
    dy, cache = open_prelu_cache("prelu_backward", dy, cache)
    xp, x, weight = array_module(dy), cache.x, cache.weight
    dx = xp.where(x > 0, dy, dy * weight)
    negative = xp.where(x > 0, 0.0, x * dy)
    if weight.shape[0] == 1:
        dweight = xp.sum(negative).reshape(1)
    else:
        dweight = xp.sum(negative.reshape(-1, weight.shape[0]), axis=0)
    return dx, dweight.astype(x.dtype, copy=False)


def rrelu(x, noise=None, lower=0.125, upper=1.0 / 3.0, training=False):
    """y = x where x > 0, else r * x, with r = ``noise`` (x's shape and dtype, required in
    training: the random slopes) or (lower + upper) / 2 in evaluation (``noise`` unused).
    The cache holds ``x`` and the slopes.

    Returns ``(y, cache)`` for :func:`rrelu_backward`.
    """
    op = "rrelu"
    x = float_array(op, "x", x)
    lower, upper = number(op, "lower", lower), number(op, "upper", upper)
    if lower > upper:
        raise ValueError(f"{op}: 'upper' must be >= 'lower' ({lower!r}); received {upper!r}")
    if not isinstance(training, bool):
        raise TypeError(f"{op}: 'training' must be a bool; received {describe(training)}")
    if training:
        if noise is None:
            raise ValueError(f"{op}: 'noise' (the random slopes, x's shape) is required in "
                             f"training")
        slopes = upstream_grad(op, noise, x.shape, x.dtype, "noise", "x's shape")
    else:
        slopes = x.dtype.type((lower + upper) / 2.0)
    y = array_module(x).where(x > 0, x, x * slopes)
    return y, make_cache(op, x, x, (slopes,))


def rrelu_backward(dy, cache):
    """dx = dy where x > 0, else r * dy."""
    dy, cache = open_cache("rrelu_backward", "rrelu", dy, cache)
    (slopes,) = cache.params
    return array_module(dy).where(cache.saved > 0, dy, dy * slopes)


def _halves(op, x, axis):
    x = float_array(op, "x", x)
    axis = axis_index(op, axis, x.ndim)
    if x.shape[axis] % 2:
        raise ValueError(f"{op}: x's axis {axis} must have an even size to split in halves; "
                         f"received shape {x.shape}")
    xp, half = array_module(x), x.shape[axis] // 2
    index = [slice(None)] * x.ndim
    a, b = (x[tuple(index[:axis] + [part])] for part in (slice(None, half), slice(half, None)))
    return xp, x, axis, a, b


def glu(x, axis=-1):
    """y = a * sigmoid(b), a and b the first and second halves of x along ``axis`` (its
    size even); y has x's shape with that axis halved. The cache holds ``x``.

    Returns ``(y, cache)`` for :func:`glu_backward`.
    """
    xp, x, axis, a, b = _halves("glu", x, axis)
    y = a * special.sigmoid(xp, b)
    return y, make_cache("glu", y, x, (axis,))


def glu_backward(dy, cache):
    """dx = [dy s, dy a s (1 - s)] joined along the axis, s = sigmoid(b)."""
    dy, cache = open_cache("glu_backward", "glu", dy, cache)
    (axis,) = cache.params
    xp, _, _, a, b = _halves("glu_backward", cache.saved, axis)
    s = special.sigmoid(xp, b)
    return xp.concatenate([dy * s, dy * a * s * (1.0 - s)], axis=axis)


# ---------------------------------------------------------------- torch counterparts
def _torch_prelu(F, x, weight):
    """torch's prelu reads the channels on axis 1: move the last axis there and back."""
    if x.ndim < 2:
        return F.prelu(x, weight)
    return F.prelu(x.movedim(-1, 1), weight).movedim(1, -1)


declare(prelu, prelu_backward, torch=_torch_prelu,
        samples=(Sample(((4, 5), (5,))), Sample(((2, 3, 4), (1,))),
                 Sample(((2, 3, 2, 3), (3,))), Sample(((6,), (1,)))))
def _torch_rrelu(F, x, noise=None, lower=0.125, upper=1.0 / 3.0, training=False):
    if training:
        raise NotImplementedError("torch draws RReLU's slopes itself; tests/"
                                  "test_gated_activations.py gives torch's slopes to the op")
    return F.rrelu(x, lower, upper, training=False)


declare(rrelu, rrelu_backward, torch=_torch_rrelu,
        samples=(Sample(((4, 5), Data((4, 5), 0.125, 1.0 / 3.0)), {"training": True}),
                 Sample(((2, 3, 4), Fixed(None))),
                 Sample(((3, 4), Fixed(None)), {"lower": 0.2, "upper": 0.6})))
declare(glu, glu_backward, torch=lambda F, t, axis=-1: F.glu(t, axis),
        samples=(Sample(((3, 6),)), Sample(((2, 4, 3),), {"axis": 1}),
                 Sample(((2, 2, 3, 4),), {"axis": -1})))
__all__ = exports(__name__, globals())
