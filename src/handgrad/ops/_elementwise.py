"""Cache and argument checks shared by the activation, softmax, linear and dropout kernels."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from .._checks import describe, is_int
from .conv import _check_dy


@dataclass(frozen=True)
class OpCache:
    """What an op's backward needs: the forward's name, output shape and dtype,
    the saved array (``x``, ``y`` or a mask, or None) and scalar hyper-parameters."""

    op: str
    shape: tuple
    dtype: object
    saved: object = None
    params: tuple = ()


def make_cache(op, x, saved=None, params=()):
    """An :class:`OpCache` for an op whose output has ``x``'s shape and dtype."""
    return OpCache(op, tuple(x.shape), x.dtype, saved, tuple(params))


def open_cache(op, forward, dy, cache):
    """Validate ``cache`` (made by ``forward``) and ``dy``; return ``(dy, cache)``."""
    if not isinstance(cache, OpCache) or cache.op != forward:
        raise TypeError(
            f"{op}: 'cache' must be the cache returned by {forward}; received {describe(cache)}"
        )
    return _check_dy(op, dy, cache.shape, cache.dtype), cache


def real_number(op, name, value, *, low=-math.inf, high=math.inf, low_open=False,
                high_open=False) -> float:
    """A finite real number (not a bool) in the given interval, as a Python float."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{op}: '{name}' must be a real number; received {describe(value)}")
    value = float(value)
    below = value <= low if low_open else value < low
    above = value >= high if high_open else value > high
    if not math.isfinite(value) or below or above:
        left = "(" if low_open else "["
        right = ")" if high_open else "]"
        raise ValueError(
            f"{op}: '{name}' must be a finite number in {left}{low}, {high}{right}; "
            f"received {value!r}"
        )
    return value


def axis_index(op, axis, ndim) -> int:
    """Normalize an axis of an ``ndim``-D array to a non-negative int."""
    if not is_int(axis):
        raise TypeError(f"{op}: 'axis' must be an int; received {describe(axis)}")
    if not -ndim <= axis < ndim:
        raise ValueError(
            f"{op}: 'axis' must be in [{-ndim}, {ndim}) for a {ndim}-D input; received {axis}"
        )
    return int(axis) % ndim
