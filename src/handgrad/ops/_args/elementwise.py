"""The cache and checks shared by the activation, softmax and dropout kernels."""

from __future__ import annotations

from dataclasses import dataclass

from ..._checks import describe, is_int, upstream_grad
from .cache import Cache, check_cache


@dataclass(frozen=True)
class OpCache(Cache):
    """What an op's backward needs: the forward's name (``op``), output shape and dtype,
    the saved array (``x``, ``y`` or a mask, or None) and scalar hyper-parameters."""

    shape: tuple
    dtype: object
    saved: object = None
    params: tuple = ()


def make_cache(op, x, saved=None, params=()):
    """An :class:`OpCache` for an op whose output has ``x``'s shape and dtype."""
    return OpCache(op, tuple(x.shape), x.dtype, saved, tuple(params))


def open_cache(op, forward, dy, cache):
    """Validate ``cache`` (made by ``forward``) and ``dy``; return ``(dy, cache)``."""
    cache = check_cache(op, cache, forward, OpCache)
    return upstream_grad(op, dy, cache.shape, cache.dtype), cache


def axis_index(op, axis, ndim) -> int:
    """Normalize an axis of an ``ndim``-D array to a non-negative int."""
    if not is_int(axis):
        raise TypeError(f"{op}: 'axis' must be an int; received {describe(axis)}")
    if not -ndim <= axis < ndim:
        raise ValueError(
            f"{op}: 'axis' must be in [{-ndim}, {ndim}) for a {ndim}-D input; received {axis}"
        )
    return int(axis) % ndim
