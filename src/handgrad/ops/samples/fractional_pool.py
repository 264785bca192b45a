"""Fractional max pooling samples and torch counterpart."""

from __future__ import annotations

import numpy as np

from ..declare import Fixed, Sample
from . import channels_first, channels_last


def torch_fractional(F, x, kernel_size, output_size=None, output_ratio=None,
                     return_indices=False, samples=None, rng=None):
    """``F.fractional_max_pool{2,3}d`` on moved channels with the same ``_random_samples``
    (cast to x's dtype, as torch requires; the values only: the indices are checked in
    the tests)."""
    if samples is None:
        raise NotImplementedError("torch draws its own samples; compare with given ones")
    fn = getattr(F, f"fractional_max_pool{x.ndim - 2}d")
    return channels_last(fn(channels_first(x), kernel_size, output_size, output_ratio,
                            _random_samples=samples.to(x.dtype)))


def _samples(n, c, nd, seed):
    return np.random.default_rng(seed).random((n, c, nd))


def _sample(shape, kernel, output_size=None, output_ratio=None, return_indices=False,
            seed=0, **flags):
    """A Sample with every argument in order (the samples array last, positional)."""
    nd = len(shape) - 2
    return Sample((shape, Fixed(kernel), Fixed(output_size), Fixed(output_ratio),
                   Fixed(return_indices), Fixed(_samples(shape[0], shape[-1], nd, seed))),
                  **flags)


FRACTIONAL_2D = (
    _sample((2, 10, 11, 3), 2, (4, 5)),
    _sample((2, 9, 8, 2), (3, 2), (5, 4), seed=1),  # overlapping windows
    _sample((1, 7, 9, 2), 2, output_ratio=(0.5, 0.6), seed=2),
    _sample((2, 6, 7, 2), 3, (1, 3), return_indices=True, seed=3),  # one window along H
    _sample((2, 8, 8, 2), 2, 5, seed=4, ties=True),
)
FRACTIONAL_3D = (
    _sample((2, 6, 7, 8, 2), 2, (3, 4, 5)),
    _sample((1, 7, 6, 5, 3), (3, 2, 2), output_ratio=0.5, seed=1),
    _sample((1, 5, 6, 6, 2), 2, (3, 2, 4), return_indices=True, seed=2, ties=True),
)
