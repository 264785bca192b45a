"""A convolution's bias over the channels of a channels-last map."""

from __future__ import annotations


def add_bias(xp, y, b):
    """y += b (C,) over the channels of y (N, *O, C), in place; returns y. b is tiled over
    the last spatial axis as a (W, C) array: NumPy then runs one inner loop over W * C
    values, not one per position over C (4 MB of float32, one core: 0.17-0.21 against
    0.26-0.36 ms)."""
    xp.add(y, xp.tile(b, y.shape[-2]).reshape(y.shape[-2:]), out=y)
    return y
