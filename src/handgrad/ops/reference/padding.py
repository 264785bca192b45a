"""Naive padding: a loop over output positions, each reading its source position.

The readable specification of :mod:`handgrad.ops.padding`, with the same signatures
and argument checks.
"""

from __future__ import annotations

import numpy as np

from ..._checks import upstream_grad
from .._args.cache import check_cache
from ..declare import exports
from ..padding import PadCache, prepare_pad


def _source(o, before, size, mode):
    """The input position output position ``o`` reads along one axis (None: the
    constant)."""
    i = o - before
    if 0 <= i < size:
        return i
    if mode == "constant":
        return None
    if mode == "replicate":
        return 0 if i < 0 else size - 1
    if mode == "circular":
        return i % size
    return -i if i < 0 else 2 * (size - 1) - i  # reflect


def _sources(cache, out_position):
    per_axis = [_source(o, b, s, cache.mode)
                for o, (b, _), s in zip(out_position, cache.pads, cache.x_shape[1:-1])]
    return None if None in per_axis else tuple(per_axis)


def pad(x, padding, mode="constant", value=0.0):
    """Loop twin of :func:`handgrad.ops.pad`: y[n, o..., :] = x[n, source(o)..., :]."""
    x, pads, mode, value = prepare_pad("pad", x, padding, mode, value)
    cache = PadCache("pad", tuple(x.shape), x.dtype, pads, mode)
    y = np.empty(cache.y_shape, dtype=x.dtype)
    for n in range(x.shape[0]):
        for o in np.ndindex(*cache.y_shape[1:-1]):
            source = _sources(cache, o)
            y[(n, *o)] = value if source is None else x[(n, *source)]
    return y, cache


def pad_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.pad_backward`: dx[n, source(o)...] += dy[n, o...]."""
    cache = check_cache("pad_backward", cache, "pad", PadCache)
    dy = upstream_grad("pad_backward", dy, cache.y_shape, cache.dtype)
    dx = np.zeros(cache.x_shape, dtype=dy.dtype)
    for n in range(dy.shape[0]):
        for o in np.ndindex(*cache.y_shape[1:-1]):
            source = _sources(cache, o)
            if source is not None:
                dx[(n, *source)] += dy[(n, *o)]
    return dx


__all__ = exports(__name__, globals())
