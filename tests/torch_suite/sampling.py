"""Adapters of embedding_bag, grid_sample (2-D; the 5-D volumetric samples have no
handgrad kernel) and one_hot (not differentiable: its output compared exactly)."""

from __future__ import annotations

import numpy as np

from .helpers import Unsupported, first, kernel, last, named, op_row
from .misc import _grads

BAG = ("input", "indices", "offsets", "max_norm", "norm_type", "scale_grad_by_freq", "mode",
       "sparse", "per_sample_weights", "include_last_offset", "padding_idx")


def embedding_bag(sample, *arrays):
    """op_db's row calls ``F.embedding_bag(indices, weight, ...)`` as ``op(weight,
    indices, ...)``: ``input`` is the weight."""
    v, leaves = named(sample, BAG, arrays)
    if v.get("scale_grad_by_freq"):
        raise Unsupported("scale_grad_by_freq")
    keywords = {k: v[k] for k in ("offsets", "mode", "per_sample_weights", "padding_idx",
                                  "include_last_offset", "max_norm", "norm_type") if k in v}
    if keywords.get("max_norm") is not None:
        raise Unsupported("max_norm (rescales the weight in place)")
    keywords.pop("max_norm", None)
    keywords.pop("norm_type", None)
    y, back = kernel("embedding_bag", v["input"], np.asarray(v["indices"]), **keywords)
    return y, lambda dy: _grads(back, dy, leaves, ("input", "per_sample_weights"))


def grid_sample(sample, *arrays):
    v, leaves = named(sample, ("input", "grid", "mode", "padding_mode", "align_corners"),
                      arrays)
    if v["input"].ndim != 4:
        raise Unsupported("volumetric (5-D) grid_sample")
    keywords = {k: v[k] for k in ("mode", "padding_mode", "align_corners")
                if v.get(k) is not None}
    y, back = kernel("grid_sample", last(v["input"]), v["grid"], **keywords)

    def backward(dy):
        dx, dgrid = back(last(dy))
        return _grads(lambda _: (first(dx), dgrid), dy, leaves, ("input", "grid"))

    return first(y), backward


OPS = {"embedding_bag": op_row(embedding_bag), "grid_sample": op_row(grid_sample)}
