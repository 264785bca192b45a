"""Validation of interpolation arguments (shared with the reference twins): torch's
``F.interpolate`` rules for ``size``, ``scale_factor``, ``mode``, ``align_corners`` and
``recompute_scale_factor``, on channels-last inputs."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from ..._checks import choice, describe, float_array, int_tuple
from .windows import check_not_empty

LAYOUTS = {1: "(N, L, C)", 2: "(N, H, W, C)", 3: "(N, D, H, W, C)"}
MODES = ("nearest", "nearest-exact", "linear", "bilinear", "bicubic", "trilinear", "area")
RANK_OF_MODE = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}
"""The modes bound to one number of spatial axes (the others take 1, 2 or 3)."""
INTERPOLATING = ("linear", "bilinear", "bicubic", "trilinear")


@dataclass(frozen=True)
class Resize:
    """A validated interpolation: ``mode``, ``align_corners`` (a bool), and per spatial
    axis the input size, the output size and the scale torch's kernel receives (the
    user's ``scale_factor``, or None when the scale is computed from the sizes)."""

    op: str
    x: object
    mode: str
    align_corners: bool
    sizes_in: tuple[int, ...]
    sizes_out: tuple[int, ...]
    scales: tuple


def _scale_factors(op, scale_factor, nd):
    """``scale_factor`` as ``nd`` positive finite floats."""
    values = scale_factor if isinstance(scale_factor, (tuple, list)) else (scale_factor,) * nd
    ok = len(values) == nd and all(
        isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        for v in values)
    if not ok:
        raise ValueError(f"{op}: 'scale_factor' must be a positive number or a tuple of {nd} "
                         f"positive numbers; received {describe(scale_factor)}")
    return tuple(float(v) for v in values)


def _check_mode(op, mode, nd, align_corners):
    choice(op, "mode", mode, MODES)
    rank = RANK_OF_MODE.get(mode)
    if rank is not None and rank != nd:
        raise ValueError(f"{op}: mode {mode!r} takes a {rank + 2}-D input {LAYOUTS[rank]}; "
                         f"received a {nd + 2}-D input")
    if align_corners is None:
        return False
    if not isinstance(align_corners, bool):
        raise TypeError(f"{op}: 'align_corners' must be None or a bool; received "
                        f"{describe(align_corners)}")
    if mode not in INTERPOLATING:
        raise ValueError(f"{op}: 'align_corners' can only be set with the interpolating "
                         f"modes {', '.join(INTERPOLATING)}; received align_corners="
                         f"{align_corners!r} with mode {mode!r}")
    return align_corners


def prepare_interpolate(op, x, size, scale_factor, mode, align_corners,
                        recompute_scale_factor) -> Resize:
    """Validate an interpolation of ``x`` (N, *S, C) with 1 to 3 spatial axes: exactly one
    of ``size`` / ``scale_factor``; the output size is ``floor(S * scale_factor)``."""
    x = float_array(op, "x", x, (3, 4, 5), "(N, L, C), (N, H, W, C) or (N, D, H, W, C)")
    nd = x.ndim - 2
    x = check_not_empty(op, "x", x, LAYOUTS[nd])
    align = _check_mode(op, mode, nd, align_corners)
    if recompute_scale_factor not in (None, False, True):
        raise TypeError(f"{op}: 'recompute_scale_factor' must be None or a bool; received "
                        f"{describe(recompute_scale_factor)}")
    sizes_in = tuple(x.shape[1:-1])
    if (size is None) == (scale_factor is None):
        raise ValueError(f"{op}: give exactly one of 'size' and 'scale_factor'; received "
                         f"size={size!r}, scale_factor={scale_factor!r}")
    if size is not None:
        if recompute_scale_factor:
            raise ValueError(f"{op}: 'recompute_scale_factor' is not meaningful with an "
                             f"explicit 'size'; received size={size!r}")
        if isinstance(size, list):
            size = tuple(size)
        sizes_out = int_tuple(op, "size", size, nd)
        return Resize(op, x, mode, align, sizes_in, sizes_out, (None,) * nd)
    factors = _scale_factors(op, scale_factor, nd)
    sizes_out = tuple(math.floor(n * f) for n, f in zip(sizes_in, factors))
    if min(sizes_out) < 1:
        raise ValueError(f"{op}: the output size floor(input size * scale_factor) must be at "
                         f"least 1; input spatial size {sizes_in} with scale_factor "
                         f"{scale_factor!r} gives {sizes_out}")
    scales = (None,) * nd if recompute_scale_factor else factors
    return Resize(op, x, mode, align, sizes_in, sizes_out, scales)
