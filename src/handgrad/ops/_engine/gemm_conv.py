"""The compiled gather and scatter of :mod:`handgrad.ops._gemm_chunks` (1-D and 2-D).

The loops are single-threaded (they run between BLAS calls whose threads they would
fight); BLAS uses its threads.
"""

from __future__ import annotations

from .dispatch import as_2d, geometry_2d, kernels

# Rows of fewer input channels per group: NumPy's chunked ``take`` moves them as fast or
# faster than the compiled loop (16 channels: 0.72-0.95 of its time for a conv's forward
# + backward, interleaved; 64 channels: 1.0-1.18), so those convolutions gather in NumPy.
MIN_ROW_CHANNELS = 32


class CompiledWindows:
    """im2col / col2im of a chunk of images by the compiled ``window_rows`` loop."""

    def __init__(self, axes, groups):
        self.geometry, self.groups = geometry_2d(axes), groups

    def gather(self, x, cols):
        kernels.window_rows(as_2d(x), self.geometry, self.groups, cols, True)

    def scatter(self, dx, cols, scratch):
        kernels.window_rows(as_2d(dx), self.geometry, self.groups, cols, False)
