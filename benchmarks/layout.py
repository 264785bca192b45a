"""What handgrad's arrays are in torch's terms: the layout and the dtype."""

from __future__ import annotations

import numpy as np
import torch


def channels_first(array):
    """Channels-last (N, *S, C) -> channels-first (N, C, *S) (a view); other arrays as is."""
    return np.moveaxis(array, -1, 1) if array.ndim > 2 else array


def torch_dtype(dtype):
    """torch's float32 or float64 for a NumPy float dtype."""
    return torch.float32 if np.dtype(dtype) == np.float32 else torch.float64
