"""Padding and rearranging samples and torch counterparts."""

from __future__ import annotations

from ..declare import Sample
from . import channels_first, channels_last


def torch_pad_order(pairs):
    """handgrad's per-axis ``(before, after)`` pairs -> torch's flat last-axis-first tuple."""
    return tuple(p for pair in reversed(pairs) for p in pair)


def torch_pad(F, x, padding, mode="constant", value=0.0):
    """``F.pad`` on moved channels (``value`` for mode constant only, as torch takes it)."""
    n = x.ndim - 2
    if isinstance(padding, int):
        padding = (padding,) * n
    pairs = [(p, p) if isinstance(p, int) else p for p in padding]
    extra = {"value": value} if mode == "constant" else {}
    return channels_last(F.pad(channels_first(x), torch_pad_order(pairs), mode=mode, **extra))


PAD = (
    Sample(((2, 6, 3),), {"padding": ((2, 1),), "mode": "constant", "value": 0.5}),
    Sample(((2, 6, 3),), {"padding": ((3, 5),), "mode": "reflect"}),
    Sample(((2, 4, 3),), {"padding": ((3, 2),), "mode": "replicate"}),
    Sample(((2, 4, 3),), {"padding": ((4, 1),), "mode": "circular"}),
    Sample(((2, 5, 4, 3),), {"padding": ((1, 2), (3, 0)), "mode": "constant"}),
    Sample(((2, 5, 4, 3),), {"padding": ((1, 3), (3, 2)), "mode": "reflect"}),
    Sample(((1, 5, 4, 2),), {"padding": ((2, 3), (0, 4)), "mode": "replicate"}),
    Sample(((1, 5, 4, 2),), {"padding": ((2, 5), (4, 1)), "mode": "circular"}),
    Sample(((1, 3, 4, 5, 2),), {"padding": ((1, 2), (2, 0), (1, 1)), "mode": "constant",
                                "value": -1.0}),
    Sample(((1, 3, 4, 5, 2),), {"padding": ((1, 2), (3, 1), (0, 4)), "mode": "reflect"}),
    Sample(((1, 3, 4, 5, 2),), {"padding": 2, "mode": "replicate"}),
    Sample(((1, 3, 4, 5, 2),), {"padding": ((3, 1), (2, 4), (5, 0)), "mode": "circular"}),
)


def torch_pixel_shuffle(F, x, upscale_factor):
    return channels_last(F.pixel_shuffle(channels_first(x), upscale_factor))


def torch_pixel_unshuffle(F, x, downscale_factor):
    return channels_last(F.pixel_unshuffle(channels_first(x), downscale_factor))


def torch_channel_shuffle(F, x, groups):
    """``nn.ChannelShuffle`` on moved channels (a flat (N, C) input gets a spatial axis)."""
    import torch

    t = x[:, None] if x.ndim == 2 else x
    y = channels_last(torch.nn.ChannelShuffle(groups)(channels_first(t)))
    return y[:, 0] if x.ndim == 2 else y


PIXEL_SHUFFLE = (Sample(((2, 3, 4, 8),), {"upscale_factor": 2}),
                 Sample(((1, 2, 3, 18),), {"upscale_factor": 3}))
PIXEL_UNSHUFFLE = (Sample(((2, 6, 4, 3),), {"downscale_factor": 2}),
                   Sample(((1, 6, 3, 2),), {"downscale_factor": 3}))
CHANNEL_SHUFFLE = (Sample(((2, 4, 6),), {"groups": 2}),
                   Sample(((2, 3, 4, 12),), {"groups": 3}),
                   Sample(((3, 12),), {"groups": 4}),
                   Sample(((1, 2, 3, 2, 6),), {"groups": 6}))


def torch_unfold(F, x, kernel_size, dilation=1, padding=0, stride=1):
    return F.unfold(channels_first(x), kernel_size, dilation, padding, stride).transpose(1, 2)


def torch_fold(F, x, output_size, kernel_size, dilation=1, padding=0, stride=1):
    cols = x.transpose(1, 2)
    return channels_last(F.fold(cols, output_size, kernel_size, dilation, padding, stride))


UNFOLD = (Sample(((2, 5, 6, 3),), {"kernel_size": 2}),
          Sample(((1, 7, 6, 2),), {"kernel_size": (3, 2), "dilation": (1, 2),
                                   "padding": (1, 2), "stride": (2, 1)}))
# L = 4*5 positions of a 2x2 window on 5x6; L = 4*8 of the second window on 7x6
FOLD = (Sample(((2, 20, 12),), {"output_size": (5, 6), "kernel_size": 2}),
        Sample(((1, 32, 12),), {"output_size": (7, 6), "kernel_size": (3, 2),
                                "dilation": (1, 2), "padding": (1, 2), "stride": (2, 1)}))
