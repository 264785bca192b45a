"""Adaptive pooling and max unpooling, channels-last, looping over taps only.

Adaptive pooling pools each spatial axis of size L to ``out`` positions with PyTorch's
bins ``[floor(o*L/out), ceil((o+1)*L/out))`` (neighbouring bins may overlap)::

    avg:  y[n, o, c] = sum_{i in bin o} x[n, i, c] / |bin o|
          dx[n, i, c] = sum_{o : i in bin o} dy[n, o, c] / |bin o|
    max:  y[n, o, c] = x[n, i*(o), c],  i*(o) the first maximum of bin o (a NaN wins,
          the last one, as PyTorch); dx[n, i, c] = sum_{o : i*(o) = i} dy[n, o, c]

Where every axis's bins are a pooling's windows, bin o = [o*s, o*s + k) (64 -> 8:
kernel = stride = 8; 64 -> 7: kernel 10, stride 9, neighbours sharing a position), the
maximum runs as that max pooling and the average on the CPU as that average pooling
(the same winners, the same divisors). Otherwise the average applies a 0/1 bin matrix
per axis (compiled: interpolate's 'area' resampling passes); the maximum is separable
(:mod:`._bin_max`), a running comparison over the taps of the widest bin of one axis at
a time (a shorter bin repeats its last position, which never wins).
``return_indices=True`` also returns the winners as int64 (N, *O, C): PyTorch's flat
index into each (n, c) spatial plane.

Max unpooling scatters x (N, *S, C) to those flat indices of a zero output plane (min
pooling lives in :mod:`.min_pool`)::

    y[n, indices[n, s, c], c] = x[n, s, c]     dx[n, s, c] = dy[n, indices[n, s, c], c]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._checks import array_module, upstream_grad
from ._args.adaptive import check_return_indices, prepare_adaptive
from ._args.cache import Cache, check_cache
from ._args.unpool import prepare_unpool
from ._bin_max import bin_max
from ._engine import taps as compiled
from .declare import declare, exports
from .pooling import (
    avg_pool1d,
    avg_pool1d_backward,
    avg_pool2d,
    avg_pool2d_backward,
    avg_pool3d,
    avg_pool3d_backward,
    max_pool1d,
    max_pool1d_backward,
    max_pool2d,
    max_pool2d_backward,
    max_pool3d,
    max_pool3d_backward,
)
from .resample import axis_map, resample, resample_backward


@dataclass(frozen=True)
class FlatIndexCache(Cache):
    """The forward's name, the input's shape and dtype, the output's shape, and (max
    pooling, unpooling) the flat spatial index per output or input element, or the max
    pooling's own cache where the bins are its windows, or (average) the bins."""

    x_shape: tuple
    dtype: object
    y_shape: tuple
    index: object = None
    bins: tuple = ()
    inner: object = None


def _flat(a):
    """(N, *S, C) -> (N, prod(S), C) view."""
    return a.reshape(a.shape[0], math.prod(a.shape[1:-1]), a.shape[-1])


def scatter_add(xp, index, values, plane_shape, dtype):
    """A zero (N, *plane_shape, C) array with ``values`` (N, *O, C) added at the flat
    spatial ``index`` (same shape) of each (n, c); repeated indices add up."""
    n, c = values.shape[0], values.shape[-1]
    positions = math.prod(plane_shape)
    lin = (xp.arange(n).reshape(-1, *(1,) * (values.ndim - 1)) * positions + index) * c
    lin = lin + xp.arange(c)
    if xp is np:  # add.at: no float64 copy of the whole output to convert back
        total = np.zeros(n * positions * c, dtype=dtype)
        np.add.at(total, lin.ravel(), values.ravel())
    else:
        total = xp.bincount(lin.ravel(), weights=values.ravel(), minlength=n * positions * c)
    return total.astype(dtype, copy=False).reshape(n, *plane_shape, c)


# --------------------------------------------------------------------- adaptive
_MAX_POOLS = {1: (max_pool1d, max_pool1d_backward), 2: (max_pool2d, max_pool2d_backward),
              3: (max_pool3d, max_pool3d_backward)}
_AVG_POOLS = {1: (avg_pool1d, avg_pool1d_backward), 2: (avg_pool2d, avg_pool2d_backward),
              3: (avg_pool3d, avg_pool3d_backward)}


def _adaptive_max(call, return_indices):
    """Bins that are a max pooling's windows (:func:`_pooling_windows`: 64 -> 8, 64 -> 7)
    run as that op (the same winners: the first maximum, or the last NaN). Otherwise
    separable (:func:`.bin_max`, or its compiled twin): the maxima along the last
    spatial axis first, then along each earlier one, carrying the flat index of each
    winner. Ties keep the earlier position of each axis, so the result is the first
    maximum in row-major order (and the last NaN, which always wins)."""
    x, rank = call.x, len(call.bins)
    windows = _pooling_windows(call.bins)
    if windows is not None:
        y, *indices, inner = _MAX_POOLS[rank][0](x, *windows, return_indices=return_indices)
        cache = FlatIndexCache(call.op, tuple(x.shape), x.dtype, tuple(y.shape), inner=inner)
        return (y, *indices, cache)
    if compiled.covers(x):
        y, flat = compiled.adaptive_max(x, call.bins)
        cache = FlatIndexCache(call.op, tuple(x.shape), x.dtype, tuple(y.shape), index=flat)
        return (y, flat, cache) if return_indices else (y, cache)
    y, flat = bin_max(x, call.bins)
    cache = FlatIndexCache(call.op, tuple(x.shape), x.dtype, tuple(y.shape), index=flat)
    return (y, flat, cache) if return_indices else (y, cache)


def _adaptive_max_backward(op, forward, dy, cache):
    cache = check_cache(op, cache, forward, FlatIndexCache)
    if cache.inner is not None:  # the forward ran as a max pooling
        return _MAX_POOLS[len(cache.x_shape) - 2][1](dy, cache.inner)
    dy = upstream_grad(op, dy, cache.y_shape, cache.dtype)
    return scatter_add(array_module(dy), cache.index, dy, cache.x_shape[1:-1], cache.dtype)


def _bin_matrix(xp, bins, size_in, dtype):
    """(O, L) with ones where position l lies in bin o."""
    pos = xp.arange(size_in)
    starts = xp.asarray([s for s, _ in bins]).reshape(-1, 1)
    ends = xp.asarray([e for _, e in bins]).reshape(-1, 1)
    return ((pos >= starts) & (pos < ends)).astype(dtype)


def _bin_sums(xp, a, bins, sizes, transpose):
    """Sum over each bin along every spatial axis (``transpose``: spread each bin back):
    per axis one product of the (O, L) bin matrix with a viewed as (before, L, after)."""
    for i, (b, size) in enumerate(zip(bins, sizes)):
        matrix = _bin_matrix(xp, b, size, a.dtype)
        matrix = matrix.T if transpose else matrix
        shape = a.shape
        rows = a.reshape(math.prod(shape[:i + 1]), shape[i + 1], math.prod(shape[i + 2:]))
        a = xp.matmul(matrix, rows).reshape(*shape[:i + 1], matrix.shape[0], *shape[i + 2:])
    return a


def _bin_counts(xp, bins, dtype):
    """(1, *O, 1): the number of positions of each output's bin."""
    count = xp.ones((1,) * (len(bins) + 2), dtype=dtype)
    for i, b in enumerate(bins):
        shape = [1] * (len(bins) + 2)
        shape[i + 1] = len(b)
        count = count * xp.asarray([e - s for s, e in b], dtype=dtype).reshape(shape)
    return count


def _area_maps(bins, sizes, dtype):
    """Each axis's bins as a resampling map (interpolate's mode 'area' is this average)."""
    return tuple(axis_map("area", size, len(b), None, None, dtype, len(bins))
                 for b, size in zip(bins, sizes))


def _pooling_windows(bins):
    """(kernel, stride) per axis when every axis's bins are a pooling's windows, bin o
    = [o * stride, o * stride + kernel) (64 -> 8: kernel = stride = 8; 64 -> 7: kernel
    10, stride 9), else None. Such a pooling has as many outputs and, with no padding,
    divides by the kernel's size as the bins' averages do."""
    kernels, strides = [], []
    for axis in bins:
        kernel = axis[0][1] - axis[0][0]
        stride = axis[1][0] - axis[0][0] if len(axis) > 1 else kernel
        if stride < 1 or any(b != (o * stride, o * stride + kernel) for o, b in enumerate(axis)):
            return None
        kernels.append(kernel)
        strides.append(stride)
    return tuple(kernels), tuple(strides)


def _adaptive_avg(call):
    """Bins that are an average pooling's windows (:func:`_pooling_windows`) run as that
    op on the CPU. Otherwise compiled: the separable resampling pass of interpolate's
    'area' mode; NumPy (and CuPy): a bin-matrix product per axis."""
    x = call.x
    xp = array_module(x)
    windows = _pooling_windows(call.bins) if xp is np else None
    if windows is not None:
        y, inner = _AVG_POOLS[len(call.bins)][0](x, *windows)
        return y, FlatIndexCache(call.op, tuple(x.shape), x.dtype, tuple(y.shape), inner=inner)
    if compiled.covers(x):
        y = resample(xp, x, _area_maps(call.bins, x.shape[1:-1], x.dtype))
    else:
        y = _bin_sums(xp, x, call.bins, x.shape[1:-1], False)
        y = xp.ascontiguousarray(y / _bin_counts(xp, call.bins, x.dtype))
    return y, FlatIndexCache(call.op, tuple(x.shape), x.dtype, tuple(y.shape), bins=call.bins)


def _adaptive_avg_backward(op, forward, dy, cache):
    """The average pooling's backward where the forward ran as one; else compiled: the
    transposed resampling passes; NumPy: the transposed bin matrices."""
    cache = check_cache(op, cache, forward, FlatIndexCache)
    if cache.inner is not None:
        return _AVG_POOLS[len(cache.x_shape) - 2][1](dy, cache.inner)
    dy = upstream_grad(op, dy, cache.y_shape, cache.dtype)
    xp = array_module(dy)
    sizes = cache.x_shape[1:-1]
    if compiled.covers(dy):
        return resample_backward(xp, dy, _area_maps(cache.bins, sizes, dy.dtype), cache.x_shape)
    share = dy / _bin_counts(xp, cache.bins, cache.dtype)
    return xp.ascontiguousarray(_bin_sums(xp, share, cache.bins, sizes, True))


def adaptive_avg_pool1d(x, output_size):
    """x (N, L, C) -> y (N, L_out, C): the mean of each of PyTorch's adaptive bins
    (``output_size`` an int, or None for L). Returns ``(y, cache)``."""
    return _adaptive_avg(prepare_adaptive("adaptive_avg_pool1d", 1, x, output_size))


def adaptive_avg_pool1d_backward(dy, cache):
    """dy (N, L_out, C) -> dx (N, L, C): each dy spread evenly over its bin."""
    return _adaptive_avg_backward("adaptive_avg_pool1d_backward", "adaptive_avg_pool1d", dy,
                                  cache)


def adaptive_avg_pool2d(x, output_size):
    """x (N, H, W, C) -> y (N, H_out, W_out, C): the mean of each adaptive bin;
    ``output_size`` an int or a pair (None keeps that axis). Returns ``(y, cache)``."""
    return _adaptive_avg(prepare_adaptive("adaptive_avg_pool2d", 2, x, output_size))


def adaptive_avg_pool2d_backward(dy, cache):
    """dy (N, H_out, W_out, C) -> dx (N, H, W, C): each dy spread evenly over its bin."""
    return _adaptive_avg_backward("adaptive_avg_pool2d_backward", "adaptive_avg_pool2d", dy,
                                  cache)


def adaptive_max_pool1d(x, output_size, return_indices=False):
    """x (N, L, C) -> y (N, L_out, C): the first maximum of each adaptive bin. Returns
    ``(y, cache)``, or ``(y, indices, cache)`` with ``return_indices``."""
    op = "adaptive_max_pool1d"
    return _adaptive_max(prepare_adaptive(op, 1, x, output_size),
                         check_return_indices(op, return_indices))


def adaptive_max_pool1d_backward(dy, cache):
    """dy (N, L_out, C) -> dx (N, L, C): each dy goes to its bin's maximum (overlapping
    bins add up)."""
    return _adaptive_max_backward("adaptive_max_pool1d_backward", "adaptive_max_pool1d", dy,
                                  cache)


def adaptive_max_pool2d(x, output_size, return_indices=False):
    """x (N, H, W, C) -> y (N, H_out, W_out, C): the first maximum (row-major) of each
    adaptive bin. Returns ``(y, cache)``, or ``(y, indices, cache)`` with
    ``return_indices`` (indices int64 (N, H_out, W_out, C), flat h * W + w)."""
    op = "adaptive_max_pool2d"
    return _adaptive_max(prepare_adaptive(op, 2, x, output_size),
                         check_return_indices(op, return_indices))


def adaptive_max_pool2d_backward(dy, cache):
    """dy (N, H_out, W_out, C) -> dx (N, H, W, C): each dy goes to its bin's maximum."""
    return _adaptive_max_backward("adaptive_max_pool2d_backward", "adaptive_max_pool2d", dy,
                                  cache)


def adaptive_avg_pool3d(x, output_size):
    """x (N, D, H, W, C) -> y (N, D_out, H_out, W_out, C): the mean of each adaptive bin;
    ``output_size`` an int or a triple (None keeps that axis). Returns ``(y, cache)``."""
    return _adaptive_avg(prepare_adaptive("adaptive_avg_pool3d", 3, x, output_size))


def adaptive_avg_pool3d_backward(dy, cache):
    """dy (N, D_out, H_out, W_out, C) -> dx (N, D, H, W, C): each dy spread evenly over
    its bin."""
    return _adaptive_avg_backward("adaptive_avg_pool3d_backward", "adaptive_avg_pool3d", dy,
                                  cache)


def adaptive_max_pool3d(x, output_size, return_indices=False):
    """x (N, D, H, W, C) -> y (N, D_out, H_out, W_out, C): the first maximum (row-major)
    of each adaptive bin. Returns ``(y, cache)``, or ``(y, indices, cache)`` with
    ``return_indices`` (indices int64 (N, D_out, H_out, W_out, C), flat (d * H + h) * W +
    w)."""
    op = "adaptive_max_pool3d"
    return _adaptive_max(prepare_adaptive(op, 3, x, output_size),
                         check_return_indices(op, return_indices))


def adaptive_max_pool3d_backward(dy, cache):
    """dy (N, D_out, H_out, W_out, C) -> dx (N, D, H, W, C): each dy goes to its bin's
    maximum."""
    return _adaptive_max_backward("adaptive_max_pool3d_backward", "adaptive_max_pool3d", dy,
                                  cache)


# ----------------------------------------------------------------------- unpool
def _unpool(call):
    x, index = call.x, call.indices
    xp = array_module(x)
    n, c = x.shape[0], x.shape[-1]
    y = xp.zeros((n, math.prod(call.out_shape), c), dtype=x.dtype)
    xp.put_along_axis(y, _flat(index), _flat(x), axis=1)
    y = y.reshape(n, *call.out_shape, c)
    return y, FlatIndexCache(call.op, tuple(x.shape), x.dtype, tuple(y.shape), index=index)


def _unpool_backward(op, forward, dy, cache):
    cache = check_cache(op, cache, forward, FlatIndexCache)
    dy = upstream_grad(op, dy, cache.y_shape, cache.dtype)
    xp = array_module(dy)
    return xp.take_along_axis(_flat(dy), _flat(cache.index), axis=1).reshape(cache.x_shape)


def max_unpool1d(x, indices, kernel_size, stride=None, padding=0, output_size=None):
    """x (N, L, C), indices int (N, L, C) -> y (N, L_out, C): x placed at ``indices``,
    zeros elsewhere; L_out = (L - 1) * stride - 2 * padding + kernel_size unless
    ``output_size`` is given. Returns ``(y, cache)``."""
    return _unpool(prepare_unpool("max_unpool1d", 1, x, indices, kernel_size, stride, padding,
                                  output_size))


def max_unpool1d_backward(dy, cache):
    """dy (N, L_out, C) -> dx (N, L, C): dx = dy read at ``indices``."""
    return _unpool_backward("max_unpool1d_backward", "max_unpool1d", dy, cache)


def max_unpool2d(x, indices, kernel_size, stride=None, padding=0, output_size=None):
    """x (N, H, W, C), indices int (N, H, W, C), flat h * W_out + w -> y (N, H_out, W_out,
    C): x placed at ``indices``, zeros elsewhere. Returns ``(y, cache)``."""
    return _unpool(prepare_unpool("max_unpool2d", 2, x, indices, kernel_size, stride, padding,
                                  output_size))


def max_unpool2d_backward(dy, cache):
    """dy (N, H_out, W_out, C) -> dx (N, H, W, C): dx = dy read at ``indices``."""
    return _unpool_backward("max_unpool2d_backward", "max_unpool2d", dy, cache)


def max_unpool3d(x, indices, kernel_size, stride=None, padding=0, output_size=None):
    """x (N, D, H, W, C), indices int (N, D, H, W, C), flat (d * H_out + h) * W_out + w ->
    y (N, D_out, H_out, W_out, C): x placed at ``indices``, zeros elsewhere. Returns
    ``(y, cache)``."""
    return _unpool(prepare_unpool("max_unpool3d", 3, x, indices, kernel_size, stride, padding,
                                  output_size))


def max_unpool3d_backward(dy, cache):
    """dy (N, D_out, H_out, W_out, C) -> dx (N, D, H, W, C): dx = dy read at ``indices``."""
    return _unpool_backward("max_unpool3d_backward", "max_unpool3d", dy, cache)


# The declarations: kernels, torch counterpart, sample inputs (ops/samples/pooling_extra.py).
from .samples import pooling_extra as _s  # noqa: E402

declare(adaptive_avg_pool1d, adaptive_avg_pool1d_backward, torch=_s.torch_adaptive("avg"),
        samples=_s.ADAPTIVE_1D)
declare(adaptive_avg_pool2d, adaptive_avg_pool2d_backward, torch=_s.torch_adaptive("avg"),
        samples=_s.ADAPTIVE_2D)
declare(adaptive_max_pool1d, adaptive_max_pool1d_backward, torch=_s.torch_adaptive("max"),
        samples=_s.ADAPTIVE_1D + _s.ADAPTIVE_MAX_EXTRA_1D)
declare(adaptive_max_pool2d, adaptive_max_pool2d_backward, torch=_s.torch_adaptive("max"),
        samples=_s.ADAPTIVE_2D + _s.ADAPTIVE_MAX_EXTRA_2D)
declare(adaptive_avg_pool3d, adaptive_avg_pool3d_backward, torch=_s.torch_adaptive("avg"),
        samples=_s.ADAPTIVE_3D)
declare(adaptive_max_pool3d, adaptive_max_pool3d_backward, torch=_s.torch_adaptive("max"),
        samples=_s.ADAPTIVE_3D + _s.ADAPTIVE_MAX_EXTRA_3D)
declare(max_unpool1d, max_unpool1d_backward, torch=_s.torch_unpool, samples=_s.UNPOOL_1D)
declare(max_unpool2d, max_unpool2d_backward, torch=_s.torch_unpool, samples=_s.UNPOOL_2D)
declare(max_unpool3d, max_unpool3d_backward, torch=_s.torch_unpool, samples=_s.UNPOOL_3D)
__all__ = exports(__name__, globals())
