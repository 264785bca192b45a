"""PyTorch's max pooling indices: for each output, the flat position (in its (n, c)
spatial plane of the unpadded input) of the window's winner: the first maximum in
row-major tap order, or the last NaN of a window holding one (PyTorch's scan)."""

from __future__ import annotations

import math

import numpy as np

from .._checks import array_module
from ._args.windows import pad_input, taps


def max_pool_indices(x, y, axes):
    """int64 (N, *O, C) indices of the max pooling ``y`` of x (N, *S, C) over ``axes``."""
    xp = array_module(x)
    spatial = tuple(a.size_in for a in axes)
    positions = xp.arange(math.prod(spatial)).reshape(1, *spatial, 1)
    positions = pad_input(xp, positions, axes, fill=-1)
    x_pad = pad_input(xp, x, axes, fill=np.nan)  # padding never equals a maximum
    index = xp.full(y.shape, -1, dtype=np.int64)
    order = list(taps(axes))
    for _, window in order:
        at = (slice(None), *window)
        index = xp.where((x_pad[at] == y) & (index < 0), positions[at], index)
    nan_windows = xp.isnan(y)
    if bool(nan_windows.any()):
        for _, window in order:
            at = (slice(None), *window)
            index = xp.where(nan_windows & xp.isnan(x_pad[at]) & (positions[at] >= 0),
                             positions[at], index)
    return index
