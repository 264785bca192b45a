"""The compiled col2im of :mod:`handgrad.ops._gemm_chunks` (1-D and 2-D).

The loop is single-threaded (it runs between BLAS calls whose threads it would fight);
BLAS uses its threads.

Only the scatter (col2im) is compiled: NumPy's ``take`` gathers the windows (im2col)
faster than any compiled loop we wrote, per chunk of images on one core 1.6-10x (8 to 64
channels per row, 1 channel: 10x), since it copies whole rows. The scatter adds into
dx. NumPy's takes one row per tap for every input position (the zero row where no
output reads it: a stride s makes that s^2 times the real work), and each group's short
rows separately; the compiled loop visits only the real taps, but is slower per value on
rows of few channels. Per chunk, one core, float32 / float64 (take against compiled):
dense 3x3 stride 1, 16 channels 0.27 / 0.22 against 0.47 / 0.23 ms, 64 channels 0.24 /
0.21 against 0.19 / 0.10; 4 groups of 8 channels 0.37 / 0.22 against 0.28 / 0.11; stride
2, 8 channels 0.52 / 1.38 against 0.54 / 0.50, 16 channels 1.5 / 0.80 against 0.53 /
0.27; 4 channels about even, 1 channel (5x5, stride 2) 1.0 against 1.5.
"""

from __future__ import annotations

from .._gather import TakeWindows
from .dispatch import as_2d, geometry_2d, kernels

MIN_ROW_CHANNELS = 32
"""Dense convolutions of at least this many input channels scatter compiled."""
MIN_STRIDED_CHANNELS = 8
"""Strided ones from this many."""


def scatters_compiled(in_channels, groups, axes) -> bool:
    """Whether the compiled col2im beats NumPy's for rows of ``in_channels`` per group
    (see the module doc)."""
    strided = any(a.stride > 1 for a in axes)
    return (in_channels >= MIN_ROW_CHANNELS or groups > 1
            or (strided and in_channels >= MIN_STRIDED_CHANNELS))


class CompiledWindows(TakeWindows):
    """im2col of a chunk of images by NumPy's ``take``, col2im by the compiled
    ``col2im_rows`` loop."""

    def __init__(self, axes, groups):
        super().__init__(axes, groups)
        self.geometry = geometry_2d(axes)

    def scatter(self, dx, cols, scratch):
        kernels.col2im_rows(as_2d(dx), self.geometry, self.groups, cols)
