"""Fractional max pooling (Graham, 2014; PyTorch's FractionalMaxPool2d/3d), channels-last.

Each (n, c) plane is pooled with k-tap windows at pseudo-random starts, one sample
``u[n, c, axis]`` in [0, 1) per axis (aten's ``generate_intervals``, in x's dtype)::

    alpha = (L - k) / (out - 1)
    start[i] = int((i + u) * alpha) - int(u * alpha)   (i < out - 1),   start[out - 1] = L - k
    y[n, o, c] = x[n, i*(n, o, c), c],   i* the first maximum of the window (a NaN wins)
    dx[n, i, c] = sum_{o : i*(n, o, c) = i} dy[n, o, c]

The samples are PyTorch's ``_random_samples`` (N, C, nd), given or drawn from ``rng``:
for 2-D, ``samples[..., 0]`` places the width's windows and ``[..., 1]`` the height's
(torch's order); for 3-D (D, H, W). The forward is a running comparison over the kernel
taps, each gathering one position per output; the cache holds the winners' flat indices
(``h * W + w``, PyTorch's ``return_indices``, for ``MaxUnpool``).
"""

from __future__ import annotations

import itertools
import math

from .._checks import array_module
from ._args.fractional import interval_starts, prepare_fractional
from ._pool_indices import running_max
from .declare import declare, exports
from .pooling_extra import FlatIndexCache, _adaptive_max_backward


def _fractional_max(call):
    """(y, cache) or (y, indices, cache): the first maximum of each window."""
    x, nd = call.x, len(call.kernel)
    xp = array_module(x)
    n, c, spatial = x.shape[0], x.shape[-1], x.shape[1:-1]
    starts = []  # per axis: (N, 1, .., O_a, .., 1, C) window starts
    for axis, (size, out, k) in enumerate(zip(spatial, call.out, call.kernel)):
        s = interval_starts(call.axis_samples(axis), size, out, k)  # (N, C, O_a)
        shape = [n] + [1] * nd + [c]
        shape[axis + 1] = out
        starts.append(xp.moveaxis(s, 1, -1).reshape(shape))
    batch = xp.arange(n).reshape(n, *(1,) * (nd + 1))
    channel = xp.arange(c).reshape(*(1,) * (nd + 1), c)
    plane_strides = [math.prod(spatial[a + 1:]) for a in range(nd)]
    y = index = None
    for offsets in itertools.product(*(range(k) for k in call.kernel)):
        positions = [s + o for s, o in zip(starts, offsets)]
        values = x[(batch, *positions, channel)]
        flat = sum(p * stride for p, stride in zip(positions, plane_strides))
        y, index = running_max(y, index, values, flat, xp)
    cache = FlatIndexCache(call.op, tuple(x.shape), x.dtype, tuple(y.shape), index=index)
    return (y, index, cache) if call.return_indices else (y, cache)


def fractional_max_pool2d(x, kernel_size, output_size=None, output_ratio=None,
                          return_indices=False, samples=None, rng=None):
    """x (N, H, W, C) -> y (N, H_out, W_out, C): the first maximum of each k_h x k_w
    window at PyTorch's fractional starts. ``output_size`` (int or pair) or
    ``output_ratio`` (in (0, 1): ``int(L * ratio)``); ``samples`` (N, C, 2) in [0, 1)
    (torch's ``_random_samples``: [..., 0] for W, [..., 1] for H) or drawn from ``rng``
    (a Generator or seed; None: a fresh one). Returns ``(y, cache)``, or
    ``(y, indices, cache)`` with ``return_indices`` (int64, flat h * W + w)."""
    return _fractional_max(prepare_fractional("fractional_max_pool2d", 2, x, kernel_size,
                                              output_size, output_ratio, return_indices,
                                              samples, rng))


def fractional_max_pool2d_backward(dy, cache):
    """dy (N, H_out, W_out, C) -> dx (N, H, W, C): each dy added at its window's maximum."""
    return _adaptive_max_backward("fractional_max_pool2d_backward", "fractional_max_pool2d",
                                  dy, cache)


def fractional_max_pool3d(x, kernel_size, output_size=None, output_ratio=None,
                          return_indices=False, samples=None, rng=None):
    """x (N, D, H, W, C) -> y (N, D_out, H_out, W_out, C): as :func:`fractional_max_pool2d`
    with ``samples`` (N, C, 3) for (D, H, W); indices flat (d * H + h) * W + w."""
    return _fractional_max(prepare_fractional("fractional_max_pool3d", 3, x, kernel_size,
                                              output_size, output_ratio, return_indices,
                                              samples, rng))


def fractional_max_pool3d_backward(dy, cache):
    """dy (N, D_out, H_out, W_out, C) -> dx (N, D, H, W, C): each dy added at its
    window's maximum."""
    return _adaptive_max_backward("fractional_max_pool3d_backward", "fractional_max_pool3d",
                                  dy, cache)


# The declarations: kernels, torch counterpart, samples (ops/samples/fractional_pool.py).
from .samples import fractional_pool as _s  # noqa: E402

declare(fractional_max_pool2d, fractional_max_pool2d_backward, torch=_s.torch_fractional,
        samples=_s.FRACTIONAL_2D)
declare(fractional_max_pool3d, fractional_max_pool3d_backward, torch=_s.torch_fractional,
        samples=_s.FRACTIONAL_3D)
__all__ = exports(__name__, globals())
