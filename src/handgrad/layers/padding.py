"""Padding layers (no parameters): thin wrappers of :func:`handgrad.ops.pad`.

``padding`` is given as torch's modules take it: an int (every side), or a tuple of
``2 * rank`` ints listed from the LAST spatial axis backwards, ``(left, right)`` (1-D),
``(left, right, top, bottom)`` (2-D), ``(left, right, top, bottom, front, back)`` (3-D).
The layer turns it into the op's per-axis ``(before, after)`` pairs in channels-last
axis order: ``((front, back), (top, bottom), (left, right))``.
"""

from __future__ import annotations

import numpy as np

from .. import ops
from .._checks import describe, is_int
from . import declarations as twins
from . import onnx_rearrange
from .base import Layer
from .registry import register


def pad_pairs(label, padding, rank):
    """torch's int or last-axis-first flat tuple -> per-axis ``(before, after)`` pairs."""
    if is_int(padding):
        return ((int(padding), int(padding)),) * rank
    if (not isinstance(padding, (tuple, list)) or len(padding) != 2 * rank
            or not all(is_int(p) for p in padding)):
        order = ("(left, right)", "(left, right, top, bottom)",
                 "(left, right, top, bottom, front, back)")[rank - 1]
        raise TypeError(f"{label}: 'padding' must be an int or a tuple of {2 * rank} ints "
                        f"{order}; received {describe(padding)}")
    pairs = [(int(padding[2 * i]), int(padding[2 * i + 1])) for i in range(rank)]
    return tuple(reversed(pairs))


class PadND(Layer):
    """The padding family: ``ops.pad`` with the layer's ``mode`` on ``rank`` spatial
    axes (see the module doc for ``padding``)."""

    keras_data_format = True  # channels-last maps (see Layer)

    onnx_form = onnx_rearrange.pad
    receptive_field = "pointwise"  # an output reads one input position (or none)
    forward_op = staticmethod(ops.pad)
    backward_op = staticmethod(ops.pad_backward)
    rank = 2
    mode = "constant"

    def __init__(self, padding, value=0.0, *, name=None, **common):
        super().__init__(name=name, **common)
        self.padding = tuple(padding) if isinstance(padding, list) else padding
        self.value = value
        self.pairs = pad_pairs(self.label, self.padding, self.rank)
        example = np.zeros((1, *(max(max(p) for p in self.pairs) + 2,) * self.rank, 1))
        self.forward_op(example, self.pairs, self.mode, value)  # validates the config

    @classmethod
    def from_config(cls, config):
        padding = config.get("padding")
        return cls(**{**config, "padding": tuple(padding) if isinstance(padding, list)
                      else padding})

    def get_config(self):
        config = {**super().get_config(), "padding": self.padding}
        return config if isinstance(self, FixedModePad) else {**config, "value": self.value}

    def _forward(self, x, training):
        if x.ndim != self.rank + 2:
            layout = ("(N, L, C)", "(N, H, W, C)", "(N, D, H, W, C)")[self.rank - 1]
            raise ValueError(f"{self.label}: 'x' must be a {self.rank + 2}-D array {layout}; "
                             f"received shape {tuple(x.shape)}")
        return self.forward_op(x, self.pairs, self.mode, self.value)

    def _backward(self, dy, cache):
        return self.backward_op(dy, cache), {}


class FixedModePad(PadND):
    """A padding layer whose mode fixes the padded values (no ``value`` argument)."""

    def __init__(self, padding, *, name=None, **common):
        super().__init__(padding, name=name, **common)


_LAYOUTS = {1: "(N, L, C)", 2: "(N, H, W, C)", 3: "(N, D, H, W, C)"}
_KINDS = {"Zero": ("constant", "zeros", FixedModePad),
          "Constant": ("constant", "``value``", PadND),
          "Reflection": ("reflect", "the mirror image (edge not repeated)", FixedModePad),
          "Replication": ("replicate", "copies of the edge", FixedModePad),
          "Circular": ("circular", "the opposite end (wrap-around)", FixedModePad)}


def _padding_layer(name):
    """Define and register the layer ``name`` (``<Kind>Pad<rank>D``; torch's module is
    ``<Kind>Pad<rank>d``)."""
    kind, rank = name[:name.index("Pad")], int(name[-2])
    mode, fill, base = _KINDS[kind]
    doc = (f"Pads the spatial axes of {_LAYOUTS[rank]} with {fill}; ``padding``: an int or "
           f"{2 * rank} ints in torch's order (module doc).")
    cls = type(name, (base,), {"__doc__": doc, "mode": mode, "rank": rank,
                               "torch_twin": twins.TorchTwin(f"{name[:-1]}d"),
                               "__module__": __name__, "__qualname__": name})
    return register(cls)


ZeroPad1D = _padding_layer("ZeroPad1D")
ZeroPad2D = _padding_layer("ZeroPad2D")
ZeroPad3D = _padding_layer("ZeroPad3D")
ConstantPad1D = _padding_layer("ConstantPad1D")
ConstantPad2D = _padding_layer("ConstantPad2D")
ConstantPad3D = _padding_layer("ConstantPad3D")
ReflectionPad1D = _padding_layer("ReflectionPad1D")
ReflectionPad2D = _padding_layer("ReflectionPad2D")
ReflectionPad3D = _padding_layer("ReflectionPad3D")
ReplicationPad1D = _padding_layer("ReplicationPad1D")
ReplicationPad2D = _padding_layer("ReplicationPad2D")
ReplicationPad3D = _padding_layer("ReplicationPad3D")
CircularPad1D = _padding_layer("CircularPad1D")
CircularPad2D = _padding_layer("CircularPad2D")
CircularPad3D = _padding_layer("CircularPad3D")
