"""Naive embedding bags: a loop over the bags and their ids.

The readable specification of :mod:`handgrad.ops.embedding_bag`, with the same
signatures and the same argument checks.
"""

from __future__ import annotations

import numpy as np

from ..declare import exports
from ..embedding_bag import EmbeddingBagCache, open_embedding_bag_cache, prepare_embedding_bag


def embedding_bag(weight, indices, offsets=None, mode="mean", per_sample_weights=None,
                  padding_idx=None, include_last_offset=False, max_norm=None, norm_type=2.0):
    """Loop twin of :func:`handgrad.ops.embedding_bag`."""
    a = prepare_embedding_bag("embedding_bag", weight, indices, offsets, mode,
                              per_sample_weights, padding_idx, include_last_offset, max_norm,
                              norm_type)
    dim = a.weight.shape[1]
    y = np.zeros((a.num_bags, dim), dtype=a.weight.dtype)
    winners = np.full((a.num_bags, dim), -1, dtype=np.int64)
    kept, scale, counts = [], [], np.zeros(a.num_bags, dtype=np.int64)
    for j in range(a.flat.size):
        b, i = int(a.bag_of[j]), int(a.flat[j])
        if i == a.padding_idx:
            continue
        kept.append(j)
        counts[b] += 1
        s = 1.0 if a.weights is None else a.weights[j]
        scale.append(s)
        for d in range(dim):
            if a.mode == "max":
                if winners[b, d] < 0 or a.weight[i, d] > y[b, d]:
                    y[b, d], winners[b, d] = a.weight[i, d], i
            else:
                y[b, d] += s * a.weight[i, d]
    kept = np.array(kept, dtype=np.int64)
    bags, ids = a.bag_of[kept], a.flat[kept]
    scale = np.array(scale, dtype=y.dtype)
    if a.mode == "mean":
        for b in range(a.num_bags):
            y[b] /= max(counts[b], 1)
        scale = (1 / counts[bags]).astype(y.dtype)
    rows = a.weight[ids] if a.weights is not None else None
    cache = EmbeddingBagCache("embedding_bag", kept, ids, bags, scale,
                              winners if a.mode == "max" else None, rows, a.mode, a.num_bags,
                              tuple(a.weight.shape), a.indices_shape, a.weight.dtype)
    return y, cache


def embedding_bag_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.embedding_bag_backward`."""
    cache, dy = open_embedding_bag_cache(dy, cache)
    dweight = np.zeros(cache.weight_shape, dtype=dy.dtype)
    if cache.mode == "max":
        for b in range(cache.num_bags):
            for d in range(cache.weight_shape[1]):
                if cache.winners[b, d] >= 0:
                    dweight[cache.winners[b, d], d] += dy[b, d]
        return dweight, None
    dweights = np.zeros(int(np.prod(cache.indices_shape)), dtype=dy.dtype)
    for k, (j, i, b) in enumerate(zip(cache.kept, cache.ids, cache.bags)):
        dweight[i] += cache.scale[k] * dy[b]
        if cache.rows is not None:
            dweights[j] = np.dot(cache.rows[k], dy[b])
    if cache.rows is None:
        return dweight, None
    return dweight, dweights.reshape(cache.indices_shape)


__all__ = exports(__name__, globals())
