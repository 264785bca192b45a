"""The pseudo-log-likelihood of an RBM (:class:`handgrad.zoo.RBM`), vectorized.

``PLL(v) = sum_i log p(v_i | v_-i)``, and since ``p(v) ~ exp(-F(v))``,
``p(v_i | v_-i) = sigmoid(F(v~i) - F(v))`` with ``v~i`` = ``v`` with unit ``i`` flipped to
``1 - v_i``. Flipping unit ``i`` moves the hidden pre-activations ``a = c + v W`` by
``delta_i W[i]`` (``delta_i = 1 - 2 v_i``), so for every unit at once::

    F(v~i) - F(v) = -delta_i b_i - sum_j [softplus(a_j + delta_i W_ij) - softplus(a_j)]

an (N, V, H) computation, done in blocks of examples.
"""

from __future__ import annotations

import numpy as np

from ..ops import special

BLOCK = 1 << 16  # examples x V x H values per block (about 0.5 MB in float64)


def log_sigmoid(x):
    """log sigmoid(x) = -softplus(-x), without overflow."""
    return -special.softplus(np, -x)


def flip_gaps(parameters, v, index=None):
    """``F(v~i) - F(v)``: for every unit (N, V), or for unit ``index[n]`` of example n
    (N,). ``parameters``: the RBM's ``{"W", "b", "c"}``; ``v``: (N, V)."""
    weights, b = parameters["W"], parameters["b"]
    pre, delta = parameters["c"] + v @ weights, 1 - 2 * v
    base = special.softplus(np, pre).sum(1)
    if index is not None:
        step = delta[np.arange(len(v)), index]
        moved = special.softplus(np, pre + step[:, None] * weights[index]).sum(1)
        return -step * b[index] - (moved - base)
    gaps = np.empty_like(v)
    rows = max(1, BLOCK // max(weights.size, 1))
    for start in range(0, len(v), rows):
        part = slice(start, start + rows)
        moved = special.softplus(np, pre[part, None, :] + delta[part, :, None] * weights)
        gaps[part] = -delta[part] * b - (moved.sum(-1) - base[part, None])
    return gaps


def pseudo_log_likelihood(parameters, v, index=None):
    """Per example (N,): the exact ``sum_i log sigmoid(F(v~i) - F(v))``, or with
    ``index`` (N,) the one-unit estimate ``V log sigmoid(F(v~i) - F(v))`` at ``i =
    index[n]`` (scikit-learn's ``score_samples``; its mean over uniform ``i`` is exact)."""
    if index is None:
        return log_sigmoid(flip_gaps(parameters, v)).sum(1)
    return v.shape[1] * log_sigmoid(flip_gaps(parameters, v, index))
