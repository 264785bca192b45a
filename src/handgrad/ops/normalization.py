"""Batch, layer, group and instance normalization: one kernel, four sets of axes.

Each op views ``x`` so that one mean and one variance are taken over ``axes`` of
the view for every index of the other axes (a group of m values)::

    mu   = mean(x),  var = mean((x - mu)^2)            (biased, per group)
    xhat = (x - mu) / sqrt(var + eps)
    y    = gamma * xhat + beta                         (gamma, beta on trailing axes)

==============  =====================  ==================  ===================
op              view of x              statistics over     gamma, beta
==============  =====================  ==================  ===================
batch_norm      (N, *S, C)             N and S             (C,)
instance_norm   (N, *S, C)             S                   (C,)
group_norm      (N, *S, G, C / G)      S and C / G         (C,)
layer_norm      (*lead, *normalized)   normalized axes     normalized_shape
==============  =====================  ==================  ===================

Backward, with g = gamma * dy (g = dy without gamma) and means over the group::

    dbeta  = sum dy,  dgamma = sum dy * xhat           (over the axes gamma lacks)
    dx     = (g - mean(g) - xhat * mean(g * xhat)) / sqrt(var + eps)

When ``mu``/``var`` are running statistics (evaluation) they do not depend on
``x`` and ``dx = g / sqrt(var + eps)``. In training, batch and instance norm
update their running statistics in place, per channel c::

    running_mean = (1 - momentum) * running_mean + momentum * mean_c(mu)
    running_var  = (1 - momentum) * running_var  + momentum * mean_c(var) * m / (m - 1)

(the unbiased variance; ``mean_c`` averages over the groups of channel c: one
for batch norm, the N examples for instance norm), as PyTorch does. The cache
holds ``xhat``, ``1 / sqrt(var + eps)`` and ``gamma``. Sums of products
(the variance, ``dgamma``, ``mean(g * xhat)``) go through ``einsum``, which
needs no temporary product array; the forward allocates ``xhat`` and ``y``
only, the backward ``dx`` and one temporary.

**A batch shared by several processes** (data-parallel training, ``batch_norm(...,
allreduce=sum_over_processes)``): each process holds rows of one global batch, and
``allreduce(a)`` returns the sum of ``a`` over the processes. Training then uses the
statistics of the global batch, M values per channel, and the means of the backward are
over the global batch too, with two allreduces forward and one backward::

    M       = S * allreduce(N)                  (S values per example and channel)
    mu      = allreduce(sum x) / M
    var     = allreduce(sum (x - mu)^2) / M     (two passes, as in one process)
    mean(g) = allreduce(sum g) / M,  mean(g * xhat) = allreduce(sum g * xhat) / M

(``sum g = gamma * sum dy`` and ``sum g * xhat = gamma * sum dy * xhat``: the backward
allreduces the per-channel sums of ``dy`` and ``dy * xhat``, one packed buffer.)
``dgamma`` and ``dbeta`` stay the sums over this process's rows: the parameter gradients
are summed over processes with the others. A process may hold no rows; every process
must call the op, since the allreduces are collective.

Empty inputs behave as in PyTorch: an empty batch (or empty groups) gives an empty
``y``, an empty ``dx``, zero ``dgamma``/``dbeta`` and leaves the running statistics
unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .._checks import array_module, describe, upstream_grad
from . import _channel_stats as device_stats
from ._args.cache import Cache, check_cache
from ._args.norm import (
    prepare_batch_norm,
    prepare_group_norm,
    prepare_instance_norm,
    prepare_layer_norm,
)
from .declare import declare, exports


@dataclass(frozen=True)
class NormCache(Cache):
    """What a normalization backward needs: ``xhat`` in the statistics view, the
    inverse standard deviation (broadcastable to it), and the affine parameters."""

    shape: tuple
    dtype: object
    xhat: object
    inv_std: object
    axes: tuple
    input_stats: bool
    gamma: object
    has_beta: bool
    param_ndim: int
    allreduce: object = None  # a global batch's sum over processes (batch_norm only)
    count: int = 0  # M, the values per statistic of that global batch
    centered: bool = True  # False: RMS norm (no mean subtracted, no mean(g) term)


def _sum_product(xp, a, b, axes, keepdims=True):
    """sum of a * b over ``axes`` by ``einsum``: no (a * b) temporary, and faster than
    NumPy's reduction over leading axes."""
    letters = "abcdefghijklmnopqrstuvwxyz"[:a.ndim]
    kept = "".join(letter for axis, letter in enumerate(letters) if axis not in axes)
    total = xp.einsum(f"{letters},{letters}->{kept}", a, b)
    if keepdims:
        total = total.reshape([1 if axis in axes else d for axis, d in enumerate(a.shape)])
    return total


def _update_running(xp, call, mean, var, m=None):
    """Running statistics <- (1 - momentum) * running + momentum * batch, per channel;
    ``m`` values per statistic (default: the call's group size)."""
    channels = call.running_mean.shape[0]
    m = call.group_size if m is None else m
    batch_mean = xp.mean(mean.reshape(-1, channels), axis=0)
    batch_var = xp.mean(var.reshape(-1, channels), axis=0) * (m / (m - 1))
    keep = 1.0 - call.momentum
    call.running_mean[...] = keep * call.running_mean + call.momentum * batch_mean
    call.running_var[...] = keep * call.running_var + call.momentum * batch_var


def _normalize(call):
    """xhat and 1 / sqrt(var + eps), from the statistics of ``x`` or the running ones."""
    xp = array_module(call.x)
    view = call.x.reshape(call.view_shape)
    if call.group_size == 0:  # empty groups: nothing to normalize, running stats unchanged
        stats = [1 if axis in call.axes else d for axis, d in enumerate(call.view_shape)]
        return view.copy(), xp.ones(stats, dtype=call.x.dtype)
    if _on_device_leading(xp, call.axes, view.ndim):
        return _device_normalize(xp, call, view)
    if call.input_stats:
        mean = xp.mean(view, axis=call.axes, keepdims=True)
        centered = view - mean
        var = _sum_product(xp, centered, centered, call.axes) / call.group_size
        if call.update:
            _update_running(xp, call, mean, var)
    else:  # running statistics: (C,) broadcasts over the channels-last view
        centered = view - call.running_mean
        var = call.running_var
    inv_std = 1.0 / xp.sqrt(var + call.eps)
    centered *= inv_std
    return centered, inv_std


def _on_device_leading(xp, axes, ndim) -> bool:
    """Batch norm's statistics (all axes but the last) on CuPy: :mod:`._channel_stats`."""
    return xp is not np and tuple(axes) == tuple(range(ndim - 1))


def _device_normalize(xp, call, view):
    """:func:`_normalize` on CuPy for statistics over the leading axes: two-stage sums and
    fused elementwise passes (no host sync); the statistics have shape (C,)."""
    if call.input_stats:
        xhat, mean, var, inv_std = device_stats.normalize(xp, view, len(call.axes), call.eps)
        if call.update:
            _update_running(xp, call, mean, var)
        return xhat, inv_std
    inv_std = 1.0 / xp.sqrt(call.running_var + call.eps)
    return device_stats.fused(xp, "scale_dev", view, call.running_mean, inv_std), inv_std


def _normalize_global(call, allreduce):
    """xhat, 1 / sqrt(var + eps) and M for batch norm with the statistics of a global batch
    whose rows several processes hold (see the module docstring)."""
    xp, x, axes = array_module(call.x), call.x, call.axes
    per_example = math.prod(x.shape[1:-1])
    local = xp.concatenate([xp.sum(x, axis=axes), xp.asarray([x.shape[0]], dtype=x.dtype)])
    total = allreduce(local)
    count = round(float(total[-1])) * per_example
    if count == 1:
        raise ValueError(f"{call.op}: expected more than 1 value per channel when training "
                         f"(statistics of the global batch); received 1 in all")
    if count == 0:
        return x.copy(), xp.ones([1] * x.ndim, dtype=x.dtype), count
    mean = total[:-1] / count
    centered = x - mean
    var = allreduce(_sum_product(xp, centered, centered, axes, keepdims=False)) / count
    if call.update:
        _update_running(xp, call, mean, var, count)
    inv_std = 1.0 / xp.sqrt(var + call.eps)
    centered *= inv_std
    return centered, inv_std, count


def _forward(call, allreduce=None):
    """y = gamma * xhat + beta; returns ``(y, cache)``. ``y`` is a new array, never the
    cached ``xhat``. With ``allreduce`` (batch norm of a shared batch) the statistics are
    the global batch's."""
    if allreduce is None:
        (xhat, inv_std), count = _normalize(call), call.group_size
    else:
        xhat, inv_std, count = _normalize_global(call, allreduce)
    y = xhat.reshape(call.x.shape)
    xp = array_module(y)
    if xp is not np and call.gamma is not None and call.beta is not None:
        y = device_stats.fused(xp, "affine", y, call.gamma, call.beta)  # one pass
    else:
        y = y * call.gamma if call.gamma is not None else y.copy()
        if call.beta is not None:
            y += call.beta
    params = [p for p in (call.gamma, call.beta) if p is not None]
    cache = NormCache(call.op, tuple(call.x.shape), call.x.dtype, xhat, inv_std, call.axes,
                      call.input_stats, call.gamma, call.beta is not None,
                      params[0].ndim if params else 0, allreduce, count)
    return y, cache


def _global_means(xp, g, xhat, cache):
    """mean(g) and mean(g * xhat) over the global batch: one allreduce of both sums."""
    sums = xp.concatenate([xp.sum(g, axis=cache.axes), _sum_product(xp, g, xhat, cache.axes,
                                                                     keepdims=False)])
    sums = cache.allreduce(sums) / cache.count
    channels = g.shape[-1]
    return sums[:channels], sums[channels:]


def _backward(op, forward, dy, cache):
    """(dx, dgamma, dbeta) of :func:`_forward`; dgamma/dbeta are None where absent."""
    cache = check_cache(op, cache, forward, NormCache)
    dy = upstream_grad(op, dy, cache.shape, cache.dtype)
    xp = array_module(dy)
    xhat, gamma = cache.xhat, cache.gamma
    lead = tuple(range(dy.ndim - cache.param_ndim))  # the axes gamma and beta broadcast over
    if cache.allreduce is None and cache.centered and xhat.shape == dy.shape and \
            cache.axes == lead and _on_device_leading(xp, lead, dy.ndim):
        dx, sum_dy, sum_dyx = device_stats.backward(xp, dy, xhat, len(lead), gamma,
                                                    cache.inv_std, cache.input_stats)
        return (dx, sum_dyx if gamma is not None else None,
                sum_dy if cache.has_beta else None)
    dbeta = xp.sum(dy, axis=lead) if cache.has_beta else None
    dgamma = None
    if gamma is not None:
        dgamma = _sum_product(xp, dy, xhat.reshape(cache.shape), lead, keepdims=False)
    g = (dy * gamma if gamma is not None else dy.copy()).reshape(xhat.shape)  # becomes dx
    group_size = math.prod(xhat.shape[axis] for axis in cache.axes)
    if cache.allreduce is not None and cache.count:
        mean_g, mean_gx = _global_means(xp, g, xhat, cache)
        g -= mean_g
        g -= xhat * mean_gx
    elif cache.input_stats and g.size:
        mean_gx = _sum_product(xp, g, xhat, cache.axes) / group_size
        if cache.centered:
            g -= xp.mean(g, axis=cache.axes, keepdims=True)
        g -= xhat * mean_gx
    g *= cache.inv_std
    return g.reshape(cache.shape), dgamma, dbeta


def batch_norm(x, gamma=None, beta=None, running_mean=None, running_var=None, *, training=True,
               momentum=0.1, eps=1e-5, allreduce=None):
    """Batch normalization over the channels (last axis), as ``F.batch_norm``.

    x (N, C), (N, L, C), (N, H, W, C) or any (N, ..., C); gamma, beta, running_mean,
    running_var (C,) or None. ``training=True``: statistics of ``x`` over all axes but the
    last (at least 2 values per channel), and the running statistics, if given, are updated
    in place (the variance unbiased); ``training=False``: the running statistics.
    ``allreduce`` (None, or a function returning the sum of an array over the processes
    that share the batch): with ``training=True``, the statistics of the global batch (see
    the module docstring). Returns ``(y, cache)`` for :func:`batch_norm_backward`.
    """
    if allreduce is not None and not callable(allreduce):
        raise TypeError(f"batch_norm: 'allreduce' must be None or a function that sums an "
                        f"array over processes; received {describe(allreduce)}")
    call = prepare_batch_norm("batch_norm", x, gamma, beta, running_mean, running_var,
                              training, momentum, eps, local_stats=allreduce is None)
    return _forward(call, allreduce if call.input_stats else None)


def batch_norm_backward(dy, cache):
    """Gradients of :func:`batch_norm`: dy (N, ..., C) -> (dx, dgamma, dbeta).

    Training: dx = (g - mean(g) - xhat * mean(g * xhat)) / sqrt(var + eps), g = gamma * dy,
    means over all axes but the last (of the global batch after a forward with
    ``allreduce``); evaluation: dx = g / sqrt(running_var + eps).
    dgamma = sum dy * xhat, dbeta = sum dy (None when the forward had no gamma/beta).
    """
    return _backward("batch_norm_backward", "batch_norm", dy, cache)


def instance_norm(x, gamma=None, beta=None, running_mean=None, running_var=None, *,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """Instance normalization, as ``F.instance_norm`` with the channel axis last.

    x (N, L, C) or (N, H, W, C) (any (N, *S, C)); gamma, beta, running_mean, running_var (C,)
    or None. ``use_input_stats=True``: statistics per example and channel over S (at least 2
    spatial elements), and the running statistics, if given, are updated in place with their
    average over the examples; ``False``: the running statistics.
    Returns ``(y, cache)`` for :func:`instance_norm_backward`.
    """
    return _forward(prepare_instance_norm("instance_norm", x, gamma, beta, running_mean,
                                          running_var, use_input_stats, momentum, eps))


def instance_norm_backward(dy, cache):
    """Gradients of :func:`instance_norm`: dy (N, *S, C) -> (dx, dgamma, dbeta); the batch-norm
    formulas with the means over S per example and channel."""
    return _backward("instance_norm_backward", "instance_norm", dy, cache)


def layer_norm(x, normalized_shape, gamma=None, beta=None, *, eps=1e-5):
    """Layer normalization over the trailing axes, as ``F.layer_norm``.

    x (..., *normalized_shape); normalized_shape an int d (= (d,)) or a tuple; gamma, beta of
    shape normalized_shape or None. Returns ``(y, cache)`` for :func:`layer_norm_backward`.
    """
    return _forward(prepare_layer_norm("layer_norm", x, normalized_shape, gamma, beta, eps))


def layer_norm_backward(dy, cache):
    """Gradients of :func:`layer_norm`: dy (..., *normalized_shape) -> (dx, dgamma, dbeta);
    the means of dx's formula are over the normalized axes, dgamma/dbeta sum over the others."""
    return _backward("layer_norm_backward", "layer_norm", dy, cache)


def group_norm(x, num_groups, gamma=None, beta=None, *, eps=1e-5):
    """Group normalization, as ``F.group_norm`` with the channel axis last.

    x (N, C), (N, L, C) or (N, H, W, C); the C channels split into ``num_groups`` contiguous
    groups; statistics per example and group over the spatial axes and the group's channels;
    gamma, beta (C,) or None. Returns ``(y, cache)`` for :func:`group_norm_backward`.
    """
    return _forward(prepare_group_norm("group_norm", x, num_groups, gamma, beta, eps))


def group_norm_backward(dy, cache):
    """Gradients of :func:`group_norm`: dy (N, *S, C) -> (dx, dgamma, dbeta); the means of
    dx's formula are per example and group."""
    return _backward("group_norm_backward", "group_norm", dy, cache)


# The declarations: kernels, torch counterpart, sample inputs (ops/samples/normalization.py).
from .samples import normalization as _s  # noqa: E402

declare(batch_norm, batch_norm_backward, torch=_s.torch_batch_norm, samples=_s.BATCH_NORM)
declare(instance_norm, instance_norm_backward, torch=_s.torch_instance_norm,
        samples=_s.INSTANCE_NORM)
declare(layer_norm, layer_norm_backward, torch=_s.torch_layer_norm, samples=_s.LAYER_NORM)
declare(group_norm, group_norm_backward, torch=_s.torch_group_norm, samples=_s.GROUP_NORM)
__all__ = exports(__name__, globals())
