"""Embedding lookup: rows of a table gathered by integer ids, as ``F.embedding``.

With ids of any shape and a table ``weight`` (V, D)::

    y[i...]  = weight[ids[i...]]                       (*ids.shape, D)
    dweight[v] = sum over positions i with ids[i] == v of dy[i]
    dweight[padding_idx] = 0                           (the padding row never learns)

There is no gradient for the integer ids. The backward is a scatter-add of the
M = ids.size rows of ``dy`` into V rows. It is done without ``np.add.at``
(slow, NumPy-only) and without ``add.reduceat`` along the row axis (measured
slower than ``add.at`` for (M, D) rows): the ids are sorted once (stable, so the
result is deterministic), then each round adds the rows of every run of equal
ids in pairs (ranks 2j and 2j+1), which halves every run; runs of length one
are written to their row of ``dweight`` and leave. That is ceil(log2(largest
count)) + 1 vectorized rounds and O(M log M + M D) work, with pairwise (more
accurate) summation. A one-hot matmul (V x M times M x D) would cost V/log(M)
times more arithmetic, and is only competitive for tiny vocabularies.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from .._checks import array_module, describe, float_array, is_int, upstream_grad
from ._args.cache import Cache, check_cache
from .declare import declare, exports


@dataclass(frozen=True)
class EmbeddingCache(Cache):
    """The ids of an :func:`embedding` call and the table's shape and dtype (also the
    cache of the loop twin, which stores the same things)."""

    ids: object
    weight_shape: tuple
    dtype: object
    padding_idx: object


def check_ids(op, ids, num_embeddings, name="ids"):
    """``ids`` (the argument ``name``) as an integer array with every entry in
    [0, num_embeddings)."""
    if not (hasattr(ids, "dtype") and hasattr(ids, "shape")):
        if not isinstance(ids, (list, tuple)) and not is_int(ids):
            raise TypeError(f"{op}: '{name}' must be an integer array; received {describe(ids)}")
        ids = np.asarray(ids)
    if ids.dtype.kind not in "iu":
        raise TypeError(f"{op}: '{name}' must have an integer dtype (int32, int64, ...); received "
                        f"dtype {ids.dtype}")
    if ids.size:
        xp = array_module(ids)
        bad = xp.flatnonzero((ids < 0) | (ids >= num_embeddings))
        if bad.size:
            first = int(bad[0])
            where = tuple(int(i) for i in np.unravel_index(first, ids.shape))
            raise ValueError(f"{op}: '{name}' must be in [0, {num_embeddings}) (num_embeddings = "
                             f"{num_embeddings}); received id {int(ids.reshape(-1)[first])} at "
                             f"index {where} ({int(bad.size)} out of range)")
    return ids


def check_padding_idx(op, padding_idx, num_embeddings):
    """None, or an int in [-V, V) (negative counts from the end, as PyTorch) -> [0, V)."""
    if padding_idx is None:
        return None
    if not is_int(padding_idx):
        raise TypeError(f"{op}: 'padding_idx' must be an int or None; received "
                        f"{describe(padding_idx)}")
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise ValueError(f"{op}: 'padding_idx' must be in [{-num_embeddings}, {num_embeddings}) "
                         f"(num_embeddings = {num_embeddings}); received {padding_idx}")
    return int(padding_idx) % num_embeddings


def check_max_norm(op, max_norm, norm_type):
    """``(max_norm, norm_type)`` as floats: max_norm None or a finite number > 0, norm_type a
    number > 0 (``inf`` allowed)."""
    for name, value in (("max_norm", max_norm), ("norm_type", norm_type)):
        if value is None and name == "max_norm":
            continue
        if not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{op}: '{name}' must be a positive number"
                            f"{' or None' if name == 'max_norm' else ''}; received "
                            f"{describe(value)}")
        if not value > 0 or (name == "max_norm" and not np.isfinite(value)):
            raise ValueError(f"{op}: '{name}' must be a {'finite ' * (name == 'max_norm')}"
                             f"number > 0; received {value!r}")
    return (None if max_norm is None else float(max_norm)), float(norm_type)


def embedding_renorm_(weight, ids, max_norm, norm_type=2.0):
    """Rescale IN PLACE the rows of ``weight`` (V, D) named by ``ids`` whose ``norm_type``
    norm exceeds ``max_norm`` (torch's ``embedding_renorm_``)::

        n = ||weight[v]||_p;  weight[v] *= max_norm / (n + 1e-7)   if n > max_norm

    Each distinct id is rescaled once. Not differentiated: the lookup that follows sees
    the rescaled table as constant. Returns ``weight``.
    """
    op = "embedding_renorm_"
    max_norm, norm_type = check_max_norm(op, max_norm, norm_type)
    if max_norm is None:
        raise TypeError(f"{op}: 'max_norm' must be a positive number; received None")
    weight = float_array(op, "weight", weight, 2, "(num_embeddings, embedding_dim)")
    ids = check_ids(op, ids, weight.shape[0])
    xp = array_module(weight)
    rows = xp.unique(ids.reshape(-1))
    norms = xp.linalg.norm(weight[rows], ord=norm_type, axis=1)
    big = norms > max_norm
    rows = rows[big]
    scale = (max_norm / (norms[big] + 1e-7)).astype(weight.dtype)
    weight[rows] *= scale[:, None]
    return weight


def prepare_embedding(op, ids, weight, padding_idx):
    """Validated ``(ids, weight, padding_idx)``, shared with the loop twin."""
    weight = float_array(op, "weight", weight, 2, "(num_embeddings, embedding_dim)")
    ids = check_ids(op, ids, weight.shape[0])
    return ids, weight, check_padding_idx(op, padding_idx, weight.shape[0])


def embedding(ids, weight, padding_idx=None):
    """y = weight[ids]: ids (...) integers in [0, V), weight (V, D) -> y (..., D).

    ``padding_idx`` (an int in [-V, V) or None) marks a row that gets no gradient; the
    forward returns its current values, as PyTorch. Returns ``(y, cache)`` for
    :func:`embedding_backward`.
    """
    ids, weight, padding_idx = prepare_embedding("embedding", ids, weight, padding_idx)
    xp = array_module(weight)
    y = xp.take(weight, ids, axis=0)
    return y, EmbeddingCache("embedding", ids, tuple(weight.shape), weight.dtype, padding_idx)


def _scatter_add_rows(xp, ids, rows, num_rows):
    """out[v] = sum of rows[i] over ids[i] == v, out (num_rows, D); see the module doc."""
    out = xp.zeros((num_rows, rows.shape[1]), dtype=rows.dtype)
    if ids.size == 0:
        return out
    order = xp.argsort(ids, kind="stable")
    keys, values = ids[order], xp.take(rows, order, axis=0)
    while keys.size:
        n = keys.size
        first = xp.ones(n, dtype=bool)
        first[1:] = keys[1:] != keys[:-1]
        starts = xp.flatnonzero(first)
        lengths = xp.diff(xp.append(starts, n))
        single = starts[lengths == 1]
        out[keys[single]] = values[single]
        run = xp.cumsum(first) - 1  # the run of each position
        run_length, rank = lengths[run], xp.arange(n) - starts[run]
        left = xp.flatnonzero((run_length > 1) & (rank % 2 == 0))  # ranks 0, 2, 4, ...
        has_right = rank[left] + 1 < run_length[left]  # the last of an odd run has none
        summed = values[left]
        summed[has_right] += values[left[has_right] + 1]
        keys, values = keys[left], summed
    return out


def open_embedding_cache(dy, cache):
    """``(cache, dy)`` checked for :func:`embedding_backward` and its loop twin."""
    op = "embedding_backward"
    cache = check_cache(op, cache, "embedding", EmbeddingCache)
    return cache, upstream_grad(op, dy, (*cache.ids.shape, cache.weight_shape[1]), cache.dtype)


def embedding_backward(dy, cache):
    """Gradient of :func:`embedding` for the table: dy (*ids.shape, D) -> dweight (V, D).

    dweight[v] = sum of dy over the positions whose id is v; dweight[padding_idx] = 0.
    There is no gradient for the ids.
    """
    cache, dy = open_embedding_cache(dy, cache)
    num_rows, dim = cache.weight_shape
    xp = array_module(dy)
    dweight = _scatter_add_rows(xp, cache.ids.reshape(-1), dy.reshape(cache.ids.size, dim),
                                num_rows)
    if cache.padding_idx is not None:
        dweight[cache.padding_idx] = 0
    return dweight


from .declare import Fixed, Sample  # noqa: E402  (the declaration's samples)

_IDS = Fixed(np.array([[1, 0, 4], [2, 2, 3]]))  # 2 appears twice: its gradients add up
declare(embedding, embedding_backward,
        torch=lambda F, ids, weight, padding_idx=None: F.embedding(ids, weight, padding_idx),
        samples=(Sample((_IDS, (5, 3))),
                 Sample((_IDS, (5, 3)), {"padding_idx": 2}, derivative=False)))
__all__ = exports(__name__, globals())
