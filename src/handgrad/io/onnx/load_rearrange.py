"""The ONNX import's converter of DepthToSpace (torch's ``PixelShuffle``); it registers into
:data:`.load_ops.CONVERTERS` (layouts as in :mod:`.load`)."""

from __future__ import annotations

from ... import layers as L
from .held import channels_last_perm
from .load_ops import attrs, converts


@converts("DepthToSpace")
def depth_to_space(ld, node):
    """A ``PixelShuffle`` of the map held channels last, for mode CRD (torch's (C, r, r)
    channel order); DCR orders the channels (r, r, C), which handgrad's layer does not."""
    held, a = ld.materialize(ld.get(node.input[0])), attrs(node)
    mode = a.get("mode", b"DCR")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode != "CRD" or held.rank != 4:
        raise ld.fail(f"mode {mode} on a rank-{held.rank} tensor: handgrad's PixelShuffle is "
                      f"mode CRD (torch's channel order) on (N, C, H, W) maps")
    layer = L.PixelShuffle(int(a["blocksize"]))
    ld.set_out(node, ld.call(layer, held, channels_last_perm(held.rank)))
