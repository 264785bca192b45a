"""Vector norms along an axis: ``normalize``, ``cosine_similarity`` and
``pairwise_distance``, as ``F.normalize``, ``F.cosine_similarity`` and
``F.pairwise_distance``. With ``n = ||x||_p = (sum |x|^p)^(1/p)`` along the axis
(p >= 1 finite) and its gradient ``dn/dx = sign(x) |x|^(p-1) / n^(p-1)`` (0 where
n = 0, as torch)::

    normalize          y = x / c,  c = max(n, eps)
                       dx = dy / c - [n >= eps] (sum dy * x) / c^2 * dn/dx
    cosine_similarity  u = x1 / c1, v = x2 / c2, c_i = max(||x_i||_2, eps); y = sum u * v
                       dx1 = dy (v - y * x1 / n1) / c1    (and dx2 with the roles swapped;
                       torch clamps the norms without a gradient mask: x1 / n1, not u)
    pairwise_distance  d = x1 - x2 + eps,  y = ||d||_p  along the last axis
                       dx1 = dy * dn/dd,  dx2 = -dx1

The caches hold the inputs and the norms.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._checks import array_module, float_array, same_dtype, upstream_grad
from .._hyper import flag, number
from ._args.cache import Cache, check_cache
from ._args.elementwise import axis_index
from .declare import Fixed, Sample, declare, exports


@dataclass(frozen=True)
class NormsCache(Cache):
    """Inputs, their norms (keepdims) and the op's settings."""

    arrays: tuple
    norms: tuple
    axis: int
    p: float
    eps: float
    keepdim: bool = True


def _p(op, p):
    return number(op, "p", p, low=1.0)


def _pnorm(xp, x, p, axis):
    """||x||_p along ``axis`` (kept)."""
    if p == 2.0:
        return xp.sqrt(xp.sum(x * x, axis=axis, keepdims=True))
    if p == 1.0:
        return xp.sum(xp.abs(x), axis=axis, keepdims=True)
    return xp.sum(xp.abs(x) ** p, axis=axis, keepdims=True) ** (1.0 / p)


def _pnorm_grad(xp, x, n, p):
    """dn/dx = sign(x) |x|^(p-1) / n^(p-1); 0 where n = 0."""
    safe = xp.where(n > 0, n, 1)
    if p == 2.0:
        grad = x / safe
    elif p == 1.0:
        grad = xp.sign(x) * xp.ones_like(safe)
    else:
        grad = xp.sign(x) * (xp.abs(x) / safe) ** (p - 1.0)
    return xp.where(n > 0, grad, 0)


def _pair(op, x1, x2):
    x1, x2 = float_array(op, "x1", x1), float_array(op, "x2", x2)
    same_dtype(op, x1=x1, x2=x2)
    if x1.shape != x2.shape or x1.ndim == 0:
        raise ValueError(f"{op}: 'x1' and 'x2' must have one shape with at least 1 axis; "
                         f"received {tuple(x1.shape)} and {tuple(x2.shape)}")
    return x1, x2


def normalize(x, p=2.0, axis=-1, eps=1e-12):
    """y = x / max(||x||_p, eps) along ``axis`` (default the channels, last), as
    ``F.normalize(x, p, dim=axis, eps)``. Returns ``(y, cache)``."""
    op = "normalize"
    x = float_array(op, "x", x)
    p, eps = _p(op, p), number(op, "eps", eps, low=0.0, low_open=True)
    axis = axis_index(op, axis, x.ndim)
    xp = array_module(x)
    n = _pnorm(xp, x, p, axis)
    return x / xp.maximum(n, x.dtype.type(eps)), NormsCache(op, (x,), (n,), axis, p, eps)


def normalize_backward(dy, cache):
    """dx = dy / c - [n >= eps] (sum dy * x) / c^2 * dn/dx, c = max(n, eps)."""
    cache = check_cache("normalize_backward", cache, "normalize", NormsCache)
    (x,), (n,) = cache.arrays, cache.norms
    dy = upstream_grad("normalize_backward", dy, x.shape, x.dtype)
    xp = array_module(dy)
    c = xp.maximum(n, x.dtype.type(cache.eps))
    inner = xp.sum(dy * x, axis=cache.axis, keepdims=True) / (c * c)
    return dy / c - xp.where(n >= cache.eps, inner, 0) * _pnorm_grad(xp, x, n, cache.p)


def cosine_similarity(x1, x2, axis=-1, eps=1e-8):
    """y = sum u * v along ``axis``, u = x1 / max(||x1||, eps), v likewise, as
    ``F.cosine_similarity(x1, x2, dim=axis, eps)``; x1, x2 of one shape, y without
    ``axis``. Returns ``(y, cache)``."""
    op = "cosine_similarity"
    x1, x2 = _pair(op, x1, x2)
    eps = number(op, "eps", eps, low=0.0, low_open=True)
    axis = axis_index(op, axis, x1.ndim)
    xp = array_module(x1)
    n1, n2 = _pnorm(xp, x1, 2.0, axis), _pnorm(xp, x2, 2.0, axis)
    floor = x1.dtype.type(eps)
    y = xp.sum((x1 / xp.maximum(n1, floor)) * (x2 / xp.maximum(n2, floor)), axis=axis)
    return y, NormsCache(op, (x1, x2), (n1, n2), axis, 2.0, eps, False)


def cosine_similarity_backward(dy, cache):
    """dx1 = dy (v - y * x1 / n1) / c1, dx2 = dy (u - y * x2 / n2) / c2."""
    cache = check_cache("cosine_similarity_backward", cache, "cosine_similarity", NormsCache)
    (x1, x2), (n1, n2) = cache.arrays, cache.norms
    out_shape = tuple(d for i, d in enumerate(x1.shape) if i != cache.axis)
    dy = upstream_grad("cosine_similarity_backward", dy, out_shape, x1.dtype)
    xp = array_module(dy)
    floor = x1.dtype.type(cache.eps)
    c1, c2 = xp.maximum(n1, floor), xp.maximum(n2, floor)
    u, v = x1 / c1, x2 / c2
    y = xp.sum(u * v, axis=cache.axis, keepdims=True)
    dy = xp.expand_dims(dy, cache.axis)
    dx1 = dy * (v - y * _pnorm_grad(xp, x1, n1, 2.0)) / c1
    dx2 = dy * (u - y * _pnorm_grad(xp, x2, n2, 2.0)) / c2
    return dx1, dx2


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """y = ||x1 - x2 + eps||_p along the last axis, as ``F.pairwise_distance``; x1, x2 of
    one shape (..., D); y (...) or (..., 1) with ``keepdim``. Returns ``(y, cache)``."""
    op = "pairwise_distance"
    x1, x2 = _pair(op, x1, x2)
    p, eps = _p(op, p), number(op, "eps", eps, low=0.0)
    keepdim = flag(op, "keepdim", keepdim)
    xp = array_module(x1)
    d = x1 - x2 + x1.dtype.type(eps)
    n = _pnorm(xp, d, p, -1)
    return (n if keepdim else n[..., 0]), NormsCache(op, (d,), (n,), x1.ndim - 1, p, eps,
                                                     keepdim)


def pairwise_distance_backward(dy, cache):
    """dx1 = dy * dn/dd, dx2 = -dx1."""
    cache = check_cache("pairwise_distance_backward", cache, "pairwise_distance", NormsCache)
    (d,), (n,) = cache.arrays, cache.norms
    dy = upstream_grad("pairwise_distance_backward", dy, n.shape if cache.keepdim else n.shape[:-1],
                   d.dtype)
    xp = array_module(dy)
    dx1 = (dy if cache.keepdim else dy[..., None]) * _pnorm_grad(xp, d, n, cache.p)
    return dx1, -dx1


declare(normalize, normalize_backward, torch=lambda F, x, p=2.0, axis=-1, eps=1e-12:
        F.normalize(x, p, axis, eps), samples=(
            Sample(((4, 5),)), Sample(((3, 4, 2), Fixed(1.0), Fixed(1))),
            Sample(((2, 6), Fixed(3.0), Fixed(-1), Fixed(1e-6)))))
declare(cosine_similarity, cosine_similarity_backward,
        torch=lambda F, x1, x2, axis=-1, eps=1e-8: F.cosine_similarity(x1, x2, axis, eps),
        samples=(Sample(((4, 5), (4, 5))), Sample(((3, 4, 2), (3, 4, 2), Fixed(1)))))
declare(pairwise_distance, pairwise_distance_backward,
        torch=lambda F, x1, x2, p=2.0, eps=1e-6, keepdim=False: F.pairwise_distance(
            x1, x2, p, eps, keepdim), samples=(
            Sample(((4, 5), (4, 5))), Sample(((2, 3, 4), (2, 3, 4), Fixed(1.0)),
                                              {"keepdim": True}),
            Sample(((3, 4), (3, 4), Fixed(3.0), Fixed(0.0)))))
__all__ = exports(__name__, globals())
