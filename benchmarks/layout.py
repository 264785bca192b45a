"""What handgrad's arrays are in torch's terms: the layout and the dtype, and which of
torch's layouts runs a case faster."""

from __future__ import annotations

import statistics
import time

import numpy as np
import torch


def channels_first(array):
    """Channels-last (N, *S, C) -> channels-first (N, C, *S) (a view); other arrays as is."""
    return np.moveaxis(array, -1, 1) if array.ndim > 2 else array


def torch_dtype(dtype):
    """torch's float32 or float64 for a NumPy float dtype."""
    return torch.float32 if np.dtype(dtype) == np.float32 else torch.float64


def fastest(make, layouts, rounds=3):
    """(runner, layout): the torch runner ``make(layout)`` with the smallest median time
    over a few calls, timed before and apart from the case's measured rounds. Taking the
    faster of two fully timed runs instead would keep whichever run the noise favoured:
    its median is biased low where the layouts are about as fast."""
    best = None
    for layout in layouts:
        runner = make(layout)
        runner()
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            runner()
            times.append(time.perf_counter() - start)
        if best is None or statistics.median(times) < best[0]:
            best = (statistics.median(times), runner, layout)
    return best[1], best[2]
