"""Batch normalization's statistics on a GPU (CuPy): sums over the leading axes.

CuPy reduces the leading axes of a (M, C) array, C small, in about C / 32 thread
blocks (one block per 32 outputs), so a ResNet map of M = 400k rows and C = 64
channels runs on 2 of the GPU's 132 multiprocessors. Here the rows are split into
B blocks (B a divisor of M, B * C about 32k outputs) and summed in two stages::

    sum_m a[m, c] = sum_b (sum_k a[b, k, c])        (a viewed as (B, M / B, C))

The training forward and backward of batch norm (statistics over all axes but the
channels) then take, per channel c, with m = M values::

    mean = sum x / m,  var = sum (x - mean)^2 / m                 (two passes, as NumPy)
    xhat = (x - mean) * inv_std,  y = gamma * xhat + beta
    dbeta = sum dy,  dgamma = sum dy * xhat
    dx = gamma * inv_std * (dy - dbeta / m - xhat * dgamma / m)

the elementwise lines each one fused kernel on CuPy, with the NumPy expression in
:data:`TWINS` as their reference (tests/test_gpu_formulations.py runs this module with
NumPy). The NumPy path of :mod:`.normalization` does not come here.
"""

from __future__ import annotations

import functools
import math

import numpy as np

#: name -> (inputs, output, CUDA body, NumPy twin): the fused elementwise passes
TWINS = {
    "square_dev": ("T x, T mean", "T out", "T d = x - mean; out = d * d",
                   lambda x, mean: (x - mean) * (x - mean)),
    "scale_dev": ("T x, T mean, T scale", "T out", "out = (x - mean) * scale",
                  lambda x, mean, scale: (x - mean) * scale),
    "affine": ("T x, T gamma, T beta", "T out", "out = x * gamma + beta",
               lambda x, gamma, beta: x * gamma + beta),
    "bn_dx": ("T dy, T xhat, T mean_dy, T mean_dyx, T scale", "T out",
              "out = (dy - mean_dy - xhat * mean_dyx) * scale",
              lambda dy, xhat, mean_dy, mean_dyx, scale: (dy - mean_dy - xhat * mean_dyx)
              * scale),
}

_OUTPUTS = 32768  # first-stage outputs to aim at (B * C)
_MIN_RUN = 16  # rows summed per first-stage output, at least


@functools.lru_cache(maxsize=256)
def row_blocks(rows: int, cols: int) -> int:
    """B: the largest divisor of ``rows`` up to about 32k / ``cols`` blocks, each of at
    least 16 rows (1 for few rows)."""
    target = min(max(1, _OUTPUTS // max(cols, 1)), max(1, rows // _MIN_RUN))
    for blocks in range(target, 0, -1):
        if rows % blocks == 0:
            return blocks
    return 1


def leading_sum(xp, a, lead: int):
    """The sum of ``a`` over its first ``lead`` axes (shape ``a.shape[lead:]``), in two
    stages (module docstring)."""
    rows, tail = math.prod(a.shape[:lead]), a.shape[lead:]
    cols = math.prod(tail)
    if rows == 0 or cols == 0:
        return xp.zeros(tail, dtype=a.dtype)
    blocks = row_blocks(rows, cols)
    return a.reshape(blocks, rows // blocks, cols).sum(axis=1).sum(axis=0).reshape(tail)


@functools.cache
def _kernel(xp, name):
    inputs, output, body, _ = TWINS[name]
    return xp.ElementwiseKernel(inputs, output, body, f"handgrad_{name}")


def fused(xp, name, *args):
    """The elementwise pass ``name`` of :data:`TWINS`: one kernel on CuPy, the NumPy
    twin otherwise."""
    if xp is np:
        return TWINS[name][3](*args)
    return _kernel(xp, name)(*args)


def normalize(xp, view, lead: int, eps):
    """(xhat, mean (C,), var (C,), inv_std (C,)) of ``view`` (..., C) with the statistics
    over its ``lead`` leading axes."""
    m = math.prod(view.shape[:lead])
    mean = leading_sum(xp, view, lead) / m
    var = leading_sum(xp, fused(xp, "square_dev", view, mean), lead) / m
    inv_std = 1.0 / xp.sqrt(var + eps)
    return fused(xp, "scale_dev", view, mean, inv_std), mean, var, inv_std


def backward(xp, dy, xhat, lead: int, gamma, inv_std, input_stats: bool):
    """(dx, sum dy, sum dy * xhat) over the ``lead`` leading axes: two reductions and one
    elementwise pass; ``input_stats=False`` (running statistics): dx = gamma * inv_std * dy."""
    m = math.prod(dy.shape[:lead])
    sum_dy = leading_sum(xp, dy, lead)
    sum_dyx = leading_sum(xp, dy * xhat, lead)
    scale = inv_std if gamma is None else gamma * inv_std
    if not input_stats or dy.size == 0:
        return dy * scale, sum_dy, sum_dyx
    return fused(xp, "bn_dx", dy, xhat, sum_dy / m, sum_dyx / m, scale), sum_dy, sum_dyx
