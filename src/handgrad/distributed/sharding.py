"""Each rank's share of a batch: contiguous rows, sizes that differ by at most one.

With ``count = q * K + r`` examples over ``K`` ranks, ranks ``0 .. r - 1`` take ``q + 1``
rows and the others ``q``; rank ``k`` starts at ``k * q + min(k, r)``. Concatenating the
shares in rank order gives the batch back, so a quantity summed over ranks equals the
one-process sum over the batch (up to the order of the additions).
"""

from __future__ import annotations

from .._checks import describe, is_int
from . import comm


def _count(op, value):
    if not is_int(value) or value < 0:
        raise (TypeError if not is_int(value) else ValueError)(
            f"{op}: 'count' must be an int >= 0 (the examples in the global batch); "
            f"received {describe(value)}")
    return int(value)


def _where(op, rank, size):
    size = comm.size() if size is None else size
    rank = comm.rank() if rank is None else rank
    if not is_int(size) or size < 1:
        raise ValueError(f"{op}: 'size' must be an int >= 1; received {describe(size)}")
    if not is_int(rank) or not 0 <= rank < size:
        raise ValueError(f"{op}: 'rank' must be an int in [0, {size}); received "
                         f"{describe(rank)}")
    return int(rank), int(size)


def shard_sizes(count, size=None) -> list:
    """Every rank's number of rows of ``count`` examples (``size`` ranks, default: the
    job's), in rank order."""
    count = _count("shard_sizes", count)
    _, size = _where("shard_sizes", 0, size)
    q, r = divmod(count, size)
    return [q + 1 if k < r else q for k in range(size)]


def shard(count, rank=None, size=None) -> slice:
    """The rows ``start:stop`` that rank ``rank`` (default: this process) of ``size``
    (default: the job's) takes of a batch of ``count`` examples (see the module
    docstring); an empty slice when ``count < size`` leaves it none."""
    count = _count("shard", count)
    rank, size = _where("shard", rank, size)
    q, r = divmod(count, size)
    start = rank * q + min(rank, r)
    return slice(start, start + q + (1 if rank < r else 0))
