"""Convolution samples and torch counterparts.

Padding that torch cannot express natively (``"same"`` at stride > 1, ``"causal"``,
per-side pairs) is applied with ``F.pad`` (convolution) or by cropping (transposed
convolution); the pairs come from TensorFlow's and PyTorch's published formulas, not
from handgrad's geometry.
"""

from __future__ import annotations

from ..declare import Sample
from . import channels_first, channels_last


def _tuple(value, nd):
    return (value,) * nd if isinstance(value, int) else tuple(value)


def padding_pairs(padding, nd, spatial, kernel, stride, dilation):
    """(before, after) per spatial axis for every padding form."""
    if padding == "valid":
        return [(0, 0)] * nd
    if padding == "causal":
        return [((kernel[0] - 1) * dilation[0], 0)]
    if padding == "same":
        pairs = []
        for size, k, s, d in zip(spatial, kernel, stride, dilation):
            out = -(-size // s)
            total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
            pairs.append((total // 2, total - total // 2))
        return pairs
    if isinstance(padding, int):
        return [(padding, padding)] * nd
    return [(p, p) if isinstance(p, int) else tuple(p) for p in padding]


def native_padding(padding):
    """Whether torch takes ``padding`` as it is (an int or one int per axis)."""
    return isinstance(padding, int) or (
        isinstance(padding, tuple) and all(isinstance(p, int) for p in padding))


def _weight(w):
    """(*K, A, B) -> torch's (B, A, *K): conv (C_out, C_in/g, *K), transposed (C_in, ...)."""
    nd = w.ndim - 2
    return w.permute(nd + 1, nd, *range(nd)).contiguous()


def torch_conv(F, x, w, b=None, *, stride=1, padding=0, dilation=1, groups=1):
    """``F.conv{1,2,3}d`` on channels-last x and (*K, C_in/g, C_out) w."""
    nd = x.ndim - 2
    stride, dilation = _tuple(stride, nd), _tuple(dilation, nd)
    tx = channels_first(x)
    if not native_padding(padding):
        pairs = padding_pairs(padding, nd, tuple(x.shape[1:-1]), tuple(w.shape[:nd]), stride,
                              dilation)
        tx, padding = F.pad(tx, [v for pair in reversed(pairs) for v in pair]), 0
    fn = getattr(F, f"conv{nd}d")
    return channels_last(fn(tx, _weight(w), b, stride=stride, padding=padding,
                            dilation=dilation, groups=groups))


def torch_conv_transpose(F, x, w, b=None, *, stride=1, padding=0, output_padding=0,
                         dilation=1, groups=1):
    """``F.conv_transpose{1,2,3}d`` on channels-last x and (*K, C_out/g, C_in) w; per-side
    padding crops the full output."""
    nd = x.ndim - 2
    fn = getattr(F, f"conv_transpose{nd}d")
    common = dict(stride=_tuple(stride, nd), output_padding=_tuple(output_padding, nd),
                  dilation=_tuple(dilation, nd), groups=groups)
    if native_padding(padding):
        return channels_last(fn(channels_first(x), _weight(w), b, padding=padding, **common))
    y = fn(channels_first(x), _weight(w), b, **common)
    pairs = padding_pairs(padding, nd, None, None, None, None)
    crop = tuple(slice(lo, y.shape[2 + i] - hi) for i, (lo, hi) in enumerate(pairs))
    return channels_last(y[(slice(None), slice(None), *crop)])


# x (N, H, W, C), w (KH, KW, C // groups, C_out), b
CONV2D = (
    Sample(((2, 6, 7, 3), (3, 3, 3, 4), (4,)), {"padding": 1}),
    Sample(((2, 7, 8, 2), (3, 3, 2, 3), (3,)), {"stride": 2, "padding": "same"}),
    Sample(((2, 8, 7, 2), (3, 2, 2, 3), (3,)), {"stride": 3, "padding": "same"}),
    Sample(((2, 8, 8, 2), (3, 3, 2, 2), (2,)), {"dilation": 2, "padding": (2, 1)}),
    Sample(((2, 6, 6, 4), (2, 3, 2, 6), (6,)),
           {"groups": 2, "padding": ((1, 0), (0, 2)), "stride": (1, 2)}),
    Sample(((2, 6, 6, 3), (3, 3, 1, 6), (6,)), {"groups": 3, "padding": 1}),
    Sample(((2, 5, 4, 2), (7, 6, 2, 3), (3,)), {"padding": 1}),  # kernel = padded input
    Sample(((1, 5, 5, 2), (3, 3, 2, 2), None), {"padding": "valid"}),  # batch 1, no bias
    Sample(((2, 9, 9, 2), (3, 3, 2, 2), (2,)), {"stride": 2, "dilation": 2, "padding": "same"}),
)
# x (N, L, C), w (K, C // groups, C_out)
CONV1D = (
    Sample(((2, 9, 3), (3, 3, 4), (4,)), {"padding": 1}),
    Sample(((2, 10, 2), (4, 2, 3), (3,)), {"stride": 2, "padding": "same"}),
    Sample(((2, 9, 2), (3, 2, 2), (2,)), {"dilation": 2, "padding": "causal"}),
    Sample(((2, 8, 4), (3, 2, 4), (4,)), {"groups": 2, "padding": ((2, 0),)}),
    Sample(((1, 7, 3), (5, 1, 3), None), {"groups": 3, "stride": 3}),
    Sample(((2, 4, 2), (6, 2, 2), (2,)), {"padding": 1}),  # 1-wide output
)
# x (N, H, W, C_in), w (KH, KW, C_out // groups, C_in)
CONV_TRANSPOSE2D = (
    Sample(((2, 4, 5, 3), (4, 4, 2, 3), (2,)), {"stride": 2, "padding": 1}),
    Sample(((2, 4, 4, 2), (3, 3, 3, 2), (3,)), {"stride": 2, "padding": 1, "output_padding": 1}),
    Sample(((2, 4, 4, 2), (3, 3, 2, 2), (2,)), {"dilation": 2, "output_padding": 1, "padding": 1}),
    Sample(((2, 3, 4, 4), (3, 2, 3, 4), (6,)),
           {"groups": 2, "stride": (3, 2), "output_padding": (2, 1)}),
    Sample(((1, 3, 3, 2), (3, 3, 2, 2), None), {"stride": 2, "padding": ((1, 0), (0, 2))}),
    Sample(((2, 3, 3, 4), (3, 3, 1, 4), (4,)),
           {"groups": 4, "stride": 2, "dilation": 2, "output_padding": 1}),
)
CONV_TRANSPOSE1D = (
    Sample(((2, 5, 3), (4, 2, 3), (2,)), {"stride": 2, "padding": 1}),
    Sample(((2, 5, 2), (3, 2, 2), (2,)),
           {"stride": 3, "dilation": 2, "output_padding": 2, "padding": 2}),
    Sample(((1, 4, 4), (3, 1, 4), None), {"groups": 2, "padding": ((0, 2),)}),
)
# x (N, D, H, W, C), w (KD, KH, KW, C // groups, C_out)
CONV3D = (
    Sample(((2, 4, 5, 4, 3), (3, 3, 2, 3, 4), (4,)), {"padding": 1}),
    Sample(((2, 5, 4, 6, 2), (2, 3, 3, 2, 3), (3,)), {"stride": (2, 1, 2), "padding": "same"}),
    Sample(((1, 5, 5, 5, 4), (2, 2, 3, 2, 4), None),
           {"groups": 2, "dilation": (2, 1, 1), "padding": ((1, 0), (0, 1), (2, 1))}),
    Sample(((2, 4, 4, 3, 3), (3, 2, 2, 1, 6), (6,)), {"groups": 3, "stride": 2, "padding": 1}),
)
# x (N, D, H, W, C_in), w (KD, KH, KW, C_out // groups, C_in)
CONV_TRANSPOSE3D = (
    Sample(((2, 3, 2, 3, 3), (3, 2, 3, 2, 3), (2,)), {"stride": 2, "padding": 1}),
    Sample(((1, 2, 3, 2, 4), (2, 3, 2, 3, 4), (6,)),
           {"groups": 2, "stride": (2, 1, 3), "output_padding": (1, 0, 2), "dilation": (1, 2, 1)}),
    Sample(((2, 2, 2, 2, 2), (3, 3, 3, 2, 2), None),
           {"stride": 2, "padding": ((1, 0), (0, 2), (1, 1))}),
)
