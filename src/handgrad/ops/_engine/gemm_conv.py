"""Compiled im2col + GEMM convolution (1-D and 2-D, NumPy arrays), a few images at a time.

The same math as :mod:`handgrad.ops.conv` (``cols`` the windows of ``x``, ``W`` the
grouped weight (groups, K*Cg, Og))::

    y    = cols @ W                 dw = cols^T @ dy                dx = col2im(dy @ W^T)

but run over chunks of whole images: the windows of a chunk are gathered by a compiled
loop straight into the GEMM's layout, in one scratch buffer of a few MB that stays in
the CPU cache between the gather and the GEMM and is reused by every chunk of a call (an
im2col-sized array of tens of MB costs page faults on every call). The backward pass
gathers a chunk's windows once, takes ``dw``'s share from them, then overwrites the
same buffer with ``dy @ W^T`` and scatters it into ``dx``'s rows of those images.
Each GEMM writes its result in place (``out=``): ``y`` directly, ``dw`` accumulated.
Everything stays in the input dtype. The loops are single-threaded (they run between
BLAS calls whose threads they would fight); BLAS uses its threads.
"""

from __future__ import annotations

import math

import numpy as np

from .dispatch import as_2d, geometry_2d, kernels

# Rows of fewer input channels per group (a first layer's 1 or 3): NumPy's gather moves
# them faster than the compiled loop, so those convolutions take the NumPy path.
MIN_ROW_CHANNELS = 8
# A chunk's windows take about 4 MB: then the GEMM reads them back from the CPU's caches
# (32 MB chunks made a conv's forward + backward 12-30% slower, measured in separate
# processes), and an allocation this small never gets fresh pages on every call.
CHUNK_BYTES = 2**22


def _chunks(n_images, rows_per_image, row_bytes):
    """Image ranges [start, stop) whose im2col rows take about CHUNK_BYTES (one image
    at least)."""
    step = max(1, CHUNK_BYTES // max(1, rows_per_image * row_bytes))
    return [(start, min(start + step, n_images)) for start in range(0, n_images, step)]


def _plan(n_images, out_shape, weight_shape, dtype):
    """(rows per image, chunk ranges, scratch (groups, rows of the largest chunk, K*Cg))."""
    rows = math.prod(out_shape)
    groups, width = weight_shape[0], weight_shape[1]
    chunks = _chunks(n_images, rows, groups * width * np.dtype(dtype).itemsize)
    largest = max((stop - start for start, stop in chunks), default=0)
    return rows, chunks, np.empty((groups, largest * rows, width), dtype)


def _rows(array, start, stop, groups):
    """Images start:stop of a channels-last array as (groups, rows, C // groups) (a view)."""
    part = array[start:stop]
    return part.reshape(-1, groups, part.shape[-1] // groups).transpose(1, 0, 2)


def conv_forward(x, weight, axes, out_shape):
    """y (N, *O, groups*Og) = im2col(x) @ weight; x (N, *S, C), weight
    (groups, K*Cg, Og) C-contiguous."""
    groups = weight.shape[0]
    y = np.empty((x.shape[0], *out_shape, groups * weight.shape[2]), x.dtype)
    rows, chunks, scratch = _plan(x.shape[0], out_shape, weight.shape, x.dtype)
    g = geometry_2d(axes)
    for start, stop in chunks:
        cols = scratch[:, : (stop - start) * rows]
        kernels.window_rows(as_2d(x[start:stop]), g, groups, cols, True)
        np.matmul(cols, weight, out=_rows(y, start, stop, groups))
    return y


def conv_input_grad(dy, weight, axes, x_shape):
    """dx (x_shape) = col2im(dy @ weight^T): the adjoint of :func:`conv_forward` in x."""
    groups = weight.shape[0]
    dx = np.zeros(x_shape, dy.dtype)
    rows, chunks, scratch = _plan(x_shape[0], dy.shape[1:-1], weight.shape, dy.dtype)
    g = geometry_2d(axes)
    weight_t = weight.transpose(0, 2, 1)
    for start, stop in chunks:
        dcols = scratch[:, : (stop - start) * rows]
        np.matmul(_rows(dy, start, stop, groups), weight_t, out=dcols)
        kernels.window_rows(as_2d(dx[start:stop]), g, groups, dcols, False)
    return dx


def conv_weight_grad(x, dy, axes, weight_shape):
    """dw (``weight_shape`` = (groups, K*Cg, Og)) = im2col(x)^T @ dy."""
    return _gradients(x, dy, axes, weight_shape, None)[1]


def conv_gradients(x, weight, dy, axes):
    """(dx, dw): dw = im2col(x)^T @ dy and dx = col2im(dy @ weight^T), from one gather of
    each chunk's windows."""
    return _gradients(x, dy, axes, weight.shape, weight.transpose(0, 2, 1))


def _gradients(x, dy, axes, weight_shape, weight_t):
    """(dx, or None without ``weight_t``, dw) chunk by chunk (see the module doc)."""
    groups = weight_shape[0]
    dx = None if weight_t is None else np.zeros(x.shape, dy.dtype)
    dw = np.zeros(weight_shape, dy.dtype)  # stays zero for an empty batch
    part = np.empty_like(dw)
    rows, chunks, scratch = _plan(x.shape[0], dy.shape[1:-1], weight_shape, dy.dtype)
    g = geometry_2d(axes)
    for start, stop in chunks:
        cols = scratch[:, : (stop - start) * rows]
        kernels.window_rows(as_2d(x[start:stop]), g, groups, cols, True)
        dy_rows = _rows(dy, start, stop, groups)
        first = start == 0
        np.matmul(cols.transpose(0, 2, 1), dy_rows, out=dw if first else part)
        if not first:
            dw += part
        if dx is not None:
            np.matmul(dy_rows, weight_t, out=cols)
            kernels.window_rows(as_2d(dx[start:stop]), g, groups, cols, False)
    return dx, dw
