"""Naive embedding: a loop over the ids, copying rows forward and adding rows back.

The readable specification of :mod:`handgrad.ops.embedding`, with the same
signatures and the same argument checks.
"""

from __future__ import annotations

import numpy as np

from ..declare import exports
from ..embedding import EmbeddingCache, open_embedding_cache, prepare_embedding


def embedding(ids, weight, padding_idx=None):
    """Loop twin of :func:`handgrad.ops.embedding`: y[i...] = weight[ids[i...]]."""
    ids, weight, padding_idx = prepare_embedding("embedding", ids, weight, padding_idx)
    y = np.zeros((*ids.shape, weight.shape[1]), dtype=weight.dtype)
    for position in np.ndindex(*ids.shape):
        y[position] = weight[ids[position]]
    return y, EmbeddingCache("embedding", ids, tuple(weight.shape), weight.dtype, padding_idx)


def embedding_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.embedding_backward`: dweight[ids[i...]] += dy[i...],
    then the padding row is set to zero."""
    cache, dy = open_embedding_cache(dy, cache)
    dweight = np.zeros(cache.weight_shape, dtype=dy.dtype)
    for position in np.ndindex(*cache.ids.shape):
        dweight[cache.ids[position]] += dy[position]
    if cache.padding_idx is not None:
        dweight[cache.padding_idx] = 0
    return dweight


__all__ = exports(__name__, globals())
