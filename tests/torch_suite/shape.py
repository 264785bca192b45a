"""Adapters of the padding, resampling and rearranging rows: ``pad`` (torch's flat list
from the last axis backwards becomes one (before, after) pair per axis; the whole tensor
is handgrad's spatial part of a (1, *shape, 1) map), ``interpolate`` and the upsampling
rows, pixel (un)shuffle, channel shuffle, unfold, on channels-last maps."""

from __future__ import annotations

import numpy as np
import torch

from .helpers import Unsupported, channels_last_kernel, kernel, named, op_row

F = torch.nn.functional
INTERPOLATE = ("input", "size", "scale_factor", "mode", "align_corners",
               "recompute_scale_factor", "antialias")


def pad(sample, x):
    v, _ = named(sample, ("input", "pad", "mode", "value"), (x,))
    flat = tuple(v["pad"])
    if len(flat) % 2 or len(flat) // 2 > x.ndim:
        raise Unsupported("pad length")
    k = len(flat) // 2
    pairs = tuple((flat[2 * i], flat[2 * i + 1]) for i in reversed(range(k)))
    keywords = {"mode": v.get("mode") or "constant"}
    if v.get("value") is not None:
        keywords["value"] = v["value"]
    lead = x.shape[:x.ndim - k]  # the unpadded axes: handgrad's batch
    if k == 0:
        raise Unsupported("no padded axis")
    rows = int(np.prod(lead))
    y, back = kernel("pad", x.reshape(rows, *x.shape[x.ndim - k:], 1), pairs, **keywords)

    def backward(dy):
        return [back(dy.reshape(rows, *dy.shape[dy.ndim - k:], 1))[0].reshape(x.shape)]

    return y.reshape(*lead, *y.shape[1:-1]), backward


def interpolate(mode=None, align_corners=None):
    """``F.interpolate`` (or an upsampling row: its ``mode`` and ``align_corners``)."""

    def run(sample, x):
        v, _ = named(sample, INTERPOLATE, (x,))
        if v.get("antialias"):
            raise Unsupported("antialias")
        keywords = {k: v[k] for k in INTERPOLATE[1:6] if v.get(k) is not None}
        if mode is not None:
            keywords.update(mode=mode, align_corners=align_corners)
        for key in ("size", "scale_factor"):
            if isinstance(keywords.get(key), (tuple, list, torch.Size)):
                keywords[key] = tuple(keywords[key])
        y, back = channels_last_kernel("interpolate", x.ndim - 2, x, **keywords)
        return y, lambda dy: [back(dy)[0]]

    return run


def spatial(name, names, spatial_axes):
    """A channels-last kernel on (N, C, *S) (or unbatched (C, *S)) by torch's names."""

    def run(sample, x):
        v, _ = named(sample, names, (x,))
        nd = spatial_axes or x.ndim - 2
        if x.ndim > nd + 2:
            raise Unsupported("extra batch axes")
        y, back = channels_last_kernel(name, nd, x, *[v[k] for k in names[1:] if k in v])
        return y, lambda dy: [back(dy)[0]]

    return run


def unfold(sample, x):
    """torch's (N, C*kh*kw, L) is handgrad's (N, L, C*kh*kw) transposed."""
    names = ("input", "kernel_size", "dilation", "padding", "stride")
    v, _ = named(sample, names, (x,))
    keywords = {k: v[k] for k in names[2:] if k in v}
    added = x.ndim == 3
    xb = x[None] if added else x
    y, back = kernel("unfold", xb.transpose(0, 2, 3, 1), v["kernel_size"], **keywords)
    y = y.transpose(0, 2, 1)

    def backward(dy):
        dx = back((dy[None] if added else dy).transpose(0, 2, 1))[0].transpose(0, 3, 1, 2)
        return [dx[0] if added else dx]

    return (y[0] if added else y), backward


OPS = {f"pad.{mode}": op_row(pad) for mode in ("constant", "reflect", "replicate",
                                               "replicate_negative", "circular")}
OPS.update({f"interpolate.{mode}": op_row(interpolate())
            for mode in ("nearest", "nearest-exact", "linear", "bilinear", "bicubic",
                         "trilinear", "area")})
OPS["upsample_bilinear"] = op_row(interpolate("bilinear", True))
OPS["upsample_nearest"] = op_row(interpolate("nearest"))
OPS["pixel_shuffle"] = op_row(spatial("pixel_shuffle", ("input", "upscale_factor"), 2))
OPS["pixel_unshuffle"] = op_row(spatial("pixel_unshuffle", ("input", "downscale_factor"), 2))
OPS["channel_shuffle"] = op_row(spatial("channel_shuffle", ("input", "groups"), None))
OPS["unfold"] = op_row(unfold)
