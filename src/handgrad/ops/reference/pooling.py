"""Naive pooling: plain loops over output positions and channels.

The readable specification of :mod:`handgrad.ops.pooling`, with the same
signatures. A window is the list of input positions ``o*s + k*d - pad`` that
fall inside the input; max pooling scans it in row-major order and keeps the
first strict maximum (a NaN wins), average pooling divides its sum by
PyTorch's divisor.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ..._checks import upstream_grad
from .._args.adaptive import check_return_indices
from .._args.cache import Cache, check_cache
from .._args.pool import prepare_global_pool, prepare_pool, resolve_count_include_pad
from ..declare import exports


@dataclass(frozen=True)
class LoopPoolCache(Cache):
    """The forward's name, the input's shape and dtype, the output's shape, and what
    the loops recorded: each window's winner (max) or positions and divisor (average)."""

    x_shape: tuple
    dtype: object
    y_shape: tuple
    record: dict


def _open(op, forward, dy, cache):
    """``(cache, dy)``: the cache ``forward`` returned, ``dy`` checked against it."""
    cache = check_cache(op, cache, forward, LoopPoolCache)
    return cache, upstream_grad(op, dy, cache.y_shape, cache.dtype)


def _positions(axis, o):
    """Input positions read by output ``o`` along one axis (None for padding)."""
    out = []
    for k in range(axis.kernel):
        i = o * axis.stride + k * axis.dilation - axis.pad_before
        out.append(i if 0 <= i < axis.size_in else None)
    return out


def _window(axes, out_index):
    """The in-bounds input positions of one window, in row-major tap order."""
    per_axis = [_positions(a, o) for a, o in zip(axes, out_index)]
    return [p for p in itertools.product(*per_axis) if None not in p]


def _max_pool(call):
    x, axes = np.asarray(call.x), call.axes
    out_shape = tuple(a.size_out for a in axes)
    y = np.empty((x.shape[0], *out_shape, x.shape[-1]), dtype=x.dtype)
    winners = {}
    for n in range(x.shape[0]):
        for out_index in np.ndindex(*out_shape):
            for c in range(x.shape[-1]):
                best, best_value = None, -np.inf
                for position in _window(axes, out_index):
                    value = x[(n, *position, c)]
                    if best is None or value > best_value or np.isnan(value):
                        best, best_value = position, value
                y[(n, *out_index, c)] = best_value
                if best is not None:  # a window may lie entirely in the padding
                    winners[(n, *out_index, c)] = best
    return y, LoopPoolCache(call.op, x.shape, x.dtype, y.shape, winners)


def _max_pool_backward(op, forward, dy, cache):
    cache, dy = _open(op, forward, dy, cache)
    dx = np.zeros(cache.x_shape, dtype=cache.dtype)
    for (n, *out_index, c), position in cache.record.items():
        dx[(n, *position, c)] += dy[(n, *out_index, c)]
    return dx


def _with_indices(op, y, cache, return_indices):
    """(y, cache), or (y, indices, cache): each winner's flat input position."""
    if not check_return_indices(op, return_indices):
        return y, cache
    indices = np.zeros(y.shape, dtype=np.int64)
    for out, position in cache.record.items():
        indices[out] = np.ravel_multi_index(position, cache.x_shape[1:-1])
    return y, indices, cache


def _divisor(call, out_index, count_include_pad, divisor_override):
    if divisor_override is not None:
        return divisor_override
    count = 1
    for a, (before, after), o in zip(call.axes, call.pads, out_index):
        start = o * a.stride - before
        end = min(start + a.kernel, a.size_in + after)
        if not count_include_pad:
            start, end = max(start, 0), min(end, a.size_in)
        count *= end - start
    return count


def _avg_pool(call, count_include_pad, divisor_override):
    x, axes = np.asarray(call.x), call.axes
    out_shape = tuple(a.size_out for a in axes)
    y = np.zeros((x.shape[0], *out_shape, x.shape[-1]), dtype=x.dtype)
    windows = {}
    for out_index in np.ndindex(*out_shape):
        divisor = _divisor(call, out_index, count_include_pad, divisor_override)
        windows[out_index] = (_window(axes, out_index), divisor)
        for n in range(x.shape[0]):
            total = np.zeros(x.shape[-1], dtype=x.dtype)
            for position in windows[out_index][0]:
                total += x[(n, *position)]
            y[(n, *out_index)] = total / divisor
    return y, LoopPoolCache(call.op, x.shape, x.dtype, y.shape, windows)


def _avg_pool_backward(op, forward, dy, cache):
    cache, dy = _open(op, forward, dy, cache)
    dx = np.zeros(cache.x_shape, dtype=cache.dtype)
    for out_index, (positions, divisor) in cache.record.items():
        for n in range(cache.x_shape[0]):
            for position in positions:
                dx[(n, *position)] += dy[(n, *out_index)] / divisor
    return dx


def _max_pool_twin(op, rank, x, kernel_size, stride, padding, dilation, ceil_mode,
                   return_indices):
    """The body of the max_pool{1,2,3}d twins: checked arguments, loop maxima, indices."""
    y, cache = _max_pool(prepare_pool(op, rank, x, kernel_size, stride, padding, dilation,
                                      ceil_mode))
    return _with_indices(op, y, cache, return_indices)


def _avg_pool_twin(op, rank, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                   divisor_override):
    """The body of the avg_pool{1,2,3}d twins: checked arguments, loop means."""
    include = resolve_count_include_pad(op, padding, count_include_pad)
    call = prepare_pool(op, rank, x, kernel_size, stride, padding, 1, ceil_mode)
    return _avg_pool(call, include, divisor_override)


def max_pool1d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """Loop twin of :func:`handgrad.ops.max_pool1d`."""
    return _max_pool_twin("max_pool1d", 1, x, kernel_size, stride, padding, dilation,
                          ceil_mode, return_indices)


def max_pool1d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.max_pool1d_backward`."""
    return _max_pool_backward("max_pool1d_backward", "max_pool1d", dy, cache)


def max_pool2d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """Loop twin of :func:`handgrad.ops.max_pool2d`."""
    return _max_pool_twin("max_pool2d", 2, x, kernel_size, stride, padding, dilation,
                          ceil_mode, return_indices)


def max_pool2d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.max_pool2d_backward`."""
    return _max_pool_backward("max_pool2d_backward", "max_pool2d", dy, cache)


def avg_pool1d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=None):
    """Loop twin of :func:`handgrad.ops.avg_pool1d`."""
    return _avg_pool_twin("avg_pool1d", 1, x, kernel_size, stride, padding, ceil_mode,
                          count_include_pad, None)


def avg_pool1d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.avg_pool1d_backward`."""
    return _avg_pool_backward("avg_pool1d_backward", "avg_pool1d", dy, cache)


def avg_pool2d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=None,
               divisor_override=None):
    """Loop twin of :func:`handgrad.ops.avg_pool2d`."""
    return _avg_pool_twin("avg_pool2d", 2, x, kernel_size, stride, padding, ceil_mode,
                          count_include_pad, divisor_override)


def avg_pool2d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.avg_pool2d_backward`."""
    return _avg_pool_backward("avg_pool2d_backward", "avg_pool2d", dy, cache)


def max_pool3d(x, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """Loop twin of :func:`handgrad.ops.max_pool3d`."""
    return _max_pool_twin("max_pool3d", 3, x, kernel_size, stride, padding, dilation,
                          ceil_mode, return_indices)


def max_pool3d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.max_pool3d_backward`."""
    return _max_pool_backward("max_pool3d_backward", "max_pool3d", dy, cache)


def avg_pool3d(x, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=None,
               divisor_override=None):
    """Loop twin of :func:`handgrad.ops.avg_pool3d`."""
    return _avg_pool_twin("avg_pool3d", 3, x, kernel_size, stride, padding, ceil_mode,
                          count_include_pad, divisor_override)


def avg_pool3d_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.avg_pool3d_backward`."""
    return _avg_pool_backward("avg_pool3d_backward", "avg_pool3d", dy, cache)


def global_avg_pool(x, keepdims=False):
    """Loop twin of :func:`handgrad.ops.global_avg_pool`."""
    x = prepare_global_pool("global_avg_pool", x, keepdims)
    positions = list(np.ndindex(*x.shape[1:-1]))
    y = np.zeros((x.shape[0], x.shape[-1]), dtype=x.dtype)
    for n in range(x.shape[0]):
        for position in positions:
            y[n] += x[(n, *position)]
    y /= len(positions)
    out_shape = (x.shape[0], *(1,) * (x.ndim - 2), x.shape[-1]) if keepdims else y.shape
    return y.reshape(out_shape), LoopPoolCache("global_avg_pool", x.shape, x.dtype, out_shape,
                                               {"positions": positions})


def global_avg_pool_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.global_avg_pool_backward`."""
    cache, dy = _open("global_avg_pool_backward", "global_avg_pool", dy, cache)
    x_shape, dtype, positions = cache.x_shape, cache.dtype, cache.record["positions"]
    dy = dy.reshape(x_shape[0], x_shape[-1])
    dx = np.zeros(x_shape, dtype=dtype)
    for n in range(x_shape[0]):
        for position in positions:
            dx[(n, *position)] = dy[n] / len(positions)
    return dx


def global_max_pool(x, keepdims=False):
    """Loop twin of :func:`handgrad.ops.global_max_pool`."""
    x = prepare_global_pool("global_max_pool", x, keepdims)
    y = np.empty((x.shape[0], x.shape[-1]), dtype=x.dtype)
    winners = {}
    for n in range(x.shape[0]):
        for c in range(x.shape[-1]):
            best = None
            for position in np.ndindex(*x.shape[1:-1]):
                if best is None or x[(n, *position, c)] > x[(n, *best, c)]:
                    best = position
            y[n, c] = x[(n, *best, c)]
            winners[n, c] = best
    out_shape = (x.shape[0], *(1,) * (x.ndim - 2), x.shape[-1]) if keepdims else y.shape
    return y.reshape(out_shape), LoopPoolCache("global_max_pool", x.shape, x.dtype, out_shape,
                                               winners)


def global_max_pool_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.global_max_pool_backward`."""
    cache, dy = _open("global_max_pool_backward", "global_max_pool", dy, cache)
    x_shape, dtype, winners = cache.x_shape, cache.dtype, cache.record
    dy = dy.reshape(x_shape[0], x_shape[-1])
    dx = np.zeros(x_shape, dtype=dtype)
    for (n, c), position in winners.items():
        dx[(n, *position, c)] = dy[n, c]
    return dx


__all__ = exports(__name__, globals())
