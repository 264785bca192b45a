"""Naive spatial transformer sampling: plain loops over output positions, the readable
specification of :mod:`handgrad.ops.grid_sample` with the same signatures."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..._checks import upstream_grad
from .._args.cache import Cache, check_cache
from .._args.grid_sample import check_affine_grid, check_grid_sample
from ..declare import exports


@dataclass(frozen=True)
class LoopGridCache(Cache):
    """What a loop backward needs: the forward's inputs and hyper-parameters, and the
    output shape."""

    inputs: tuple
    params: tuple
    y_shape: tuple


def _base(n, i, align_corners):
    """The normalized coordinate of point i of an axis of n points."""
    if n == 1:
        return 0.0
    value = -1.0 + 2.0 * i / (n - 1)
    return value if align_corners else value * (n - 1) / n


def _base_point(sizes, position, align_corners):
    """(x, y[, z], 1) of a position (h, w) or (d, h, w): x along the last axis."""
    coords = [_base(n, i, align_corners) for n, i in zip(sizes, position)]
    return [*coords[::-1], 1.0]


def affine_grid(theta, size, align_corners=False):
    """Loop twin of :func:`handgrad.ops.affine_grid`."""
    theta, sizes, align_corners = check_affine_grid("affine_grid", theta, size, align_corners)
    theta = np.asarray(theta)
    rank = len(sizes)
    grid = np.zeros((theta.shape[0], *sizes, rank), dtype=theta.dtype)
    for n in range(theta.shape[0]):
        for position in np.ndindex(*sizes):
            b = _base_point(sizes, position, align_corners)
            for i in range(rank):
                grid[(n, *position, i)] = sum(theta[n, i, j] * b[j] for j in range(rank + 1))
    return grid, LoopGridCache("affine_grid", (theta,), (sizes, align_corners), grid.shape)


def affine_grid_backward(dgrid, cache):
    """Loop twin of :func:`handgrad.ops.affine_grid_backward`."""
    op = "affine_grid_backward"
    cache = check_cache(op, cache, "affine_grid", LoopGridCache)
    theta, = cache.inputs
    sizes, align_corners = cache.params
    dgrid = upstream_grad(op, dgrid, cache.y_shape, theta.dtype)
    dtheta = np.zeros_like(theta)
    for n in range(theta.shape[0]):
        for position in np.ndindex(*sizes):
            b = _base_point(sizes, position, align_corners)
            for i in range(len(sizes)):
                for j in range(len(b)):
                    dtheta[n, i, j] += dgrid[(n, *position, i)] * b[j]
    return dtheta


def _reflect(u, low2, high2):
    """u reflected into [low2/2, high2/2], and the sign of du'/du."""
    if low2 == high2:
        return 0.0, 0.0
    low, span = low2 / 2, (high2 - low2) / 2
    u -= low
    sign = -1.0 if u < 0 else 1.0
    u = abs(u)
    extra, flips = math.fmod(u, span), math.floor(u / span)
    if flips % 2 == 0:
        return extra + low, sign
    return span - extra + low, -sign


def _source(g, n, padding_mode, align_corners):
    """(u, du/dg) of one normalized coordinate g along an axis of size n."""
    if align_corners:
        u, slope = (g + 1) / 2 * (n - 1), (n - 1) / 2
    else:
        u, slope = ((g + 1) * n - 1) / 2, n / 2
    if padding_mode == "reflection":
        u, sign = _reflect(u, 0, 2 * (n - 1)) if align_corners else _reflect(u, -1, 2 * n - 1)
        slope *= sign
    if padding_mode != "zeros":
        if not 0 < u < n - 1:  # a border counts as outside
            slope = 0.0
        u = min(max(u, 0.0), n - 1.0)
    return u, slope


def _reads(x_shape, g, mode, padding_mode, align_corners):
    """The taps ``[(h, w, weight, dweight/dgx, dweight/dgy)]`` one grid point g reads
    (only those inside x)."""
    _, H, W, _ = x_shape
    u, du = _source(float(g[0]), W, padding_mode, align_corners)
    v, dv = _source(float(g[1]), H, padding_mode, align_corners)
    if mode == "nearest":
        taps = [(round(v), round(u), 1.0, 0.0, 0.0)]  # round: half to even, as rint
    else:
        x0, y0 = math.floor(u), math.floor(v)
        fx, fy = u - x0, v - y0
        taps = [(y0 + b, x0 + a, (fx if a else 1 - fx) * (fy if b else 1 - fy),
                 (1 if a else -1) * (fy if b else 1 - fy) * du,
                 (1 if b else -1) * (fx if a else 1 - fx) * dv)
                for b in (0, 1) for a in (0, 1)]
    return [t for t in taps if 0 <= t[0] < H and 0 <= t[1] < W]


def grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False):
    """Loop twin of :func:`handgrad.ops.grid_sample`."""
    x, grid, align_corners = check_grid_sample("grid_sample", x, grid, mode, padding_mode,
                                               align_corners)
    x, grid = np.asarray(x), np.asarray(grid)
    y = np.zeros((*grid.shape[:3], x.shape[-1]), dtype=x.dtype)
    for n, i, j in np.ndindex(*grid.shape[:3]):
        for h, w, weight, _, _ in _reads(x.shape, grid[n, i, j], mode, padding_mode,
                                         align_corners):
            y[n, i, j] += weight * x[n, h, w]
    cache = LoopGridCache("grid_sample", (x, grid), (mode, padding_mode, align_corners),
                          y.shape)
    return y, cache


def grid_sample_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.grid_sample_backward`: each output position gives
    ``weight * dy`` back to the taps it read and ``<x[tap], dy>`` times the weight's
    slopes to its grid point."""
    op = "grid_sample_backward"
    cache = check_cache(op, cache, "grid_sample", LoopGridCache)
    x, grid = cache.inputs
    dy = upstream_grad(op, dy, cache.y_shape, x.dtype)
    dx, dgrid = np.zeros_like(x), np.zeros_like(grid)
    for n, i, j in np.ndindex(*grid.shape[:3]):
        for h, w, weight, dgx, dgy in _reads(x.shape, grid[n, i, j], *cache.params):
            dx[n, h, w] += weight * dy[n, i, j]
            dot = float(np.dot(x[n, h, w], dy[n, i, j]))
            dgrid[n, i, j, 0] += dgx * dot
            dgrid[n, i, j, 1] += dgy * dot
    return dx, dgrid


__all__ = exports(__name__, globals())
