"""The compiled col2im of :mod:`handgrad.ops._gemm_chunks` (1-D and 2-D).

The loop is single-threaded (it runs between BLAS calls whose threads it would fight);
BLAS uses its threads.

Only the scatter (col2im) is compiled: NumPy's ``take`` gathers the windows (im2col)
faster than any compiled loop we wrote, per chunk of images on one core 1.6-10x (8 to 64
channels per row, 1 channel: 10x), since it copies whole rows. The scatter adds into
dx; the compiled loop beats NumPy's tap-by-tap takes from 32 channels per group, and for
grouped convolutions, whose ``take`` scatter moves each group's short rows separately
(per chunk, float32 / float64: 64 channels 0.19 / 0.10 ms against 0.24 / 0.21; 4 groups of
8 channels 0.28 / 0.11 against 0.37 / 0.22); dense rows of 16 channels scatter faster by
``take`` (0.27 against 0.47 ms).
"""

from __future__ import annotations

from .._gather import TakeWindows
from .dispatch import as_2d, geometry_2d, kernels

MIN_ROW_CHANNELS = 32
"""Dense convolutions of at least this many input channels scatter compiled."""


def scatters_compiled(in_channels, groups) -> bool:
    """Whether the compiled col2im beats NumPy's for rows of ``in_channels`` per group."""
    return in_channels >= MIN_ROW_CHANNELS or groups > 1


class CompiledWindows(TakeWindows):
    """im2col of a chunk of images by NumPy's ``take``, col2im by the compiled
    ``col2im_rows`` loop."""

    def __init__(self, axes, groups):
        super().__init__(axes, groups)
        self.geometry = geometry_2d(axes)

    def scatter(self, dx, cols, scratch):
        kernels.col2im_rows(as_2d(dx), self.geometry, self.groups, cols)
