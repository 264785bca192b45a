"""Interpolation samples and torch counterpart: every mode, ``size`` and ``scale_factor``
(the scale torch's kernel receives differs), ``align_corners``, up and down."""

from __future__ import annotations

from ..declare import Sample
from . import channels_first, channels_last


def torch_interpolate(F, x, size=None, scale_factor=None, mode="nearest", align_corners=None,
                      recompute_scale_factor=None):
    """``F.interpolate`` on moved channels."""
    y = F.interpolate(channels_first(x), size=size, scale_factor=scale_factor, mode=mode,
                      align_corners=align_corners,
                      recompute_scale_factor=recompute_scale_factor)
    return channels_last(y)


INTERPOLATE = (
    Sample(((2, 5, 3),), {"scale_factor": 2}),                                   # nearest, 2x
    Sample(((2, 7, 2),), {"size": 4}),
    Sample(((2, 6, 2),), {"scale_factor": 1.7, "mode": "nearest"}),
    Sample(((2, 5, 2),), {"size": 8, "mode": "nearest-exact"}),
    Sample(((2, 9, 2),), {"scale_factor": 0.45, "mode": "nearest-exact"}),
    Sample(((2, 5, 2),), {"size": 9, "mode": "linear"}),
    Sample(((2, 5, 2),), {"scale_factor": 1.6, "mode": "linear"}),
    Sample(((2, 7, 2),), {"size": 3, "mode": "linear", "align_corners": True}),
    Sample(((2, 4, 2),), {"size": 1, "mode": "linear", "align_corners": True}),
    Sample(((1, 4, 5, 2),), {"size": (7, 3), "mode": "bilinear"}),
    Sample(((1, 4, 5, 2),), {"scale_factor": (1.5, 0.7), "mode": "bilinear",
                             "align_corners": True}),
    Sample(((1, 5, 4, 2),), {"scale_factor": 1.3, "mode": "bilinear",
                             "recompute_scale_factor": True}),
    Sample(((1, 4, 5, 2),), {"size": (7, 3), "mode": "bicubic"}),
    Sample(((1, 5, 4, 2),), {"scale_factor": 1.75, "mode": "bicubic", "align_corners": True}),
    Sample(((1, 6, 3, 2),), {"scale_factor": (0.6, 2.5), "mode": "bicubic"}),
    Sample(((1, 3, 4, 3, 2),), {"size": (5, 3, 4), "mode": "trilinear"}),
    Sample(((1, 3, 4, 3, 2),), {"scale_factor": 1.5, "mode": "trilinear",
                                "align_corners": True}),
    Sample(((1, 3, 4, 3, 2),), {"size": (2, 6, 5), "mode": "nearest"}),
    # torch's copies: every size kept (a linear mode), a 2-D nearest axis kept or doubled
    Sample(((1, 5, 4, 2),), {"scale_factor": 1.1, "mode": "bilinear"}),
    Sample(((1, 3, 4, 2),), {"scale_factor": (1.3, 2.2)}),
    Sample(((2, 7, 2),), {"size": 3, "mode": "area"}),
    Sample(((1, 7, 5, 2),), {"size": (3, 4), "mode": "area"}),
    Sample(((1, 5, 4, 3, 2),), {"size": (2, 3, 3), "mode": "area"}),
)
