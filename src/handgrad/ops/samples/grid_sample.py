"""Spatial transformer samples and torch counterparts: ``affine_grid`` 2-D and 3-D with and
without ``align_corners`` (a single-point axis too); ``grid_sample`` in every mode x
padding mode x ``align_corners``, with standard-normal grids, about a third of whose
points lie outside [-1, 1] (zeros read, the border clip and the reflections act), and
single-pixel axes (reflection's degenerate span)."""

from __future__ import annotations

import itertools

from ..declare import Fixed, Sample
from . import channels_first, channels_last


def torch_affine_grid(F, theta, size, align_corners=False):
    """``F.affine_grid`` with the channels-last ``size`` moved to torch's (N, C, *S)."""
    return F.affine_grid(theta, (size[0], size[-1], *size[1:-1]), align_corners=align_corners)


def torch_grid_sample(F, x, grid, mode="bilinear", padding_mode="zeros", align_corners=False):
    """``F.grid_sample`` on moved channels."""
    return channels_last(F.grid_sample(channels_first(x), grid, mode=mode,
                                       padding_mode=padding_mode, align_corners=align_corners))


AFFINE_GRID = (
    Sample(((2, 2, 3), Fixed((2, 4, 5, 3)))),
    Sample(((2, 2, 3), Fixed((2, 3, 6, 1))), {"align_corners": True}),
    Sample(((1, 2, 3), Fixed((1, 1, 4, 2)))),
    Sample(((2, 3, 4), Fixed((2, 2, 3, 4, 1)))),
    Sample(((1, 3, 4), Fixed((1, 3, 2, 2, 2))), {"align_corners": True}),
)

GRID_SAMPLE = tuple(
    Sample(((2, 4, 5, 3), (2, 3, 4, 2)),
           {"mode": mode, "padding_mode": padding, "align_corners": align})
    for mode, padding, align in itertools.product(("bilinear", "nearest"),
                                                  ("zeros", "border", "reflection"),
                                                  (False, True))
) + (
    Sample(((1, 1, 4, 2), (1, 2, 3, 2)), {"padding_mode": "reflection", "align_corners": True}),
    Sample(((1, 3, 1, 2), (1, 2, 2, 2)), {"padding_mode": "border"}),
)
