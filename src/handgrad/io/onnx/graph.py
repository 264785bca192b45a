"""The graph being built by the ONNX export: tensors (:class:`Value`), nodes and
initializers (:class:`Graph`) and the layout moves between handgrad's channels-last
and ONNX's channels-first operators."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

import numpy as np


@dataclass(frozen=True)
class Value:
    """A tensor of the graph: its name, handgrad's per-example shape (channels last),
    whether the graph holds it channels first, and whether it is a graph input of
    int64 ids (what an ``Embedding`` takes)."""

    name: str
    shape: tuple
    first: bool = False
    ids: bool = False

    @property
    def rank(self):
        """Rank with the batch axis."""
        return len(self.shape) + 1


class Graph:
    """Nodes and initializers of the graph being built, with unique names. ``reserved``
    are the names of the graph's own inputs and outputs. Equal constants under one name
    hint are stored once, so the calls of a shared layer use the same initializers while
    two layers with equal weights keep their own, named ones."""

    def __init__(self, onnx, dtype, reserved=("input", "output")):
        self.onnx, self.dtype = onnx, np.dtype(dtype)
        self.nodes, self.initializers = [], []
        self._names = set(reserved)
        self._constants = {}  # (hint, dtype, shape, digest of the bytes) -> initializer name

    def fresh(self, hint):
        name, index = hint, 1
        while name in self._names:
            index += 1
            name = f"{hint}_{index}"
        self._names.add(name)
        return name

    def const(self, array, hint="const", dtype=None):
        """An initializer holding ``array`` (in the model's dtype unless ``dtype``)."""
        array = np.ascontiguousarray(np.asarray(array, dtype=dtype or self.dtype))
        key = (hint, array.dtype.str, array.shape,
               hashlib.sha256(array.tobytes()).hexdigest())
        if key not in self._constants:
            self._constants[key] = name = self.fresh(hint)
            self.initializers.append(self.onnx.numpy_helper.from_array(array, name))
        return self._constants[key]

    def param(self, layer, role, array, hint):
        """The initializer of ``layer``'s weight ``array`` named as torch's state dict names
        it, ``{layer name}.{role}`` (role ``weight``, ``bias``, ``running_mean``, ...), so
        ``load_onnx`` names the layer back after it; ``hint`` for a layer without a name."""
        return self.const(array, f"{layer.name}.{role}" if layer.name else hint)

    def ints(self, values, hint="shape"):
        return self.const(np.asarray(values, np.int64), hint, np.int64)

    def op(self, op_type, inputs, hint=None, outputs=1, **attrs):
        """Add a node; returns its output name (a list when ``outputs`` > 1)."""
        names = [self.fresh(hint or op_type.lower()) for _ in range(outputs)]
        node = self.onnx.helper.make_node(op_type, list(inputs), names,
                                          name=self.fresh(f"{op_type}_node"), **attrs)
        self.nodes.append(node)
        return names[0] if outputs == 1 else names

    # the layout services a layer's ``onnx_form`` uses (it receives the graph)
    @staticmethod
    def value(name, shape, first=False, ids=False):
        """A :class:`Value`: the tensor ``name`` of per-example ``shape`` (channels last),
        held channels first when ``first``."""
        return Value(name, tuple(shape), bool(first), ids)

    def channels_first(self, v):
        return channels_first(self, v)

    def channels_last(self, v):
        return channels_last(self, v)


def channels_first(g, v):
    """``v`` with channels on axis 1 (a Transpose if it is channels last)."""
    if v.first or v.rank < 3:
        return v
    perm = [0, v.rank - 1, *range(1, v.rank - 1)]
    return replace(v, name=g.op("Transpose", [v.name], "to_channels_first", perm=perm),
                   first=True)


def channels_last(g, v):
    """``v`` in handgrad's layout (a Transpose if it is channels first)."""
    if not v.first or v.rank < 3:
        return replace(v, first=False)
    perm = [0, *range(2, v.rank), 1]
    return replace(v, name=g.op("Transpose", [v.name], "to_channels_last", perm=perm),
                   first=False)
