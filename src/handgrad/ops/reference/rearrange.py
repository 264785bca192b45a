"""Naive rearranging: a loop over output positions and channels, each copying the input
value it reads (and the backward adding it back).

The readable specification of :mod:`handgrad.ops.rearrange`, with the same signatures.
"""

from __future__ import annotations

import numpy as np

from ..declare import exports
from ..rearrange import (
    RearrangeCache,
    open_rearrange_cache,
    prepare_channel_shuffle,
    prepare_pixel_shuffle,
)


def _shuffle_loops(x, r):
    """y[n, h*r + i, w*r + j, c] = x[n, h, w, c*r*r + i*r + j]."""
    n, h, w, crr = x.shape
    y = np.empty((n, h * r, w * r, crr // (r * r)), dtype=x.dtype)
    for b, hi, wi, ch in np.ndindex(*y.shape):
        y[b, hi, wi, ch] = x[b, hi // r, wi // r, ch * r * r + (hi % r) * r + wi % r]
    return y


def _unshuffle_loops(x, r):
    """y[n, h, w, c*r*r + i*r + j] = x[n, h*r + i, w*r + j, c]."""
    n, hr, wr, c = x.shape
    y = np.empty((n, hr // r, wr // r, c * r * r), dtype=x.dtype)
    for b, h, w, ch in np.ndindex(*y.shape):
        c_in, i, j = ch // (r * r), (ch // r) % r, ch % r
        y[b, h, w, ch] = x[b, h * r + i, w * r + j, c_in]
    return y


def _pixel(op, x, factor, unshuffle):
    x, r = prepare_pixel_shuffle(op, x, factor, unshuffle)
    y = (_unshuffle_loops if unshuffle else _shuffle_loops)(x, r)
    return y, RearrangeCache(op, tuple(x.shape), tuple(y.shape), x.dtype, r)


def _pixel_backward(forward, dy, cache, unshuffle):
    cache, dy = open_rearrange_cache(f"{forward}_backward", forward, dy, cache)
    return (_shuffle_loops if unshuffle else _unshuffle_loops)(dy, cache.factor)


def pixel_shuffle(x, upscale_factor):
    """Loop twin of :func:`handgrad.ops.pixel_shuffle`."""
    return _pixel("pixel_shuffle", x, upscale_factor, False)


def pixel_shuffle_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.pixel_shuffle_backward`."""
    return _pixel_backward("pixel_shuffle", dy, cache, False)


def pixel_unshuffle(x, downscale_factor):
    """Loop twin of :func:`handgrad.ops.pixel_unshuffle`."""
    return _pixel("pixel_unshuffle", x, downscale_factor, True)


def pixel_unshuffle_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.pixel_unshuffle_backward`."""
    return _pixel_backward("pixel_unshuffle", dy, cache, True)


def channel_shuffle(x, groups):
    """Loop twin of :func:`handgrad.ops.channel_shuffle`: y[..., b*g + a] = x[..., a*k + b]."""
    x, groups = prepare_channel_shuffle("channel_shuffle", x, groups)
    k = x.shape[-1] // groups
    y = np.empty_like(x)
    for a in range(groups):
        for b in range(k):
            y[..., b * groups + a] = x[..., a * k + b]
    return y, RearrangeCache("channel_shuffle", tuple(x.shape), tuple(x.shape), x.dtype, groups)


def channel_shuffle_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.channel_shuffle_backward`: dx[..., a*k + b] =
    dy[..., b*g + a]."""
    cache, dy = open_rearrange_cache("channel_shuffle_backward", "channel_shuffle", dy, cache)
    groups = cache.factor
    k = dy.shape[-1] // groups
    dx = np.empty_like(dy)
    for a in range(groups):
        for b in range(k):
            dx[..., a * k + b] = dy[..., b * groups + a]
    return dx


__all__ = exports(__name__, globals())
