"""The ONNX forms of the padding and rearranging layers (see :mod:`.onnx_forms` for what a
form receives)."""

from __future__ import annotations

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
