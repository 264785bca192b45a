"""Max pooling of windows that tile the input (stride = kernel, no padding, no
dilation, no unread trailing input), the pure-NumPy path.

x (N, *S, C) is viewed, without a copy, as (N, O_0, K_0, ..., O_{d-1}, K_{d-1}, C), so
every tap of every window is one strided view of the shape of y::

    y = max_t x_t                                     (prod(K) - 1 np.maximum passes)
    dx = dy * [x == y]    (y and dy broadcast over the window axes; one pass each)

``x == y`` marks each window's first maximum alone when no window holds two maxima
(PyTorch's tie rule then has nothing to choose) and no window holds a NaN; the count of
marks tells, and :func:`max_backward` returns None otherwise (the caller routes ties and
NaN windows tap by tap). A non-finite dy takes ``where`` instead of the product (inf * 0
would be NaN). The work runs per block of a few images, which stays in the cache.
"""

from __future__ import annotations

import itertools

import numpy as np

from ._separable_pool import _image_blocks


def tiles(axes) -> bool:
    """Whether the windows tile the input exactly."""
    return all(a.stride == a.kernel and a.pad_before == 0 and a.size_in == a.size_out * a.kernel
               for a in axes)


def _windows(x, axes):
    """x (N, *S, C) viewed as (N, O_0, K_0, ..., C)."""
    split = [d for a in axes for d in (a.size_out, a.kernel)]
    return x.reshape(x.shape[0], *split, x.shape[-1])


def _spread(y, axes):
    """y (N, *O, C) viewed as (N, O_0, 1, ..., C), broadcastable against the windows."""
    shape = [d for a in axes for d in (a.size_out, 1)]
    return y.reshape(y.shape[0], *shape, y.shape[-1])


def max_forward(x, axes):
    """y (N, *O, C): the maximum of each window (NaN propagates)."""
    y = np.empty((x.shape[0], *(a.size_out for a in axes), x.shape[-1]), dtype=x.dtype)
    taps = list(itertools.product(*(range(a.kernel) for a in axes)))
    for images in _image_blocks(x.shape, x.dtype.itemsize):
        windows, out = _windows(x[images], axes), y[images]
        for i, tap in enumerate(taps):
            view = windows[(slice(None), *(s for k in tap for s in (slice(None), k)))]
            if i == 0:
                out[...] = view
            else:
                np.maximum(out, view, out=out)
    return y


def max_backward(dy, x, y, axes):
    """dx (x.shape) = dy at each window's maximum, or None where the windows do not tile
    the input or some window holds two maxima or a NaN."""
    if not tiles(axes):
        return None
    finite = bool(np.isfinite(dy).all())
    dx = np.empty(x.shape, dtype=dy.dtype)
    for images in _image_blocks(x.shape, x.dtype.itemsize):
        windows, block = _windows(x[images], axes), _spread(y[images], axes)
        marks = windows == block
        if np.count_nonzero(marks) != block.size:
            return None
        grad, target = _spread(dy[images], axes), _windows(dx[images], axes)
        if finite:
            np.multiply(grad, marks, out=target)
        else:
            target[...] = np.where(marks, grad, np.zeros((), dtype=dy.dtype))
    return dx
