"""im2col + GEMM convolution on the CPU (NumPy arrays), a few images at a time.

The same math as :mod:`handgrad.ops.conv` (``cols`` the windows of ``x``, ``W`` the
grouped weight (groups, K*Cg, Og))::

    y    = cols @ W                 dw = cols^T @ dy                dx = col2im(dy @ W^T)

but run over chunks of whole images: the windows of a chunk are gathered straight into
the GEMM's layout, in one scratch buffer of a few MB that stays in the CPU's caches
between the gather and the GEMM and is reused by every chunk of a call (an im2col-sized
array of tens of MB is written to memory and read back, and costs page faults on every
call). The backward pass gathers a chunk's windows once, takes ``dw``'s share from them,
then overwrites the same buffer with ``dy @ W^T`` and scatters it into ``dx``'s rows of
those images. Each GEMM writes its result in place (``out=``): ``y`` directly, ``dw``
accumulated. Everything stays in the input dtype.

``windows`` gathers and scatters a chunk: NumPy's ``take`` with index arrays
(:class:`~handgrad.ops._gather.TakeWindows`), whose scatter is the compiled loop where
that is faster (:class:`~handgrad.ops._engine.gemm_conv.CompiledWindows`). Its ``gather(x, cols)``
fills ``cols`` with the windows of the images ``x``; ``scatter(dx, cols, scratch)``
adds ``cols`` into their ``dx`` (zero at first); ``cols`` is the chunk's view
(groups, rows, K*Cg) at the start of the flat ``scratch``, which has ``Cg`` spare
values after the largest chunk (the NumPy scatter's zero row).
"""

from __future__ import annotations

import math

import numpy as np

# A chunk's windows take about 4 MB: then the GEMM reads them back from the CPU's caches
# (32 MB chunks made a conv's forward + backward 12-30% slower, measured in separate
# processes), and an allocation this small never gets fresh pages on every call.
CHUNK_BYTES = 2**22


def _chunks(n_images, rows_per_image, row_bytes):
    """Image ranges [start, stop) whose im2col rows take about CHUNK_BYTES (one image
    at least)."""
    step = max(1, CHUNK_BYTES // max(1, rows_per_image * row_bytes))
    return [(start, min(start + step, n_images)) for start in range(0, n_images, step)]


class _Plan:
    """The chunks of a call and their scratch: ``rows`` per image, ``chunks`` (start,
    stop) ranges, ``cols(start, stop)`` the chunk's view of the flat ``scratch``."""

    def __init__(self, n_images, out_shape, weight_shape, dtype):
        self.rows = math.prod(out_shape)
        self.groups, self.width = weight_shape[0], weight_shape[1]
        row_bytes = self.groups * self.width * np.dtype(dtype).itemsize
        self.chunks = _chunks(n_images, self.rows, row_bytes)
        largest = max((stop - start for start, stop in self.chunks), default=0)
        spare = self.width  # >= Cg: room for a zero row after any chunk's columns
        self.scratch = np.empty(self.groups * largest * self.rows * self.width + spare, dtype)

    def cols(self, start, stop):
        size = self.groups * (stop - start) * self.rows * self.width
        return self.scratch[:size].reshape(self.groups, -1, self.width)


def grouped_rows(array, groups):
    """A channels-last array (N, *O, C) as (groups, N*prod(O), C // groups) (a view)."""
    return array.reshape(-1, groups, array.shape[-1] // groups).transpose(1, 0, 2)


def conv_forward(x, weight, out_shape, windows):
    """y (N, *O, groups*Og) = im2col(x) @ weight; x (N, *S, C), weight
    (groups, K*Cg, Og) C-contiguous."""
    groups = weight.shape[0]
    y = np.empty((x.shape[0], *out_shape, groups * weight.shape[2]), x.dtype)
    plan = _Plan(x.shape[0], out_shape, weight.shape, x.dtype)
    for start, stop in plan.chunks:
        cols = plan.cols(start, stop)
        windows.gather(x[start:stop], cols)
        np.matmul(cols, weight, out=grouped_rows(y[start:stop], groups))
    return y


def conv_input_grad(dy, weight, x_shape, windows):
    """dx (x_shape) = col2im(dy @ weight^T): the adjoint of :func:`conv_forward` in x."""
    groups = weight.shape[0]
    dx = np.zeros(x_shape, dy.dtype)
    plan = _Plan(x_shape[0], dy.shape[1:-1], weight.shape, dy.dtype)
    weight_t = weight.transpose(0, 2, 1)
    for start, stop in plan.chunks:
        dcols = plan.cols(start, stop)
        np.matmul(grouped_rows(dy[start:stop], groups), weight_t, out=dcols)
        windows.scatter(dx[start:stop], dcols, plan.scratch)
    return dx


def conv_weight_grad(x, dy, weight_shape, windows):
    """dw (``weight_shape`` = (groups, K*Cg, Og)) = im2col(x)^T @ dy."""
    return _gradients(x, dy, weight_shape, None, windows)[1]


def conv_gradients(x, weight, dy, windows):
    """(dx, dw): dw = im2col(x)^T @ dy and dx = col2im(dy @ weight^T), from one gather of
    each chunk's windows."""
    return _gradients(x, dy, weight.shape, weight.transpose(0, 2, 1), windows)


def _gradients(x, dy, weight_shape, weight_t, windows):
    """(dx, or None without ``weight_t``, dw) chunk by chunk (see the module doc)."""
    groups = weight_shape[0]
    dx = None if weight_t is None else np.zeros(x.shape, dy.dtype)
    dw = np.zeros(weight_shape, dy.dtype)  # stays zero for an empty batch
    part = np.empty_like(dw)
    plan = _Plan(x.shape[0], dy.shape[1:-1], weight_shape, dy.dtype)
    for start, stop in plan.chunks:
        cols = plan.cols(start, stop)
        windows.gather(x[start:stop], cols)
        dy_rows = grouped_rows(dy[start:stop], groups)
        first = start == 0
        np.matmul(cols.transpose(0, 2, 1), dy_rows, out=dw if first else part)
        if not first:
            dw += part
        if dx is not None:
            np.matmul(dy_rows, weight_t, out=cols)
            windows.scatter(dx[start:stop], cols, plan.scratch)
    return dx, dw
