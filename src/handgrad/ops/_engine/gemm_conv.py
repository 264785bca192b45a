"""The compiled col2im of :mod:`handgrad.ops._gemm_chunks` (1-D and 2-D).

The loop is single-threaded (it runs between BLAS calls whose threads it would fight);
BLAS uses its threads.

Only the scatter (col2im) is compiled: NumPy's ``take`` gathers the windows (im2col)
faster than any compiled loop we wrote, per chunk of images on one core 1.6-10x (8 to 64
channels per row, 1 channel: 10x), since it copies whole rows. The scatter adds into
dx. NumPy's takes one row per tap for every input position (the zero row where no
output reads it: a stride s makes that s^2 times the real work), and each group's short
rows separately; the compiled loop visits only the real taps, but is slower per value on
rows of few channels. Per chunk of about 4 MB of windows, float32 / float64 ms, take
against compiled: dense 3x3, 16 channels 0.97 / 0.26 against 0.61 / 0.16, 8 channels
0.88 / 0.46 against 1.06 / 0.38, 4 channels 0.66 / 0.42 against 1.44 / 0.55; stride 2, 2
channels 0.40 / 0.47 against 0.37 / 0.35, 4 channels 0.43 / 0.59 against 0.41 / 0.33, 3
channels 7x7 (a ResNet's stem, forward + backward 76 -> 44 ms) 5.1 / 8.0 against 1.4 /
1.1; one channel, 5x5 1.3 / 1.7 against 1.05 / 1.05 but 3x3 0.36 / 0.44 against 0.50 /
0.47 (left to take).
"""

from __future__ import annotations

from .._gather import TakeWindows
from .dispatch import as_2d, geometry_2d, kernels

MIN_ROW_CHANNELS = 16
"""Dense convolutions of at least this many input channels scatter compiled."""
MIN_STRIDED_CHANNELS = 2
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
