"""Embedding bags: the rows of a table named by bags of ids, reduced per bag, as
``F.embedding_bag``.

The ids are either a (B, L) array (B bags of L ids) or a flat (n,) array cut into bags
by ``offsets`` (bag b is ``indices[offsets[b]:offsets[b + 1]]``, the last one running to
the end; with ``include_last_offset`` that end is ``offsets[-1]``, which must be n). An
id equal to ``padding_idx`` is left out of its bag (and of the mean's count); an empty
bag gives zeros. With the kept positions j, their ids i_j, bags b_j and, for "sum", optional
weights s_j (``per_sample_weights``)::

    sum:   y[b] = sum_{j in b} s_j W[i_j]          dW[i_j] += s_j dy[b_j]
                                                   ds_j = <W[i_j], dy[b_j]>
    mean:  y[b] = (1 / |b|) sum_{j in b} W[i_j]    dW[i_j] += dy[b_j] / |b_j|
    max:   y[b, d] = max_{j in b} W[i_j, d]        dW[i*, d] += dy[b, d]

with i* the id of the first position reaching the maximum of feature d (torch's
strict ``>`` scan). The sums and their backward scatter-adds run through the sorted
pairwise scatter of :mod:`.embedding` (no loop over bags); the max is a
``maximum.reduceat`` over the non-empty bags, its winner a ``minimum.reduceat`` of the
positions that reach it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import array_module, choice, describe, float_array, upstream_grad
from .._hyper import flag
from ._args.cache import Cache, check_cache
from .declare import declare, exports
from .embedding import (
    _scatter_add_rows,
    check_ids,
    check_max_norm,
    check_padding_idx,
    embedding_renorm_,
)

EMBEDDING_BAG_MODES = ("sum", "mean", "max")


@dataclass(frozen=True)
class EmbeddingBagCache(Cache):
    """What :func:`embedding_bag_backward` needs (the loop twin stores the same): the
    kept positions ``kept`` (into the flat ids), their ``ids`` and ``bags``, their
    ``scale`` in their bag's sum (sum, mean; None: all one), the ``winners`` (B, D)
    (max: the winning id per bag and feature, -1 for an empty bag), the looked-up
    ``rows`` (only with per-sample weights) and the shapes."""

    kept: object
    ids: object
    bags: object
    scale: object
    winners: object
    rows: object
    mode: str
    num_bags: int
    weight_shape: tuple
    indices_shape: tuple
    dtype: object


@dataclass(frozen=True)
class Bags:
    """Validated arguments (shared with the loop twin): the weight, the flat ids, the bag
    of each flat position, the bag count, the flat
    per-sample weights (or None), the padding row (or None)."""

    weight: object
    flat: object
    bag_of: object
    num_bags: int
    weights: object
    padding_idx: object
    mode: str
    indices_shape: tuple


def _check_offsets(op, offsets, n, include_last_offset):
    """The bag starts: ``offsets`` as an int array starting at 0, non-decreasing, within
    [0, n] (ending at n with ``include_last_offset``, then dropped)."""
    if not (hasattr(offsets, "dtype") and hasattr(offsets, "shape")):
        if not isinstance(offsets, (list, tuple)):
            raise TypeError(f"{op}: 'offsets' must be a 1-D integer array (one start per bag) "
                            f"for 1-D 'indices'; received {describe(offsets)}")
        offsets = np.asarray(offsets, dtype=np.int64)
    if offsets.dtype.kind not in "iu":
        raise TypeError(f"{op}: 'offsets' must have an integer dtype (int32, int64, ...); "
                        f"received {describe(offsets)}")
    if offsets.ndim != 1 or offsets.size == 0:
        raise ValueError(f"{op}: 'offsets' must be a non-empty 1-D integer array; received "
                         f"{describe(offsets)}")
    if int(offsets[0]) != 0:
        raise ValueError(f"{op}: 'offsets' must start at 0 (the first bag starts at the first "
                         f"index); received offsets[0] = {int(offsets[0])}")
    drops = np.flatnonzero(np.diff(offsets) < 0)
    if drops.size:
        k = int(drops[0])
        raise ValueError(f"{op}: 'offsets' must be sorted (non-decreasing); received "
                         f"offsets[{k}] = {int(offsets[k])} > offsets[{k + 1}] = "
                         f"{int(offsets[k + 1])}")
    if int(offsets[-1]) > n:
        raise ValueError(f"{op}: 'offsets' must be <= the number of indices {n}; received "
                         f"offsets[-1] = {int(offsets[-1])}")
    if include_last_offset:
        if int(offsets[-1]) != n:  # torch's bags then differ between its CPU paths
            raise ValueError(f"{op}: with include_last_offset, the last of 'offsets' must be "
                             f"the number of indices {n} (CSR); received {int(offsets[-1])}")
        return offsets[:-1]
    return offsets


def prepare_embedding_bag(op, weight, indices, offsets, mode, per_sample_weights, padding_idx,
                          include_last_offset, max_norm, norm_type):
    """The checked arguments as :class:`Bags`; renormalizes ``weight`` in place first
    when ``max_norm`` is given (as torch)."""
    weight = float_array(op, "weight", weight, 2, "(num_embeddings, embedding_dim)")
    mode = choice(op, "mode", mode, EMBEDDING_BAG_MODES)
    include_last_offset = flag(op, "include_last_offset", include_last_offset)
    max_norm, norm_type = check_max_norm(op, max_norm, norm_type)
    padding_idx = check_padding_idx(op, padding_idx, weight.shape[0])
    indices = check_ids(op, indices, weight.shape[0], "indices")
    xp = array_module(weight)
    if indices.ndim == 2:
        if offsets is not None:
            raise ValueError(f"{op}: 'offsets' must be None for 2-D 'indices' (B bags of L "
                             f"ids); received {describe(offsets)}")
        num_bags, length = indices.shape
        bag_of = xp.repeat(xp.arange(num_bags), length)
    elif indices.ndim == 1:
        if offsets is None:
            raise ValueError(f"{op}: 1-D 'indices' need 'offsets' (the start of each bag); "
                             "received None")
        starts = _check_offsets(op, offsets, indices.size, include_last_offset)
        num_bags = int(starts.size)
        bag_of = xp.searchsorted(starts, xp.arange(indices.size), side="right") - 1
    else:
        raise ValueError(f"{op}: 'indices' must be 1-D (with 'offsets') or 2-D (B, L); "
                         f"received {describe(indices)}")
    weights = None
    if per_sample_weights is not None:
        if mode != "sum":
            raise ValueError(f"{op}: 'per_sample_weights' need mode='sum'; received "
                             f"mode={mode!r}")
        weights = float_array(op, "per_sample_weights", per_sample_weights, indices.ndim)
        if weights.shape != indices.shape or weights.dtype != weight.dtype:
            raise ValueError(f"{op}: 'per_sample_weights' must have the shape of 'indices' "
                             f"{tuple(indices.shape)} and the dtype of 'weight' {weight.dtype}; "
                             f"received {describe(weights)}")
        weights = weights.reshape(-1)
    flat = indices.reshape(-1)
    if max_norm is not None:
        embedding_renorm_(weight, flat, max_norm, norm_type)
    return Bags(weight, flat, bag_of, num_bags, weights, padding_idx, mode,
                tuple(indices.shape))


def _segments(xp, bags):
    """The first position of each run of equal (sorted) bags and each position's run."""
    first = xp.ones(bags.size, dtype=bool)
    first[1:] = bags[1:] != bags[:-1]
    return xp.flatnonzero(first), xp.cumsum(first) - 1


def _segment_reduce(xp, ufunc, values, starts, run, fill):
    """``ufunc`` (maximum or minimum) over each run of ``values`` (n, D) -> (S, D):
    ``ufunc.reduceat`` on NumPy; on CuPy (no ``reduceat``) the runs are laid out in a
    padded (S, L_max, D) block filled with ``fill`` and reduced along axis 1."""
    if xp is np:
        return ufunc.reduceat(values, starts, axis=0)
    position = xp.arange(run.size) - starts[run]
    longest = int(position.max()) + 1
    block = xp.full((starts.size, longest, values.shape[1]), fill, dtype=values.dtype)
    block[run, position] = values
    return block.max(axis=1) if ufunc is np.maximum else block.min(axis=1)


def embedding_bag(weight, indices, offsets=None, mode="mean", per_sample_weights=None,
                  padding_idx=None, include_last_offset=False, max_norm=None, norm_type=2.0):
    """Per-bag sum, mean or max of rows of ``weight`` (V, D): y (B, D) (see the module).

    ``indices``: (B, L) ids, or (n,) ids with ``offsets`` (B,) (or (B + 1,) with
    ``include_last_offset``); ``per_sample_weights``: the shape of ``indices``, mode
    "sum" only; ``max_norm``: rescale the used rows in place first (not differentiated).
    Returns ``(y, cache)`` for :func:`embedding_bag_backward`.
    """
    a = prepare_embedding_bag("embedding_bag", weight, indices, offsets, mode,
                              per_sample_weights, padding_idx, include_last_offset, max_norm,
                              norm_type)
    xp = array_module(a.weight)
    kept = xp.arange(a.flat.size) if a.padding_idx is None else \
        xp.flatnonzero(a.flat != a.padding_idx)
    ids, bags = a.flat[kept], a.bag_of[kept]
    rows = xp.take(a.weight, ids, axis=0)
    dim = a.weight.shape[1]
    scale = winners = None
    if a.mode == "max":
        y = xp.zeros((a.num_bags, dim), dtype=a.weight.dtype)
        winners = xp.full((a.num_bags, dim), -1, dtype=np.int64)
        if kept.size:
            starts, run = _segments(xp, bags)
            top = _segment_reduce(xp, np.maximum, rows, starts, run, -np.inf)
            reach = (rows == top[run]) | xp.isnan(top[run])
            first = xp.where(reach, xp.arange(kept.size)[:, None], kept.size)
            y[bags[starts]] = top
            winners[bags[starts]] = ids[_segment_reduce(xp, np.minimum, first, starts, run,
                                                        kept.size)]
    else:
        if a.weights is not None:
            scale = a.weights[kept]
        y = _scatter_add_rows(xp, bags, rows if scale is None else rows * scale[:, None],
                              a.num_bags)
        if a.mode == "mean":
            counts = xp.bincount(bags, minlength=a.num_bags)
            y /= xp.maximum(counts, 1)[:, None].astype(y.dtype)
            scale = (1 / counts[bags]).astype(y.dtype)
    cache = EmbeddingBagCache("embedding_bag", kept, ids, bags, scale, winners,
                              rows if a.weights is not None else None, a.mode, a.num_bags,
                              tuple(a.weight.shape), a.indices_shape, a.weight.dtype)
    return y, cache


def open_embedding_bag_cache(dy, cache):
    """``(cache, dy)`` checked for :func:`embedding_bag_backward` and its loop twin."""
    op = "embedding_bag_backward"
    cache = check_cache(op, cache, "embedding_bag", EmbeddingBagCache)
    dy = upstream_grad(op, dy, (cache.num_bags, cache.weight_shape[1]), cache.dtype)
    return cache, dy


def embedding_bag_backward(dy, cache):
    """Gradients of :func:`embedding_bag`: dy (B, D) -> (dweight (V, D),
    dper_sample_weights (indices' shape) or None); the formulas are in the module doc."""
    cache, dy = open_embedding_bag_cache(dy, cache)
    xp = array_module(dy)
    num_rows, dim = cache.weight_shape
    if cache.mode == "max":
        won = cache.winners >= 0
        keys = (cache.winners * dim + xp.arange(dim))[won]
        dweight = _scatter_add_rows(xp, keys, dy[won][:, None], num_rows * dim)
        return dweight.reshape(num_rows, dim), None
    spread = xp.take(dy, cache.bags, axis=0)
    if cache.scale is not None:
        spread = spread * cache.scale[:, None]
    dweight = _scatter_add_rows(xp, cache.ids, spread, num_rows)
    if cache.rows is None:
        return dweight, None
    dweights = xp.zeros(int(np.prod(cache.indices_shape)), dtype=dy.dtype)
    dweights[cache.kept] = xp.einsum("jd,jd->j", cache.rows, xp.take(dy, cache.bags, axis=0))
    return dweight, dweights.reshape(cache.indices_shape)


from .samples.embedding_bag import EMBEDDING_BAG, torch_embedding_bag  # noqa: E402

declare(embedding_bag, embedding_bag_backward, torch=torch_embedding_bag,
        samples=EMBEDDING_BAG, grads=("weight", "per_sample_weights"))
__all__ = exports(__name__, globals())
