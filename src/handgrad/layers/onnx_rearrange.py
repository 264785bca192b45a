"""The ONNX forms of the padding and rearranging layers (see :mod:`.onnx_forms` for what a
form receives)."""

from __future__ import annotations

import numpy as np

from .onnx_forms import _out

# ------------------------------------------------------------------------- padding
ONNX_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}


def pad(layer, g, v):
    """Pad (constant, reflect, edge); circular as Slice + Concat per axis (ONNX's
    ``wrap`` mode needs opset 19)."""
    first_axis = 2 if v.first else 1
    if layer.mode != "circular":
        begins = [0] * v.rank
        ends = [0] * v.rank
        for i, (before, after) in enumerate(layer.pairs):
            begins[first_axis + i], ends[first_axis + i] = before, after
        inputs = [v.name, g.ints(begins + ends, "pads")]
        if layer.mode == "constant":
            inputs.append(g.const(layer.value, "pad_value"))
        return _out(layer, g, v, g.op("Pad", inputs, "pad", mode=ONNX_PAD_MODES[layer.mode]))
    y = v.name
    for i, (before, after) in enumerate(layer.pairs):
        axis, size = first_axis + i, v.shape[i]
        parts = [g.op("Slice", [y, g.ints([size - before]), g.ints([size]), g.ints([axis])],
                      "wrap_head")] if before else []
        parts.append(y)
        if after:
            parts.append(g.op("Slice", [y, g.ints([0]), g.ints([after]), g.ints([axis])],
                              "wrap_tail"))
        if len(parts) > 1:
            y = g.op("Concat", parts, "wrap", axis=axis)
    return _out(layer, g, v, y)


# ----------------------------------------------------------------------- rearranging
def pixel_shuffle(layer, g, v):
    """DepthToSpace in CRD mode (torch's (C, r, r) channel order), channels first."""
    v = g.channels_first(v)
    return _out(layer, g, v, g.op("DepthToSpace", [v.name], "pixel_shuffle",
                                  blocksize=layer.factor, mode="CRD"))


def pixel_unshuffle(layer, g, v):
    """(N, C, H*r, W*r) -> (N, C, H, r, W, r) -> (N, C, r, r, H, W) -> (N, C*r*r, H, W)
    (SpaceToDepth orders channels (r, r, C), not torch's (C, r, r))."""
    v = g.channels_first(v)
    r, (hr, wr, c) = layer.factor, v.shape
    y = g.op("Reshape", [v.name, g.ints([0, c, hr // r, r, wr // r, r])], "unshuffle")
    y = g.op("Transpose", [y], "unshuffle", perm=[0, 1, 3, 5, 2, 4])
    y = g.op("Reshape", [y, g.ints([0, c * r * r, hr // r, wr // r])], "unshuffle")
    return _out(layer, g, v, y)


def channel_shuffle(layer, g, v):
    """Channels as a (groups, C // groups) matrix, transposed (channels last)."""
    v = g.channels_last(v)
    *spatial, c = v.shape
    blocks = [0, *spatial, layer.groups, c // layer.groups]
    y = g.op("Reshape", [v.name, g.ints(blocks)], "channel_shuffle")
    y = g.op("Transpose", [y], "channel_shuffle",
             perm=[*range(len(blocks) - 2), len(blocks) - 1, len(blocks) - 2])
    return _out(layer, g, v, g.op("Reshape", [y, g.ints([0, *v.shape])], "channel_shuffle"))


# ------------------------------------------------------------------- unfold and fold
def _one_hot_taps(g, channels, axes):
    """The (C*K, 1, kh, kw) weight whose group-c convolution copies tap t of channel c
    to output channel c*K + t (torch's (C, kh, kw) column order)."""
    kernel = [a.kernel for a in axes]
    taps = np.eye(int(np.prod(kernel))).reshape(-1, 1, *kernel)
    return g.const(np.tile(taps, (channels, 1, 1, 1)), "taps")


def _window_attrs(geometry):
    axes = geometry.axes
    return {"strides": [a.stride for a in axes], "dilations": [a.dilation for a in axes],
            "pads": list(geometry.pads_begin) + [after for _, after in geometry.padding]}


def unfold(layer, g, v):
    """Conv with one-hot taps (group = C), then (N, C*K, OH, OW) -> (N, L, C*K)."""
    v = g.channels_first(v)
    *spatial, c = v.shape
    geometry = layer.geometry(tuple(spatial))
    attrs = _window_attrs(geometry)
    y = g.op("Conv", [v.name, _one_hot_taps(g, c, geometry.axes)], "unfold",
             group=c, kernel_shape=[a.kernel for a in geometry.axes], **attrs)
    out = layer.output_shape(v.shape)
    y = g.op("Reshape", [y, g.ints([0, out[1], out[0]])], "unfold")
    return g.value(g.op("Transpose", [y], "unfold", perm=[0, 2, 1]), out, False)


def fold(layer, g, v):
    """(N, L, C*K) -> (N, C*K, OH, OW), then ConvTranspose with one-hot taps (group = C)."""
    v = g.channels_last(v)
    geometry = layer.geometry(tuple(layer.kwargs["output_size"]))
    axes = geometry.axes
    out = layer.output_shape(v.shape)
    y = g.op("Transpose", [v.name], "fold", perm=[0, 2, 1])
    y = g.op("Reshape", [y, g.ints([0, v.shape[1], *(a.size_out for a in axes)])], "fold")
    attrs = _window_attrs(geometry)
    extra = [after - a.pad_after for a, (_, after) in zip(axes, geometry.padding)]
    y = g.op("ConvTranspose", [y, _one_hot_taps(g, out[-1], axes)], "fold",
             group=out[-1], kernel_shape=[a.kernel for a in axes],
             output_padding=extra, **attrs)
    return g.value(y, out, True)
