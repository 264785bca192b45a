"""Argument checks of ``affine_grid`` and ``grid_sample`` (shared by the kernels and their
loop twins)."""

from __future__ import annotations

from ..._checks import choice, describe, float_array, is_int, same_dtype
from ..._hyper import flag

MODES = ("bilinear", "nearest")
PADDING_MODES = ("zeros", "border", "reflection")


def check_affine_grid(op, theta, size, align_corners):
    """theta (N, 2, 3) or (N, 3, 4); size (N, H, W, C) or (N, D, H, W, C), channels-last,
    with size[0] == N. Returns ``(theta, spatial sizes, align_corners)``."""
    theta = float_array(op, "theta", theta, 3, "(N, 2, 3) or (N, 3, 4)")
    if tuple(theta.shape[1:]) not in ((2, 3), (3, 4)):
        raise ValueError(f"{op}: 'theta' must have shape (N, 2, 3) (2-D) or (N, 3, 4) (3-D); "
                         f"received {tuple(theta.shape)}")
    rank = theta.shape[1]
    layout = "(N, H, W, C)" if rank == 2 else "(N, D, H, W, C)"
    if not (isinstance(size, (tuple, list)) and len(size) == rank + 2
            and all(is_int(s) for s in size)):
        raise TypeError(f"{op}: 'size' must be a tuple of {rank + 2} ints {layout} (channels "
                        f"last) for theta {tuple(theta.shape)}; received {describe(size)}")
    if any(s < 1 for s in size) or size[0] != theta.shape[0]:
        raise ValueError(f"{op}: 'size' must be {layout} with sizes >= 1 and N = "
                         f"{theta.shape[0]} (theta's batch); received {tuple(size)}")
    return theta, tuple(int(s) for s in size[1:-1]), flag(op, "align_corners", align_corners)


def check_grid_sample(op, x, grid, mode, padding_mode, align_corners):
    """x (N, H, W, C) and grid (N, Ho, Wo, 2) of one dtype; the modes and the flag.
    Returns ``(x, grid, align_corners)``."""
    x = float_array(op, "x", x, 4, "(N, H, W, C)")
    grid = float_array(op, "grid", grid, 4, "(N, Ho, Wo, 2)")
    same_dtype(op, x=x, grid=grid)
    if 0 in x.shape[1:3]:  # nothing to sample from (PyTorch refuses it too)
        raise ValueError(f"{op}: 'x' (N, H, W, C) must not have an empty spatial axis; "
                         f"received an array of shape {tuple(x.shape)}")
    if grid.shape[-1] != 2 or grid.shape[0] != x.shape[0]:
        raise ValueError(f"{op}: 'grid' must be (N, Ho, Wo, 2) with N = {x.shape[0]} (x's "
                         f"batch); received {tuple(grid.shape)}")
    choice(op, "mode", mode, MODES)
    choice(op, "padding_mode", padding_mode, PADDING_MODES)
    return x, grid, flag(op, "align_corners", align_corners)
