"""im2col and its adjoint as row gathers (``take``), with cached index arrays.

On the CPU they run a chunk of images at a time (:class:`TakeWindows`, driven by
:mod:`._gemm_chunks`); on a GPU the whole batch goes through strided views and
per-tap slice-adds (:func:`im2col`, :func:`col2im_matmul`), which the CPU's col2im takes
too for one input channel at a stride (:class:`SlicedWindows`).

An input ``x`` (N, *S, C) split in ``groups`` is viewed as rows of ``Cg = C //
groups`` values, row ``pixel * groups + g``, plus one zero row for the padding.
For output position ``m`` and kernel tap ``t`` of group ``g`` the window reads
row ``index[g, m, t]``; ``cols = rows.take(index)`` is then the im2col matrix
(groups, N*prod(O), prod(K)*Cg) in one memory pass, without per-tap copies.

The adjoint (col2im) gathers the other way: input row ``p`` receives, for each
tap ``t``, the single column-matrix row written by the one output position whose
window puts tap ``t`` on ``p`` (or the zero row), and sums over taps. Both index
arrays depend only on the geometry, so they are built once (loops over nothing
but array axes) and kept in a small LRU cache; op caches never hold them.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ._args.windows import pad_input, padded_zeros, taps


def _positions(axis, out_axis, kernel_axis, ndim):
    """Input position ``o*s + k*d - pad`` of output ``o`` and tap ``k``, broadcastable."""
    shape = [1] * ndim
    shape[out_axis], shape[kernel_axis] = axis.size_out, axis.kernel
    o = np.arange(axis.size_out).reshape(-1, 1)
    k = np.arange(axis.kernel).reshape(1, -1)
    return (o * axis.stride + k * axis.dilation - axis.pad_before).reshape(shape)


@functools.lru_cache(maxsize=16)
def window_index(n, axes, groups):
    """Row index (groups, N*prod(O)*prod(K)) into the zero-row-extended input rows."""
    nd = len(axes)
    ndim = 2 * nd + 2  # (groups, N, *O, *K)
    pixel = np.arange(n).reshape((1, n) + (1,) * (2 * nd))
    valid = np.ones((1,) * ndim, dtype=bool)
    for i, axis in enumerate(axes):
        position = _positions(axis, 2 + i, 2 + nd + i, ndim)
        valid = valid & (position >= 0) & (position < axis.size_in)
        pixel = pixel * axis.size_in + position
    zero_row = n * math.prod(a.size_in for a in axes) * groups
    group = np.arange(groups).reshape((groups,) + (1,) * (ndim - 1))
    index = np.where(valid, pixel * groups + group, zero_row)
    return np.ascontiguousarray(index.reshape(groups, -1), dtype=np.intp)


@functools.lru_cache(maxsize=16)
def scatter_index(n, axes, groups):
    """For the adjoint: (groups, prod(K), N*prod(S)) indices into the rows of the
    column matrix (groups*M*T rows, then one zero row)."""
    forward = window_index(n, axes, groups)  # (G, M*T) -> input row
    n_pixels = n * math.prod(a.size_in for a in axes)
    n_taps = math.prod(a.kernel for a in axes)
    zero_row = forward.size
    inverse = np.full((groups, n_taps, n_pixels), zero_row, dtype=np.intp)
    source = np.arange(forward.size).reshape(forward.shape)
    tap = np.broadcast_to(np.arange(n_taps), (forward.shape[1] // n_taps, n_taps)).reshape(-1)
    for g in range(groups):  # groups only; everything else is vectorized
        valid = forward[g] < n_pixels * groups
        inverse[g, tap[valid], forward[g][valid] // groups] = source[g][valid]
    return inverse


def _with_zero_row(xp, matrix_rows, width, dtype):
    """A (rows + 1, width) buffer whose last row is zero; returns (buffer, body view)."""
    buffer = xp.empty((matrix_rows + 1, width), dtype=dtype)
    buffer[-1] = 0
    return buffer, buffer[:-1]


def window_view(xp, x_pad, axes):
    """The windows of the padded ``x_pad`` (N, *extent, C) as a strided view
    (N, *O, *K, C): ``view[n, o, k, c] = x_pad[n, o*s + k*d, c]`` (no copy)."""
    strides = x_pad.strides
    spatial = strides[1:-1]
    shape = (x_pad.shape[0], *(a.size_out for a in axes), *(a.kernel for a in axes),
             x_pad.shape[-1])
    steps = (strides[0], *(s * a.stride for s, a in zip(spatial, axes)),
             *(s * a.dilation for s, a in zip(spatial, axes)), strides[-1])
    return xp.lib.stride_tricks.as_strided(x_pad, shape=shape, strides=steps)


def _strided_im2col(xp, x, axes, groups):
    """On a GPU: the im2col matrix as one copy of the strided window view."""
    windows = window_view(xp, pad_input(xp, x, axes), axes)  # (N, *O, *K, C)
    per_group = x.shape[-1] // groups
    split = windows.reshape(*windows.shape[:-1], groups, per_group)
    width = math.prod(a.kernel for a in axes) * per_group
    return xp.ascontiguousarray(xp.moveaxis(split, -2, 0)).reshape(groups, -1, width)


def _sliced_col2im(xp, cols, x_shape, axes, groups):
    """On a GPU: the adjoint of :func:`_strided_im2col`, one strided slice-add per
    kernel tap into a zero padded buffer (no scatter, no index arrays)."""
    out = tuple(a.size_out for a in axes)
    kernel = tuple(a.kernel for a in axes)
    split = cols.reshape(groups, x_shape[0], *out, *kernel, x_shape[-1] // groups)
    windows = xp.moveaxis(split, 0, -2).reshape(x_shape[0], *out, *kernel, x_shape[-1])
    buffer, inner = padded_zeros(xp, x_shape, axes, cols.dtype)
    nd = len(axes)
    for tap, window in taps(axes):
        offsets = np.unravel_index(tap, kernel)
        target = buffer[(slice(None), *window)]
        target += windows[(slice(None),) * (1 + nd) + tuple(int(k) for k in offsets)]
    return xp.ascontiguousarray(buffer[inner])


def im2col(xp, x, axes, groups):
    """On a GPU: windows of ``x`` (N, *S, C) as ``cols`` (groups, N*prod(O),
    prod(K)*C//groups) (NumPy arrays go through :class:`TakeWindows` a chunk at a time)."""
    return _strided_im2col(xp, x, axes, groups)


def col2im_matmul(xp, a, b, x_shape, axes, groups):
    """On a GPU: ``col2im(a @ b)`` for a (groups, M, k), b (groups, k, T*Cg): the adjoint
    of :func:`im2col` applied to the product, returned as an array of ``x_shape``."""
    return _sliced_col2im(xp, xp.matmul(a, b), x_shape, axes, groups)


class TakeWindows:
    """im2col and col2im of a chunk of images (see :mod:`._gemm_chunks`) by NumPy's
    ``take`` with the index arrays of the chunk's size (cached), any number of axes."""

    def __init__(self, axes, groups):
        self.axes, self.groups = axes, groups

    def gather(self, x, cols):
        """cols (groups, M, T*Cg) = the windows of the images ``x`` (N, *S, C)."""
        per_group = x.shape[-1] // self.groups
        index = window_index(x.shape[0], self.axes, self.groups)
        rows, body = _with_zero_row(np, x.size // per_group, per_group, x.dtype)
        body[...] = x.reshape(-1, per_group)
        np.take(rows, index, axis=0, out=cols.reshape(*index.shape, per_group), mode="clip")

    def scatter(self, dx, cols, scratch):
        """dx (N, *S, C), zero at first, += col2im(cols): one ``take`` per tap from the
        rows of ``cols`` and the zero row that follows them in ``scratch``."""
        per_group = dx.shape[-1] // self.groups
        rows = scratch[:cols.size + per_group].reshape(-1, per_group)
        rows[-1] = 0
        index = scatter_index(dx.shape[0], self.axes, self.groups)  # (groups, T, pixels)
        summed = rows.take(index[:, 0], axis=0, mode="clip")  # (groups, pixels, Cg)
        tap_rows = np.empty_like(summed)
        for tap in range(1, index.shape[1]):
            summed += np.take(rows, index[:, tap], axis=0, out=tap_rows, mode="clip")
        dx += summed.transpose(1, 0, 2).reshape(dx.shape)


class SlicedWindows(TakeWindows):
    """im2col by ``take``; col2im by one strided slice-add per tap into a zero-padded
    buffer (the GPU's way), which visits only the taps that outputs read: for input
    rows of one channel at strides above 1, where ``take`` spends s^d gathers of a single
    value per real one. Per chunk (float32 / float64 ms, take against sliced): 5x5 stride
    2 of (64, 28, 28, 1) 1.43 / 1.35 against 0.90 / 0.67, 3x3 stride 2 0.53 / 0.55 against
    0.33 / 0.39 (the compiled loop: 1.37 / 0.91 and 0.66 / 0.51)."""

    @staticmethod
    def applies(in_channels, axes) -> bool:
        """Whether it scatters faster than ``take``: one input channel per group, a stride
        above 1."""
        return in_channels == 1 and any(a.stride > 1 for a in axes)

    def scatter(self, dx, cols, scratch):
        dx += _sliced_col2im(np, cols, dx.shape, self.axes, self.groups)
