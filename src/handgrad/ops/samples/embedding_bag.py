"""Embedding-bag samples and torch counterpart (``F.embedding_bag`` takes the ids first)."""

from __future__ import annotations

import numpy as np

from ..declare import Fixed, Sample


def torch_embedding_bag(F, weight, indices, offsets=None, mode="mean", per_sample_weights=None,
                        padding_idx=None, include_last_offset=False, max_norm=None,
                        norm_type=2.0):
    """``F.embedding_bag`` with handgrad's argument order."""
    return F.embedding_bag(indices, weight, offsets, max_norm, norm_type, mode=mode,
                           per_sample_weights=per_sample_weights,
                           include_last_offset=include_last_offset, padding_idx=padding_idx)


_GRID = Fixed(np.array([[1, 0, 4, 1], [2, 2, 3, 0], [3, 3, 3, 3]]))  # ids repeat in a bag
_FLAT = Fixed(np.array([1, 4, 4, 0, 2, 3, 1, 2]))
_STARTS = Fixed(np.array([0, 3, 3, 5]))  # bag 1 is empty
_CSR = Fixed(np.array([0, 2, 2, 6, 8]))  # include_last_offset: the end of the last bag

EMBEDDING_BAG = (
    Sample(((5, 3), _GRID), {"mode": "mean"}),
    Sample(((5, 3), _GRID), {"mode": "sum"}),
    Sample(((5, 3), _GRID), {"mode": "max"}),
    Sample(((5, 3), _FLAT, _STARTS), {"mode": "max"}),
    Sample(((5, 3), _FLAT, _STARTS), {"mode": "mean", "padding_idx": 3}),
    Sample(((5, 3), _FLAT, _STARTS), {"mode": "max", "padding_idx": -1}),
    Sample(((5, 3), _FLAT, _CSR), {"mode": "sum", "include_last_offset": True}),
    Sample(((5, 3), _FLAT, _STARTS, Fixed("sum"), (8,))),
    Sample(((5, 3), _FLAT, _CSR, Fixed("sum"), (8,)), {"include_last_offset": True,
                                                      "padding_idx": 2}),
)
