"""Naive normalization: plain loops over the groups of values that share a mean and
a variance, and over the values of each group.

The readable specification of :mod:`handgrad.ops.normalization`, with the same
signatures and the same argument checks. A group is the set of positions of
``x`` whose statistics are shared (batch norm: one channel; instance norm: one
example and channel; group norm: one example and group of channels; layer norm:
one leading index). For a group of m values with g_i = gamma_i * dy_i::

    dx_i = (g_i - sum_j g_j / m - xhat_i * sum_j g_j xhat_j / m) / sqrt(var + eps)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..._checks import upstream_grad
from .._args.cache import Cache, check_cache
from .._args.norm import (
    prepare_batch_norm,
    prepare_group_norm,
    prepare_instance_norm,
    prepare_layer_norm,
)
from ..declare import exports


@dataclass(frozen=True)
class LoopNormCache(Cache):
    """The validated call, ``xhat`` (flat) and 1 / sqrt(var + eps) per group."""

    call: object
    xhat: np.ndarray
    inv_std: dict


def _groups(call):
    """{group key: flat indices into x}; the key holds the view's non-reduced indices, so
    its last entry is the channel for batch and instance norm."""
    groups = {}
    for flat, position in enumerate(np.ndindex(*call.view_shape)):
        key = tuple(p for axis, p in enumerate(position) if axis not in call.axes)
        groups.setdefault(key, []).append(flat)
    return groups


def _param_index(call, flat):
    """Index into gamma/beta of the value at flat index ``flat``: its trailing axes."""
    position = np.unravel_index(flat, call.x.shape)
    ndim = next((p.ndim for p in (call.gamma, call.beta) if p is not None), 0)
    return tuple(int(i) for i in position[len(position) - ndim:])


def _forward(call):
    x = call.x.reshape(-1)
    xhat = np.zeros_like(x)
    y = np.zeros_like(x)
    inv_std = {}
    batch_mean, batch_var = {}, {}
    for key, members in _groups(call).items():
        if call.input_stats:
            m = len(members)
            mean = sum(x[i] for i in members) / m
            var = sum((x[i] - mean) ** 2 for i in members) / m
            if call.update:  # batch and instance norm: the key ends with the channel
                batch_mean.setdefault(key[-1], []).append(mean)
                batch_var.setdefault(key[-1], []).append(var * m / (m - 1))
        else:
            mean, var = call.running_mean[key[-1]], call.running_var[key[-1]]
        inv_std[key] = 1.0 / math.sqrt(var + call.eps)
        for i in members:
            xhat[i] = (x[i] - mean) * inv_std[key]
            scale = 1.0 if call.gamma is None else call.gamma[_param_index(call, i)]
            shift = 0.0 if call.beta is None else call.beta[_param_index(call, i)]
            y[i] = xhat[i] * scale + shift
    if call.update and call.group_size:  # empty groups leave the running statistics alone
        for c in range(call.running_mean.shape[0]):
            new_mean = sum(batch_mean[c]) / len(batch_mean[c])
            new_var = sum(batch_var[c]) / len(batch_var[c])
            call.running_mean[c] = (1 - call.momentum) * call.running_mean[c] \
                + call.momentum * new_mean
            call.running_var[c] = (1 - call.momentum) * call.running_var[c] \
                + call.momentum * new_var
    return y.reshape(call.x.shape), LoopNormCache(call.op, call, xhat, inv_std)


def _backward(op, forward, dy, cache):
    cache = check_cache(op, cache, forward, LoopNormCache)
    call, xhat, inv_std = cache.call, cache.xhat, cache.inv_std
    dy = upstream_grad(op, dy, call.x.shape, call.x.dtype).reshape(-1)
    dx = np.zeros_like(dy)
    dgamma = None if call.gamma is None else np.zeros_like(call.gamma)
    dbeta = None if call.beta is None else np.zeros_like(call.beta)
    for key, members in _groups(call).items():
        g = {}
        for i in members:
            scale = 1.0 if call.gamma is None else call.gamma[_param_index(call, i)]
            g[i] = dy[i] * scale
            if dgamma is not None:
                dgamma[_param_index(call, i)] += dy[i] * xhat[i]
            if dbeta is not None:
                dbeta[_param_index(call, i)] += dy[i]
        m = len(members)
        mean_g = sum(g.values()) / m
        mean_gx = sum(g[i] * xhat[i] for i in members) / m
        for i in members:
            if call.input_stats:
                dx[i] = (g[i] - mean_g - xhat[i] * mean_gx) * inv_std[key]
            else:
                dx[i] = g[i] * inv_std[key]
    return dx.reshape(call.x.shape), dgamma, dbeta


def batch_norm(x, gamma=None, beta=None, running_mean=None, running_var=None, *, training=True,
               momentum=0.1, eps=1e-5):
    """Loop twin of :func:`handgrad.ops.batch_norm`."""
    return _forward(prepare_batch_norm("batch_norm", x, gamma, beta, running_mean, running_var,
                                       training, momentum, eps))


def batch_norm_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.batch_norm_backward`."""
    return _backward("batch_norm_backward", "batch_norm", dy, cache)


def instance_norm(x, gamma=None, beta=None, running_mean=None, running_var=None, *,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """Loop twin of :func:`handgrad.ops.instance_norm`."""
    return _forward(prepare_instance_norm("instance_norm", x, gamma, beta, running_mean,
                                          running_var, use_input_stats, momentum, eps))


def instance_norm_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.instance_norm_backward`."""
    return _backward("instance_norm_backward", "instance_norm", dy, cache)


def layer_norm(x, normalized_shape, gamma=None, beta=None, *, eps=1e-5):
    """Loop twin of :func:`handgrad.ops.layer_norm`."""
    return _forward(prepare_layer_norm("layer_norm", x, normalized_shape, gamma, beta, eps))


def layer_norm_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.layer_norm_backward`."""
    return _backward("layer_norm_backward", "layer_norm", dy, cache)


def group_norm(x, num_groups, gamma=None, beta=None, *, eps=1e-5):
    """Loop twin of :func:`handgrad.ops.group_norm`."""
    return _forward(prepare_group_norm("group_norm", x, num_groups, gamma, beta, eps))


def group_norm_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.group_norm_backward`."""
    return _backward("group_norm_backward", "group_norm", dy, cache)


__all__ = exports(__name__, globals())
