"""Naive RMS normalization: plain loops over the leading indices and over the m values
of each group (the normalized axes). With g_i = gamma_i * dy_i and r the group's
1 / sqrt(sum_j x_j^2 / m + eps)::

    dx_i = (g_i - xhat_i * sum_j g_j xhat_j / m) * r
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..._checks import upstream_grad
from .._args.cache import Cache, check_cache
from .._args.norm import prepare_rms_norm
from ..declare import exports


@dataclass(frozen=True)
class LoopRmsCache(Cache):
    """The validated call, ``xhat`` (groups, m) and r per group."""

    call: object
    xhat: np.ndarray
    inv_rms: list


def _scale(call, j):
    return 1.0 if call.gamma is None else call.gamma.reshape(-1)[j]


def rms_norm(x, normalized_shape, gamma=None, *, eps=None):
    """Loop twin of :func:`handgrad.ops.rms_norm`."""
    call = prepare_rms_norm("rms_norm", x, normalized_shape, gamma, eps)
    m = call.group_size
    rows = call.x.reshape(-1, m) if m else np.zeros((0, 0), dtype=call.x.dtype)
    xhat, y, inv_rms = np.zeros_like(rows), np.zeros_like(rows), []
    for i in range(rows.shape[0]):
        r = 1.0 / math.sqrt(sum(v * v for v in rows[i]) / m + call.eps)
        inv_rms.append(r)
        for j in range(m):
            xhat[i, j] = rows[i, j] * r
            y[i, j] = xhat[i, j] * _scale(call, j)
    return y.reshape(call.x.shape), LoopRmsCache("rms_norm", call, xhat, inv_rms)


def rms_norm_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.rms_norm_backward`."""
    cache = check_cache("rms_norm_backward", cache, "rms_norm", LoopRmsCache)
    call, xhat = cache.call, cache.xhat
    dy = upstream_grad("rms_norm_backward", dy, call.x.shape, call.x.dtype).reshape(xhat.shape)
    dx = np.zeros_like(dy)
    dgamma = None if call.gamma is None else np.zeros(call.gamma.size, dtype=dy.dtype)
    m = xhat.shape[1]
    for i in range(xhat.shape[0]):
        g = [dy[i, j] * _scale(call, j) for j in range(m)]
        mean_gx = sum(g[j] * xhat[i, j] for j in range(m)) / m
        for j in range(m):
            dx[i, j] = (g[j] - xhat[i, j] * mean_gx) * cache.inv_rms[i]
            if dgamma is not None:
                dgamma[j] += dy[i, j] * xhat[i, j]
    if dgamma is not None:
        dgamma = dgamma.reshape(call.gamma.shape)
    return dx.reshape(call.x.shape), dgamma


__all__ = exports(__name__, globals())
