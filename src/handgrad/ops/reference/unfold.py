"""Naive unfold and fold: loops over output positions, channels and kernel taps.

The readable specification of :mod:`handgrad.ops.unfold`, with the same signatures."""

from __future__ import annotations

import itertools

import numpy as np

from ..._checks import upstream_grad
from .._args.cache import check_cache
from ..declare import exports
from ..unfold import UnfoldCache, prepare_fold, prepare_unfold


def _pairs(cache):
    """``((l, oh, ow), (t, i, j), (h, w))`` for every window position and tap whose input
    position (h, w) lies inside the map (column ``c*K + t`` of row ``l``)."""
    (ah, aw), kw = cache.axes, cache.axes[1].kernel
    positions = itertools.product(range(ah.size_out), range(aw.size_out))
    for l, (oh, ow) in enumerate(positions):
        for i, j in itertools.product(range(ah.kernel), range(aw.kernel)):
            h = oh * ah.stride + i * ah.dilation - ah.pad_before
            w = ow * aw.stride + j * aw.dilation - aw.pad_before
            if 0 <= h < ah.size_in and 0 <= w < aw.size_in:
                yield l, i * kw + j, (h, w)


def _gather_loops(x, cache):
    cols = np.zeros(cache.cols_shape, dtype=x.dtype)
    k = cols.shape[2] // x.shape[3]
    for l, t, (h, w) in _pairs(cache):
        for c in range(x.shape[3]):
            cols[:, l, c * k + t] = x[:, h, w, c]
    return cols


def _scatter_loops(cols, cache):
    x = np.zeros(cache.map_shape, dtype=cols.dtype)
    k = cols.shape[2] // x.shape[3]
    for l, t, (h, w) in _pairs(cache):
        for c in range(x.shape[3]):
            x[:, h, w, c] += cols[:, l, c * k + t]
    return x


def unfold(x, kernel_size, dilation=1, padding=0, stride=1):
    """Loop twin of :func:`handgrad.ops.unfold`."""
    x, cache = prepare_unfold(x, kernel_size, dilation, padding, stride)
    return _gather_loops(x, cache), cache


def unfold_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.unfold_backward`."""
    cache = check_cache("unfold_backward", cache, "unfold", UnfoldCache)
    return _scatter_loops(upstream_grad("unfold_backward", dy, cache.cols_shape, cache.dtype),
                          cache)


def fold(x, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Loop twin of :func:`handgrad.ops.fold`."""
    x, cache = prepare_fold(x, output_size, kernel_size, dilation, padding, stride)
    return _scatter_loops(x, cache), cache


def fold_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.fold_backward`."""
    cache = check_cache("fold_backward", cache, "fold", UnfoldCache)
    return _gather_loops(upstream_grad("fold_backward", dy, cache.map_shape, cache.dtype), cache)


__all__ = exports(__name__, globals())
