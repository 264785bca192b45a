"""Spatial transformer sampling, as ``F.affine_grid`` and ``F.grid_sample`` (channels-last).

``affine_grid(theta, size)``: the base grid of normalized output positions ``b = (x, y,
1)`` (3-D: ``(x, y, z, 1)``), each axis of n points ``linspace(-1, 1, n)`` (times
``(n - 1) / n`` without ``align_corners``; 0 for n = 1), mapped by theta::

    grid[n, h, w, i] = sum_j theta[n, i, j] b[h, w, j]
    dtheta[n, i, j] = sum_hw dgrid[n, h, w, i] b[h, w, j]

``grid_sample(x, grid)``: each output position reads x at the source given by grid
(``grid[..., 0]`` indexes the width, ``grid[..., 1]`` the height, both in [-1, 1]), as
torch's aten GridSampler. Per axis of size n, the source index is
``u = (g + 1) (n - 1) / 2`` (``align_corners``) or ``(g + 1) n / 2 - 1/2``, then with
``padding_mode`` border clipped to [0, n - 1] and with reflection first reflected about
the border (0 and n - 1, or -1/2 and n - 1/2), then clipped. ``du/dg`` is the scale times
+-1 per reflection, and 0 where the clip acts (a border counts as outside, as torch).
Bilinear reads the four taps ``(floor(u) + a, floor(v) + b)`` with weights
``wx_a wy_b`` (``wx_0 = floor(u) + 1 - u``, ``wx_1 = u - floor(u)``); nearest reads the
tap ``rint(u), rint(v)`` (half to even). Taps outside x read 0. Backward::

    dx[n, tap] += w_tap dy[n, o]                              (a scatter-add)
    dgrid[n, o, 0] = du/dg sum_tap (+-1 per a) wy_b <x[n, tap], dy[n, o]>   (bilinear)

and likewise for the height; nearest's dgrid is 0, as torch's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import array_module, upstream_grad
from ._args.cache import Cache, check_cache
from ._args.elementwise import make_cache, open_cache
from ._args.grid_sample import check_affine_grid, check_grid_sample
from .declare import declare, exports


def _base_axis(xp, n, align_corners, dtype):
    """torch's ``linspace_from_neg_one``: n points over [-1, 1] (shrunk without
    align_corners), 0 for a single point."""
    if n <= 1:
        return xp.zeros(n, dtype=dtype)
    points = xp.linspace(-1, 1, n, dtype=dtype)
    return points if align_corners else points * dtype.type(n - 1) / dtype.type(n)


def base_grid(xp, sizes, align_corners, dtype):
    """The homogeneous base grid (*sizes, rank + 1): ``(x, y[, z], 1)`` per position,
    ``sizes`` in handgrad's order ((H, W) or (D, H, W)), so x runs along the last axis."""
    axes = [_base_axis(xp, n, align_corners, np.dtype(dtype)) for n in sizes]
    mesh = xp.meshgrid(*axes, indexing="ij")
    return xp.stack([*mesh[::-1], xp.ones(tuple(sizes), dtype=dtype)], axis=-1)


def affine_grid(theta, size, align_corners=False):
    """grid (N, *S, r) of theta (N, r, r + 1) (r = 2 or 3) and ``size`` (N, *S, C) given
    channels-last like handgrad's inputs (torch's ``size`` is (N, C, *S)): the sampling
    grid of ``F.affine_grid``. Returns ``(grid, cache)`` for :func:`affine_grid_backward`."""
    theta, sizes, align_corners = check_affine_grid("affine_grid", theta, size, align_corners)
    xp = array_module(theta)
    base = base_grid(xp, sizes, align_corners, theta.dtype)
    grid = xp.einsum("...j,nij->n...i", base, theta)
    return xp.ascontiguousarray(grid), make_cache("affine_grid", grid, base)


def affine_grid_backward(dgrid, cache):
    """dtheta (N, r, r + 1) = sum over positions of dgrid (N, *S, r) times the base grid."""
    dgrid, cache = open_cache("affine_grid_backward", "affine_grid", dgrid, cache)
    base = cache.saved
    xp = array_module(dgrid)
    rank = base.shape[-1] - 1
    return xp.tensordot(dgrid.reshape(dgrid.shape[0], -1, rank),
                        base.reshape(-1, rank + 1), axes=([1], [0]))


def _reflect(xp, u, low2, high2):
    """torch's ``reflect_coordinates_set_grad``: u reflected into [low2/2, high2/2] and the
    sign of its derivative."""
    if low2 == high2:
        return xp.zeros_like(u), xp.zeros_like(u)
    low, span = u.dtype.type(low2 / 2), u.dtype.type((high2 - low2) / 2)
    shifted = u - low
    sign = xp.where(shifted < 0, -1, 1).astype(u.dtype)
    shifted = xp.abs(shifted)
    extra = xp.fmod(shifted, span)
    odd = (xp.floor(shifted / span) % 2) == 1
    return xp.where(odd, span - extra, extra) + low, xp.where(odd, -sign, sign)


def source_index(xp, g, n, padding_mode, align_corners):
    """(u, du/dg): the source index along an axis of size n of normalized coordinates g,
    as torch's ``grid_sampler_compute_source_index_set_grad``."""
    dtype = g.dtype.type
    scale = dtype((n - 1) / 2) if align_corners else dtype(n / 2)
    u = (g + dtype(1)) * scale if align_corners else (g + dtype(1)) * scale - dtype(0.5)
    slope = xp.full_like(u, scale)
    if padding_mode == "reflection":
        u, sign = _reflect(xp, u, 0, 2 * (n - 1)) if align_corners else \
            _reflect(xp, u, -1, 2 * n - 1)
        slope *= sign
    if padding_mode != "zeros":
        slope *= (u > 0) & (u < n - 1)
        u = xp.clip(u, 0, n - 1)
    return u, slope


@dataclass(frozen=True)
class GridSampleCache(Cache):
    """x flattened to (N*H*W, C), its shape, the taps ``(flat index (P,), weight (P,),
    inside (P,))`` per tap (P = N*Ho*Wo), and for the grid gradient (bilinear) the
    one-axis weights and slopes ``(wx, wy, du, dv)``."""

    x_flat: object
    x_shape: tuple
    grid_shape: tuple
    taps: tuple
    bilinear: tuple | None


def _taps(xp, ix, iy, n_index, shape, offsets):
    """For each offset (a, b): the flat index into x (N*H*W) of (floor-or-round(ix) + a,
    ... + b) and whether that tap lies inside x."""
    _, H, W, _ = shape
    out = []
    for a, b in offsets:
        cx, cy = ix + a, iy + b
        inside = (cx >= 0) & (cx < W) & (cy >= 0) & (cy < H)
        flat = (n_index * H + xp.clip(cy, 0, H - 1)) * W + xp.clip(cx, 0, W - 1)
        out.append((flat, inside))
    return out


def grid_sample(x, grid, mode="bilinear", padding_mode="zeros", align_corners=False):
    """y (N, Ho, Wo, C) of x (N, H, W, C) sampled at grid (N, Ho, Wo, 2) (``F.grid_sample``
    on channels-last x; module docstring). Returns ``(y, cache)`` for
    :func:`grid_sample_backward`."""
    x, grid, align_corners = check_grid_sample("grid_sample", x, grid, mode, padding_mode,
                                               align_corners)
    xp = array_module(x, grid)
    N, H, W, C = x.shape
    g = grid.reshape(-1, 2)
    u, du = source_index(xp, g[:, 0], W, padding_mode, align_corners)
    v, dv = source_index(xp, g[:, 1], H, padding_mode, align_corners)
    n_index = xp.repeat(xp.arange(N), grid.shape[1] * grid.shape[2])
    x_flat = x.reshape(-1, C)
    if mode == "nearest":
        ix, iy = xp.rint(u).astype(np.int64), xp.rint(v).astype(np.int64)
        (flat, inside), = _taps(xp, ix, iy, n_index, x.shape, [(0, 0)])
        taps, bilinear = ((flat, inside.astype(x.dtype), inside),), None
    else:
        x0, y0 = xp.floor(u), xp.floor(v)
        one = x.dtype.type(1)
        wx, wy = (x0 + one - u, u - x0), (y0 + one - v, v - y0)
        offsets = [(0, 0), (1, 0), (0, 1), (1, 1)]
        found = _taps(xp, x0.astype(np.int64), y0.astype(np.int64), n_index, x.shape, offsets)
        taps = tuple((flat, wx[a] * wy[b] * inside, inside)
                     for (flat, inside), (a, b) in zip(found, offsets))
        bilinear = (wx, wy, du, dv)
    y = sum(x_flat[flat] * weight[:, None] for flat, weight, _ in taps)
    y = y.reshape(*grid.shape[:3], C)
    cache = GridSampleCache("grid_sample", x_flat, tuple(x.shape), tuple(grid.shape), taps,
                            bilinear)
    return xp.ascontiguousarray(y), cache


def grid_sample_backward(dy, cache):
    """(dx (N, H, W, C), dgrid (N, Ho, Wo, 2)) of :func:`grid_sample`: dx scatter-adds
    ``w_tap dy`` onto the taps; dgrid (bilinear) sums the weights' slopes times
    <x[tap], dy> (module docstring); 0 for nearest."""
    op = "grid_sample_backward"
    cache = check_cache(op, cache, "grid_sample", GridSampleCache)
    N, Ho, Wo, _ = cache.grid_shape
    dy = upstream_grad(op, dy, (N, Ho, Wo, cache.x_shape[-1]), cache.x_flat.dtype)
    xp = array_module(dy)
    dy = dy.reshape(-1, cache.x_shape[-1])
    dx = xp.zeros_like(cache.x_flat)
    flats = xp.concatenate([flat for flat, _, _ in cache.taps])
    xp.add.at(dx, flats, xp.concatenate([dy * weight[:, None] for _, weight, _ in cache.taps]))
    dgrid = xp.zeros((dy.shape[0], 2), dtype=dy.dtype)
    if cache.bilinear is not None:
        wx, wy, du, dv = cache.bilinear
        for (flat, _, inside), (a, b) in zip(cache.taps, [(0, 0), (1, 0), (0, 1), (1, 1)]):
            dot = xp.einsum("pc,pc->p", cache.x_flat[flat], dy) * inside
            dgrid[:, 0] += (2 * a - 1) * wy[b] * dot
            dgrid[:, 1] += (2 * b - 1) * wx[a] * dot
        dgrid[:, 0] *= du
        dgrid[:, 1] *= dv
    return dx.reshape(cache.x_shape), dgrid.reshape(cache.grid_shape)


# The declarations: kernels, torch counterparts, sample inputs (in ops/samples/grid_sample.py).
from .samples import grid_sample as _s  # noqa: E402

declare(affine_grid, affine_grid_backward, torch=_s.torch_affine_grid, samples=_s.AFFINE_GRID)
declare(grid_sample, grid_sample_backward, torch=_s.torch_grid_sample, samples=_s.GRID_SAMPLE)
__all__ = exports(__name__, globals())
