"""Validation of max unpooling calls (shared with the reference twins)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..._checks import describe, float_array, int_tuple
from .conv import LAYOUTS
from .windows import check_not_empty


@dataclass(frozen=True)
class UnpoolCall:
    """A validated unpooling call: the op's name, x, the int64 indices (x's shape) and
    the output's spatial shape."""

    op: str
    x: object
    indices: object
    out_shape: tuple


def unpool_output_shape(op, spatial, kernel_size, stride, padding, output_size):
    """PyTorch's default (S - 1) * stride - 2 * padding + kernel per axis, or
    ``output_size`` (the spatial sizes, or torch's (N, C, *sizes) form) within one stride
    of it."""
    nd = len(spatial)
    kernel = int_tuple(op, "kernel_size", kernel_size, nd)
    stride = kernel if stride is None else int_tuple(op, "stride", stride, nd)
    pad = int_tuple(op, "padding", padding, nd, minimum=0)
    default = tuple((s - 1) * st - 2 * p + k for s, st, p, k in zip(spatial, stride, pad, kernel))
    if output_size is None:
        sizes = default
    else:
        given = tuple(output_size)[-nd:] if isinstance(output_size, (tuple, list)) else ()
        sizes = int_tuple(op, "output_size", given, nd) if len(given) == nd else None
        if sizes is None or not all(d - st < o < d + st
                                    for o, d, st in zip(sizes, default, stride)):
            low = tuple(d - st + 1 for d, st in zip(default, stride))
            high = tuple(d + st - 1 for d, st in zip(default, stride))
            raise ValueError(f"{op}: 'output_size' must be {nd} sizes between {low} and "
                             f"{high} (one stride around the default {default}); received "
                             f"{output_size!r}")
    if min(sizes) < 1:
        raise ValueError(f"{op}: the output would be empty ({sizes}); check 'kernel_size', "
                         f"'stride' and 'padding'")
    return sizes


def prepare_unpool(op, nd, x, indices, kernel_size, stride, padding, output_size):
    """Validate x (N, *S, C) and ``indices`` (an int array of x's shape, each a flat
    position of the output plane)."""
    x = check_not_empty(op, "x", float_array(op, "x", x, nd + 2, LAYOUTS[nd]), LAYOUTS[nd])
    kind = getattr(getattr(indices, "dtype", None), "kind", None)
    if kind not in ("i", "u") or tuple(indices.shape) != tuple(x.shape):
        raise TypeError(f"{op}: 'indices' must be an integer array of x's shape "
                        f"{tuple(x.shape)}; received {describe(indices)}")
    sizes = unpool_output_shape(op, tuple(x.shape[1:-1]), kernel_size, stride, padding,
                                output_size)
    positions = math.prod(sizes)
    if indices.size and (int(indices.min()) < 0 or int(indices.max()) >= positions):
        raise ValueError(f"{op}: 'indices' must lie in [0, {positions}) for an output of "
                         f"spatial shape {sizes}; received values from {int(indices.min())} "
                         f"to {int(indices.max())}")
    return UnpoolCall(op, x, indices.astype(np.int64, copy=False), sizes)
