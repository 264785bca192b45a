"""torch's resizing functions as handgrad layers, for :mod:`.torch_convert`.

Registered into :data:`.torch_convert_functions.FUNCTIONS`. ``F.interpolate`` (and its
alias ``F.upsample``) becomes an ``Upsample`` layer on channels-last maps: ``size`` as
recorded (a size read from ``x.shape`` is a constant of the traced input),
``scale_factor`` as given, or with ``recompute_scale_factor=True`` the output size torch
computed (torch then maps coordinates by the sizes, as ``size`` does).
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

