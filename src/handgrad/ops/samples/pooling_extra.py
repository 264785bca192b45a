"""Adaptive pooling and unpooling samples and torch counterparts."""

from __future__ import annotations

import math

import numpy as np

from ..declare import Fixed, Sample
from . import channels_first, channels_last


def torch_adaptive(kind):
    """The counterpart of ``adaptive_<kind>_pool{1,2,3}d`` on moved channels (the values
    only: the indices are checked in the tests)."""

    def counterpart(F, x, output_size, return_indices=False):
        fn = getattr(F, f"adaptive_{kind}_pool{x.ndim - 2}d")
        return channels_last(fn(channels_first(x), output_size))

    counterpart.__name__ = f"torch_adaptive_{kind}_pool"
    return counterpart


def torch_unpool(F, x, indices, kernel_size, stride=None, padding=0, output_size=None):
    """``F.max_unpool{1,2,3}d`` on moved channels."""
    fn = getattr(F, f"max_unpool{x.ndim - 2}d")
    return channels_last(fn(channels_first(x), channels_first(indices), kernel_size, stride,
                            padding, output_size))


def torch_lp_pool(F, x, norm_type, kernel_size, stride=None, ceil_mode=False):
    """``F.lp_pool{1,2}d`` on moved channels."""
    fn = getattr(F, f"lp_pool{x.ndim - 2}d")
    return channels_last(fn(channels_first(x), norm_type, kernel_size, stride, ceil_mode))


def torch_min_pool(F, x, kernel_size, stride=None, padding=0, **kwargs):
    """-F.max_pool{1,2}d(-x) on moved channels (torch has no min pooling)."""
    if kwargs.pop("return_indices", False):
        raise NotImplementedError("the indices are checked in the tests")
    fn = getattr(F, f"max_pool{x.ndim - 2}d")
    return -channels_last(fn(-channels_first(x), kernel_size, stride, padding, **kwargs))


def distinct_indices(x_shape, out_spatial, seed=0):
    """int64 indices of shape ``x_shape``: per (n, c), distinct random flat positions of
    an output plane ``out_spatial`` (no two inputs land on one output)."""
    rng = np.random.default_rng(seed)
    n, c, count = x_shape[0], x_shape[-1], math.prod(x_shape[1:-1])
    picks = [rng.permutation(math.prod(out_spatial))[:count] for _ in range(n * c)]
    return np.stack(picks).reshape(n, c, *x_shape[1:-1]).transpose(
        0, *range(2, len(x_shape)), 1).copy()


ADAPTIVE_1D = (
    Sample(((2, 10, 3),), {"output_size": 4}),
    Sample(((2, 7, 2),), {"output_size": 3}),  # overlapping bins
    Sample(((1, 5, 2),), {"output_size": 8}),  # more outputs than inputs
    Sample(((2, 9, 2),), {"output_size": 4}, ties=True),
)
ADAPTIVE_2D = (
    Sample(((2, 7, 9, 2),), {"output_size": (3, 4)}),
    Sample(((2, 5, 6, 2),), {"output_size": (None, 4)}),
    Sample(((2, 4, 5, 3),), {"output_size": 1}),
    Sample(((1, 3, 4, 2),), {"output_size": (5, 6)}),
    Sample(((2, 6, 5, 2),), {"output_size": (4, 3)}, ties=True),
)
ADAPTIVE_3D = (
    Sample(((2, 5, 6, 7, 2),), {"output_size": (2, 3, 4)}),  # overlapping bins
    Sample(((1, 4, 3, 5, 2),), {"output_size": (None, 2, 1)}),
    Sample(((1, 2, 3, 2, 2),), {"output_size": (3, 4, 2)}),  # more outputs than inputs
    Sample(((2, 4, 6, 5, 2),), {"output_size": (2, 4, 3)}, ties=True),
)
ADAPTIVE_MAX_EXTRA_1D = (Sample(((2, 7, 2),), {"output_size": 3, "return_indices": True}),)
ADAPTIVE_MAX_EXTRA_2D = (
    Sample(((2, 7, 5, 2),), {"output_size": (3, 2), "return_indices": True}),)
ADAPTIVE_MAX_EXTRA_3D = (
    Sample(((1, 5, 4, 3, 2),), {"output_size": (2, 3, 2), "return_indices": True}),)
UNPOOL_1D = (
    Sample(((2, 4, 3), Fixed(distinct_indices((2, 4, 3), (8,)))), {"kernel_size": 2}),
    Sample(((2, 4, 2), Fixed(distinct_indices((2, 4, 2), (8,), 1))),
           {"kernel_size": 3, "stride": 2, "padding": 1, "output_size": (8,)}),
)
UNPOOL_2D = (
    Sample(((2, 3, 4, 2), Fixed(distinct_indices((2, 3, 4, 2), (6, 8)))), {"kernel_size": 2}),
    Sample(((1, 3, 3, 2), Fixed(distinct_indices((1, 3, 3, 2), (5, 6), 2))),
           {"kernel_size": 3, "stride": 2, "padding": 1, "output_size": (5, 6)}),
)
UNPOOL_3D = (
    Sample(((2, 2, 3, 2, 2), Fixed(distinct_indices((2, 2, 3, 2, 2), (4, 6, 4)))),
           {"kernel_size": 2}),
    Sample(((1, 2, 3, 3, 2), Fixed(distinct_indices((1, 2, 3, 3, 2), (3, 5, 6), 3))),
           {"kernel_size": (2, 3, 3), "stride": (1, 2, 2), "padding": (0, 1, 1),
            "output_size": (3, 5, 6)}),
)
LP_POOL1D = (
    Sample(((2, 9, 3),), {"norm_type": 2, "kernel_size": 3}),
    Sample(((2, 8, 2),), {"norm_type": 1, "kernel_size": 3, "stride": 2, "ceil_mode": True}),
    Sample(((2, 9, 2),), {"norm_type": 4.0, "kernel_size": 2, "stride": 1}),
)
LP_POOL2D = (
    Sample(((2, 6, 6, 3),), {"norm_type": 2, "kernel_size": 2}),
    Sample(((2, 7, 6, 2),), {"norm_type": 2, "kernel_size": 3, "stride": 2, "ceil_mode": True}),
    Sample(((2, 5, 6, 2),), {"norm_type": 1, "kernel_size": (2, 3), "stride": (1, 2)}),
    Sample(((1, 6, 5, 2),), {"norm_type": 6, "kernel_size": (3, 2), "stride": 1}),
)
MIN_POOL1D = (
    Sample(((2, 9, 3),), {"kernel_size": 2}),
    Sample(((2, 10, 2),), {"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}),
    Sample(((2, 10, 2),), {"kernel_size": 3, "dilation": 2, "padding": 1}, ties=True),
)
MIN_POOL2D = (
    Sample(((2, 6, 6, 3),), {"kernel_size": 2}),
    Sample(((2, 7, 8, 2),), {"kernel_size": (2, 3), "stride": (1, 2), "padding": 1,
                             "dilation": (2, 1), "ceil_mode": True}),
    Sample(((2, 7, 7, 3),), {"kernel_size": 3, "stride": 1, "padding": 1}, ties=True),
    Sample(((1, 5, 6, 2),), {"kernel_size": 2, "return_indices": True}),
)
