"""Resampling layers (no parameters): ``Upsample`` and torch's two aliases, thin wrappers
of :func:`handgrad.ops.interpolate`, with their ONNX form (``Resize``)."""

from __future__ import annotations

import math

import numpy as np

from .. import ops
from . import declarations as twins
from .base import Layer
from .registry import register

#: mode -> Resize attributes matching torch (nearest modes export as Gathers; area has
#: no exact form)
_RESIZE = {
    "linear": {"mode": "linear"}, "bilinear": {"mode": "linear"},
    "trilinear": {"mode": "linear"},
    "bicubic": {"mode": "cubic", "cubic_coeff_a": -0.75, "exclude_outside": 0},
}


@register
class Upsample(Layer):
    """Resize (N, *S, C) maps (1 to 3 spatial axes) as torch's ``nn.Upsample``: exactly one
    of ``size`` / ``scale_factor``; ``mode`` nearest, nearest-exact, linear, bilinear,
    bicubic, trilinear or area; ``align_corners`` for the interpolating modes."""

    keras_data_format = True  # channels-last maps (see Layer)

    torch_twin = twins.TorchTwin("Upsample", layout=twins.MAPS)
    receptive_field = "n/a"

    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None, *,
                 name=None, **common):
        super().__init__(name=name, **common)
        if isinstance(size, list):
            size = tuple(size)
        if isinstance(scale_factor, list):
            scale_factor = tuple(scale_factor)
        self.kwargs = {"size": size, "scale_factor": scale_factor, "mode": mode,
                       "align_corners": align_corners}
        ops.interpolate(self._example_input(), **self.kwargs)  # validates the config

    def _example_input(self):
        """A small input that every valid configuration accepts (large enough that the
        scale factors give outputs of at least one position)."""
        size, factor, mode = self.kwargs["size"], self.kwargs["scale_factor"], self.kwargs["mode"]
        rank = next((len(v) for v in (size, factor) if isinstance(v, tuple)),
                    {"linear": 1, "trilinear": 3}.get(mode, 2))
        factors = factor if isinstance(factor, tuple) else (factor,) * rank
        spatial = [max(4, math.ceil(1 / f)) if isinstance(f, (int, float)) and 0 < f < 1
                   else 4 for f in factors]
        return np.zeros((1, *(spatial[:3] or [4]), 1))

    def get_config(self):
        return {**super().get_config(), **self.kwargs}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def _forward(self, x, training):
        return ops.interpolate(x, **self.kwargs)

    def _backward(self, dy, cache):
        return ops.interpolate_backward(dy, cache), {}

    def onnx_form(self, g, v):
        """Nearest modes: one ``Gather`` per axis of the kernel's own indices (exact in any
        runtime: ``Resize`` divides by a float32 scale where torch multiplies by its
        inverse, and floors differently at exact integers). Linear and cubic modes:
        ``Resize`` with torch's coordinates (``half_pixel`` or ``align_corners``; with a
        scale factor, the factor itself, which is the scale torch's kernel uses)."""
        mode, align = self.kwargs["mode"], bool(self.kwargs["align_corners"])
        if mode == "area":
            raise ValueError(f"{self.label}: mode 'area' has no exact ONNX Resize form "
                             f"(it is adaptive average pooling); use another mode to export")
        v = g.channels_first(v)
        shape_in, shape_out = v.shape[:-1], self.output_shape(v.shape)[:-1]
        if mode in ("nearest", "nearest-exact"):
            _, cache = ops.interpolate(np.zeros((1, *v.shape)), **self.kwargs)
            y = v.name
            for axis, axis_map in enumerate(cache.maps, start=2):
                y = g.op("Gather", [y, g.ints(axis_map.index[0])], "resize", axis=axis)
        elif shape_in == shape_out and mode != "bicubic":  # torch copies
            y = g.op("Identity", [v.name], "resize")
        else:
            y = self._onnx_resize(g, v, shape_out, align)
        return g.value(y, (*shape_out, v.shape[-1]), True)

    def _onnx_resize(self, g, v, shape_out, align):
        attrs = dict(_RESIZE[self.kwargs["mode"]])
        attrs["coordinate_transformation_mode"] = "align_corners" if align else "half_pixel"
        factor = self.kwargs["scale_factor"]
        roi = g.const(np.zeros(0, np.float32), "roi", np.float32)
        if factor is None or align:  # the scale is out / in, as torch computes it
            batch = g.op("Slice", [g.op("Shape", [v.name], "shape"), g.ints([0]),
                                   g.ints([2])], "batch_channels")
            sizes = g.op("Concat", [batch, g.ints(list(shape_out))], "sizes", axis=0)
            none = g.const(np.zeros(0, np.float32), "no_scales", np.float32)
            return g.op("Resize", [v.name, roi, none, sizes], "resize", **attrs)
        factors = np.broadcast_to(np.asarray(factor, np.float32), (len(shape_out),))
        scales = g.const(np.concatenate([[1, 1], factors]).astype(np.float32), "scales",
                         np.float32)
        return g.op("Resize", [v.name, roi, scales], "resize", **attrs)


class FixedModeUpsample(Upsample):
    """An :class:`Upsample` whose mode is its class's (torch's aliases)."""

    def get_config(self):
        config = super().get_config()
        del config["mode"], config["align_corners"]
        return config


@register
class UpsamplingNearest2D(FixedModeUpsample):
    """torch's ``nn.UpsamplingNearest2d``: :class:`Upsample` with mode 'nearest'."""

    torch_twin = twins.TorchTwin("UpsamplingNearest2d", layout=twins.MAPS)

    def __init__(self, size=None, scale_factor=None, *, name=None, **common):
        super().__init__(size, scale_factor, "nearest", name=name, **common)


@register
class UpsamplingBilinear2D(FixedModeUpsample):
    """torch's ``nn.UpsamplingBilinear2d``: :class:`Upsample` with mode 'bilinear' and
    ``align_corners=True``."""

    torch_twin = twins.TorchTwin("UpsamplingBilinear2d", layout=twins.MAPS)

    def __init__(self, size=None, scale_factor=None, *, name=None, **common):
        super().__init__(size, scale_factor, "bilinear", True, name=name, **common)
