"""Max pooling of windows that tile the input (stride = kernel, no padding, no dilation,
no unread trailing input) and sums over windows that read no padding, the pure-NumPy
path.

x (N, *S, C) is viewed, without a copy, as (N, O_0, K_0, ..., O_{d-1}, K_{d-1}, C), so
every tap of every window is one strided view of the shape of y::

    y = max_t x_t          (the earlier axes' taps first, over rows that merge the last
                            spatial axis with the channels; then the last axis's taps)
    dx = dy * [x == y]     (y and dy broadcast over every window axis: no copies; the
                            copies of y and dy repeated along the last axis that gave
                            the passes long rows cost more than they saved: max pool
                            2x2 of (32, 32, 32, 32) forward + backward 1.86-2.00 ->
                            1.74-1.87 ms float32, 2.63-3.48 -> 2.49-3.19 float64)

``x == y`` marks each window's first maximum alone when no window holds two maxima
(PyTorch's tie rule then has nothing to choose) and no window holds a NaN: y holds no
NaN (a NaN window has no mark, which a window with two would make up for in the count)
and the count of marks is y's size. :func:`max_backward` returns None otherwise (the
caller routes ties and NaN windows tap by tap). A non-finite dy takes ``where``
instead of the product (inf * 0 would be NaN). The work runs per block of a few
images, which stays in the cache: about ``BLOCK_BYTES`` of output (and the window's
size times that of input) per block.

Sums (average pooling) reduce instead, for any windows that read no padding
(:func:`._fold_pool.unpadded`: overlapping ones too): spatial axis i's windows as a read-only
strided view (P, O_i, K_i, R) (P the images times the earlier axes' outputs, R the later
axes' positions times the channels: :func:`._fold_pool.axis_windows`), the earlier axes
each take one ``np.add.reduce`` over K_i on the output of the one before (its loop keeps
a row of R sums in the L1 cache while it adds K_i input rows), and the last axis, whose
rows of C values are too short for a reduction's loop, adds its K taps as strided
views. The backward of windows that tile the input repeats each share over its window
(:func:`._repeat.repeat`, nearest upsampling's copy: 0.59 against 1.21 ms for 2x2 of
(32, 32, 32, 32) float32 by a broadcast copy per axis here); others keep the separable
passes of :mod:`._separable_pool`. Forward + backward on two cores beside torch, in random order
over 61 rounds, against those separable passes: average pool 2x2 of (32, 32, 32, 32)
float32 1.61-2.52 -> 1.24-2.09 ms (float64 3.38-4.11 -> 2.39-3.39), adaptive average
64 -> 8 of (8, 64, 64, 32) 1.29-1.40 -> 0.82-0.89 ms (float64 2.03-3.27 -> 1.51-2.63),
adaptive 64 -> 7 (kernel 10, stride 9) 1.84-2.00 -> 1.56-1.60 ms (3x3 windows, stride 1
or 2, moved within the noise). The same reductions in blocks on two threads were slower
(8x8 float32 0.87 against 0.44 ms). Max pooling keeps its folds on two threads: the same
reductions on one thread, with the backward through the marks, took 2.3 ms against 1.7
(2x2 float32).
"""

from __future__ import annotations

import numpy as np

from ._block_threads import run_blocks
from ._blocks import image_blocks, sum_into
from ._fold_pool import axis_windows, later_values
from ._pool_indices import covers_once


def tiles(axes) -> bool:
    """Whether the windows tile the input exactly: each position read once
    (:func:`covers_once`: no dilation gaps) and no padding on either side."""
    return covers_once(axes) and all(a.pad_before == 0 == a.pad_after for a in axes)


def _rows(a, axes, windows):
    """a (N, *S, C) (``windows``) or (N, *O, C) as (N, O_0, K_0, ..., O_{d-2}, K_{d-2},
    L) with the last spatial axis merged with the channels (L = S_{d-1} * C); an output
    gets unit window axes. A view of a C-contiguous array."""
    split = [d for b in axes[:-1] for d in (b.size_out, b.kernel if windows else 1)]
    return a.reshape(a.shape[0], *split, a.shape[-2] * a.shape[-1])


def _tiled(a, axes, windows):
    """a (N, *S, C) (``windows``) or (N, *O, C) as (N, O_0, K_0, ..., O_{d-1}, K_{d-1},
    C); an output gets unit window axes, which broadcast. A view of a C-contiguous
    array."""
    split = [d for b in axes for d in (b.size_out, b.kernel if windows else 1)]
    return a.reshape(a.shape[0], *split, a.shape[-1])


def _fold_max(a, axis, out=None):
    """The running np.maximum over the taps along window axis ``axis`` of ``a`` (views)."""
    taps = [a[(slice(None),) * (axis % a.ndim) + (k,)] for k in range(a.shape[axis])]
    if out is None:
        out = taps[0].copy()
    else:
        out[...] = taps[0]
    for tap in taps[1:]:
        np.maximum(out, tap, out=out)
    return out


def max_forward(x, axes):
    """y (N, *O, C): the maximum of each window (NaN propagates). The window axes of the
    earlier spatial axes fold first, over long rows (the last axis merged with the
    channels); then the last axis's taps, on the already reduced array."""
    y = np.empty((x.shape[0], *(a.size_out for a in axes), x.shape[-1]), dtype=x.dtype)
    last = axes[-1]

    def block(images):
        z = _rows(x[images], axes, True)
        for axis in range(2 * len(axes) - 2, 0, -2):  # the earlier window axes, last first
            z = _fold_max(z, axis)
        z = z.reshape(*z.shape[:-1], last.size_out, last.kernel, x.shape[-1])
        _fold_max(z, -2, out=y[images])

    run_blocks(block, image_blocks(y.shape, y.dtype.itemsize))
    return y


def max_backward(dy, x, y, axes):
    """dx (x.shape) = dy at each window's maximum, or None where the windows do not tile
    the input or some window holds two maxima or a NaN."""
    if not tiles(axes) or bool(np.isnan(y).any()):
        return None
    finite = bool(np.isfinite(dy).all())
    dx = np.empty(x.shape, dtype=dy.dtype)

    def block(images):
        """Whether each window of the block has one maximum (dx written if so)."""
        marks = _tiled(x[images], axes, True) == _tiled(y[images], axes, False)
        if np.count_nonzero(marks) != y[images].size:
            return False
        grad, target = _tiled(dy[images], axes, False), _tiled(dx[images], axes, True)
        if finite:
            np.multiply(grad, marks, out=target)
        else:
            target[...] = np.where(marks, grad, np.zeros((), dtype=dy.dtype))
        return True

    return dx if all(run_blocks(block, image_blocks(y.shape, y.dtype.itemsize))) else None


def _split(a, axes, i, channels):
    """a as (P, O_i, 1, R) for spatial axis i, an array whose axes up to i hold their
    outputs and the later ones their inputs. A view of a C-contiguous array."""
    return a.reshape(-1, axes[i].size_out, 1, later_values(axes, i, channels))


def sum_forward(x, axes):
    """y (N, *O, C): the sum of each window that reads no padding
    (:func:`._fold_pool.unpadded`); the earlier axes by reductions, the last axis by
    strided taps."""
    z, last, channels = x, len(axes) - 1, x.shape[-1]
    for i in range(last):
        z = np.add.reduce(axis_windows(z, axes[i], later_values(axes, i, channels)), axis=2)
    taps = axis_windows(z, axes[last], channels)
    y = np.empty((x.shape[0], *(a.size_out for a in axes), channels), dtype=x.dtype)
    sum_into(np, [taps[:, :, k] for k in range(axes[last].kernel)],
             _split(y, axes, last, channels)[:, :, 0])
    return y
