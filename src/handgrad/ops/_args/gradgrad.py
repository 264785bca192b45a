"""Checks shared by the second-order (``*_gradgrad``) kernels and their loop twins."""

from __future__ import annotations

from ..._checks import array_module, upstream_grad
from ..linear import LinearCache
from .cache import check_cache
from .conv import open_conv_cache
from .elementwise import open_cache


def check_like(op, name, value, shape, dtype):
    """``value`` as a float array of the given shape and dtype (else a clear error)."""
    return upstream_grad(op, value, shape, dtype, name, "the forward input's shape")


def open_elementwise(op, forward, q, dy, cache):
    """``(q, dy, cache)`` for an elementwise activation's gradgrad: ``cache`` from
    ``forward``, ``dy`` and ``q`` of its output's (= input's) shape and dtype."""
    dy, cache = open_cache(op, forward, dy, cache)
    return check_like(op, "q", q, cache.shape, cache.dtype), dy, cache


def gradgrad_result(d_dy, q, dy, second=None):
    """An elementwise gradgrad's ``(d_dy, q dy f'')``, with ``second = None`` meaning
    f'' = 0."""
    return d_dy, (array_module(q).zeros_like(q) if second is None else q * dy * second)


def open_linear(op, q, dy, cache):
    """``(q, dy, cache)`` for ``linear_gradgrad``: q (..., F_in), dy (..., F_out)."""
    cache = check_cache(op, cache, "linear", LinearCache)
    x, w = cache.x, cache.w
    dy = check_like(op, "dy", dy, (*x.shape[:-1], w.shape[1]), x.dtype)
    return check_like(op, "q", q, x.shape, x.dtype), dy, cache


def open_conv(op, forward, q, dy, cache):
    """``(q, dy, call)`` for a convolution's gradgrad: q of the op's input shape."""
    call, dy = open_conv_cache(op, forward, dy, cache)
    return check_like(op, "q", q, call.x.shape, call.x.dtype), dy, call
