"""torch's resizing functions as handgrad layers, for :mod:`.torch_convert`.

Registered into :data:`.torch_convert_functions.FUNCTIONS`. ``F.interpolate`` (and its
alias ``F.upsample``) becomes an ``Upsample`` layer on channels-last maps: ``size`` as
recorded (a size read from ``x.shape`` is a constant of the traced input),
``scale_factor`` as given, or with ``recompute_scale_factor=True`` the output size torch
computed (torch then maps coordinates by the sizes, as ``size`` does). ``F.pad`` of the
spatial axes becomes the padding layer of its mode (``ConstantPad2D``, ``ReflectionPad2D``,
...); torch's padding modules are in :data:`.torch_convert_ops.MODULES`.
"""

from __future__ import annotations

import inspect

from .. import layers as L
from .torch_convert_functions import handles
from .torch_convert_ops import Value


@handles("interpolate", "upsample")
def interpolate(conv, node, args, kwargs):
    import torch.nn.functional as F
    try:
        bound = inspect.signature(F.interpolate).bind(*args, **kwargs)
    except TypeError as error:
        conv.refuse(node, f"interpolate with arguments it does not take ({error})")
    given = bound.arguments
    x = given["input"]
    if not isinstance(x, Value) or len(x.shape) not in (3, 4, 5):
        conv.refuse(node, "interpolate of a tensor of rank 3 to 5 (N, C, *S) is converted")
    if given.get("antialias"):
        conv.refuse(node, "interpolate with antialias=True (handgrad's Upsample does not "
                          "low-pass filter)")
    size, factor = given.get("size"), given.get("scale_factor")
    if factor is not None and given.get("recompute_scale_factor"):
        size, factor = tuple(conv.runtime[node].shape[2:]), None
    if size is not None:
        size = int(size) if isinstance(size, int) else tuple(int(s) for s in size)
    if isinstance(factor, (list, tuple)):
        factor = tuple(float(f) for f in factor)
    try:
        layer = L.Upsample(size, factor, given.get("mode", "nearest"),
                           given.get("align_corners"))
    except (TypeError, ValueError) as error:
        conv.refuse(node, f"interpolate with {error}")
    return conv.call(layer, node, [conv.as_layout(x, "cf", node)], "cf")



#: F.pad's mode -> the handgrad padding family (``<kind>Pad<rank>D``)
PAD_KINDS = {"constant": "Constant", "reflect": "Reflection", "replicate": "Replication",
             "circular": "Circular"}


@handles("pad")
def pad(conv, node, args, kwargs):
    """``F.pad(x, pad, mode, value)``: ``pad`` lists (before, after) pairs from the last
    axis backwards; pairs for fewer axes than the spatial ones leave the others as they
    are, pairs for the channel or batch axis are refused."""
    given = {**dict(zip(("input", "pad", "mode", "value"), args)), **kwargs}
    x, widths = given["input"], tuple(int(w) for w in given["pad"])
    rank, mode = len(x.shape) - 2, given.get("mode", "constant")
    if rank not in (1, 2, 3) or len(widths) % 2 or not 0 < len(widths) <= 2 * rank:
        conv.refuse(node, f"pad of {len(widths)} widths on a tensor of shape {x.shape} "
                          f"(converted: widths for the spatial axes of (N, C, *S), S of "
                          f"rank 1 to 3)")
    if mode not in PAD_KINDS:
        conv.refuse(node, f"pad with mode {mode!r} (converted: {sorted(PAD_KINDS)})")
    widths += (0,) * (2 * rank - len(widths))
    cls = getattr(L, f"{PAD_KINDS[mode]}Pad{rank}D")
    value = given.get("value")
    layer = cls(widths, 0.0 if value is None else float(value)) if mode == "constant" \
        else cls(widths)
    return conv.call(layer, node, [conv.as_layout(x, "cf", node)], "cf")
