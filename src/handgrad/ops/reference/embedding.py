"""Naive embedding: a loop over the ids, copying rows forward and adding rows back.

The readable specification of :mod:`handgrad.ops.embedding`, with the same
signatures and the same argument checks.
"""

from __future__ import annotations

import numpy as np

from ..embedding import prepare_embedding


def embedding(ids, weight, padding_idx=None):
    """Loop twin of :func:`handgrad.ops.embedding`: y[i...] = weight[ids[i...]]."""
    ids, weight, padding_idx = prepare_embedding("embedding", ids, weight, padding_idx)
    y = np.zeros((*ids.shape, weight.shape[1]), dtype=weight.dtype)
    for position in np.ndindex(*ids.shape):
        y[position] = weight[ids[position]]
    return y, (ids, weight.shape, padding_idx)


def embedding_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.embedding_backward`: dweight[ids[i...]] += dy[i...],
    then the padding row is set to zero."""
    ids, weight_shape, padding_idx = cache
    dweight = np.zeros(weight_shape, dtype=dy.dtype)
    for position in np.ndindex(*ids.shape):
        dweight[ids[position]] += dy[position]
    if padding_idx is not None:
        dweight[padding_idx] = 0
    return dweight
