"""Naive vector norms: plain loops over the vectors along the axis and over their
entries (the specification of :mod:`handgrad.ops.distance`, same signatures)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..._checks import float_array, upstream_grad
from ..._hyper import flag, number
from .._args.cache import Cache, check_cache
from .._args.elementwise import axis_index
from ..declare import exports
from ..distance import _p, _pair


@dataclass(frozen=True)
class LoopNormsCache(Cache):
    """The inputs as rows (vectors along the axis last), the settings, the output shape."""

    rows: tuple
    axis: int
    p: float
    eps: float
    out_shape: tuple


def _rows(x, axis):
    """x with ``axis`` moved last, as (vectors, length) rows."""
    moved = np.moveaxis(x, axis, -1)
    return moved.reshape(-1, x.shape[axis]), moved.shape


def _norm(row, p):
    return sum(abs(v) ** p for v in row) ** (1.0 / p)


def _norm_grad(row, p):
    """d||row||_p / d row_j; 0 for a zero row."""
    n = _norm(row, p)
    return [0.0 if n == 0 else math.copysign(1.0, v) * (abs(v) / n) ** (p - 1) if v else 0.0
            for v in row]


def normalize(x, p=2.0, axis=-1, eps=1e-12):
    """Loop twin of :func:`handgrad.ops.normalize`."""
    x = float_array("normalize", "x", x)
    p, eps = _p("normalize", p), number("normalize", "eps", eps, low=0.0, low_open=True)
    axis = axis_index("normalize", axis, x.ndim)
    rows, moved = _rows(x, axis)
    y = np.zeros_like(rows)
    for i, row in enumerate(rows):
        c = max(_norm(row, p), eps)
        for j, v in enumerate(row):
            y[i, j] = v / c
    out = np.moveaxis(y.reshape(moved), -1, axis)
    return out, LoopNormsCache("normalize", (rows,), axis, p, eps, moved)


def normalize_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.normalize_backward`."""
    cache = check_cache("normalize_backward", cache, "normalize", LoopNormsCache)
    (rows,) = cache.rows
    shape = np.moveaxis(np.empty(cache.out_shape), -1, cache.axis).shape
    dy_rows, _ = _rows(upstream_grad("normalize_backward", dy, shape, rows.dtype), cache.axis)
    dx = np.zeros_like(rows)
    for i, row in enumerate(rows):
        n = _norm(row, cache.p)
        c = max(n, cache.eps)
        inner = sum(dy_rows[i, j] * row[j] for j in range(len(row))) / (c * c)
        grad = _norm_grad(row, cache.p)
        for j in range(len(row)):
            dx[i, j] = dy_rows[i, j] / c - (inner * grad[j] if n >= cache.eps else 0.0)
    return np.moveaxis(dx.reshape(cache.out_shape), -1, cache.axis)


def cosine_similarity(x1, x2, axis=-1, eps=1e-8):
    """Loop twin of :func:`handgrad.ops.cosine_similarity`."""
    x1, x2 = _pair("cosine_similarity", x1, x2)
    eps = number("cosine_similarity", "eps", eps, low=0.0, low_open=True)
    axis = axis_index("cosine_similarity", axis, x1.ndim)
    (r1, moved), (r2, _) = _rows(x1, axis), _rows(x2, axis)
    y = np.zeros(len(r1), dtype=r1.dtype)
    for i in range(len(r1)):
        c1, c2 = max(_norm(r1[i], 2.0), eps), max(_norm(r2[i], 2.0), eps)
        y[i] = sum(a / c1 * (b / c2) for a, b in zip(r1[i], r2[i]))
    return y.reshape(moved[:-1]), LoopNormsCache("cosine_similarity", (r1, r2), axis, 2.0,
                                                 eps, moved)


def cosine_similarity_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.cosine_similarity_backward`."""
    cache = check_cache("cosine_similarity_backward", cache, "cosine_similarity",
                        LoopNormsCache)
    r1, r2 = cache.rows
    dy = upstream_grad("cosine_similarity_backward", dy, cache.out_shape[:-1],
                       r1.dtype).reshape(-1)
    dx1, dx2 = np.zeros_like(r1), np.zeros_like(r2)
    for i in range(len(r1)):
        c1, c2 = max(_norm(r1[i], 2.0), cache.eps), max(_norm(r2[i], 2.0), cache.eps)
        y = sum(a / c1 * (b / c2) for a, b in zip(r1[i], r2[i]))
        g1, g2 = _norm_grad(r1[i], 2.0), _norm_grad(r2[i], 2.0)
        for j in range(r1.shape[1]):
            dx1[i, j] = dy[i] * (r2[i, j] / c2 - y * g1[j]) / c1
            dx2[i, j] = dy[i] * (r1[i, j] / c1 - y * g2[j]) / c2
    return tuple(np.moveaxis(d.reshape(cache.out_shape), -1, cache.axis) for d in (dx1, dx2))


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    """Loop twin of :func:`handgrad.ops.pairwise_distance`."""
    x1, x2 = _pair("pairwise_distance", x1, x2)
    p, eps = _p("pairwise_distance", p), number("pairwise_distance", "eps", eps, low=0.0)
    keepdim = flag("pairwise_distance", "keepdim", keepdim)
    (r1, moved), (r2, _) = _rows(x1, -1), _rows(x2, -1)
    d = np.zeros_like(r1)
    y = np.zeros(len(r1), dtype=r1.dtype)
    for i in range(len(r1)):
        for j in range(r1.shape[1]):
            d[i, j] = r1[i, j] - r2[i, j] + r1.dtype.type(eps)
        y[i] = _norm(d[i], p)
    shape = (*moved[:-1], 1) if keepdim else moved[:-1]
    # axis: how many trailing axes of the output the input's vector axis replaces
    return y.reshape(shape), LoopNormsCache("pairwise_distance", (d,), int(keepdim), p, eps,
                                            shape)


def pairwise_distance_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.pairwise_distance_backward`."""
    cache = check_cache("pairwise_distance_backward", cache, "pairwise_distance",
                        LoopNormsCache)
    (d,) = cache.rows
    dy = upstream_grad("pairwise_distance_backward", dy, cache.out_shape, d.dtype).reshape(-1)
    dx1 = np.zeros_like(d)
    for i in range(len(d)):
        grad = _norm_grad(d[i], cache.p)
        for j in range(d.shape[1]):
            dx1[i, j] = dy[i] * grad[j]
    shape = (*cache.out_shape[:len(cache.out_shape) - cache.axis], d.shape[1])
    return dx1.reshape(shape), -dx1.reshape(shape)


__all__ = exports(__name__, globals())
