"""The ONNX conversion of the activations, by kernel (``ACTIVATIONS``): the form that
``Activation.onnx_form`` reaches through the graph builder (``g.activation``). The other
layers' forms are declared by the layers (:mod:`handgrad.layers.onnx_forms`).

A converter is ``f(g, layer, v, out_shape) -> Value``: it adds the nodes computing
``layer`` on the graph value ``v`` and returns the result; ``out_shape`` is the
layer's per-example output shape (channels last).
"""

from __future__ import annotations

from ... import ops
from ...layers import REGISTRY
from ...layers.declarations import declared
from .graph import Value, channels_last


def _out(v, name, shape, first=None):
    return Value(name, tuple(shape), v.first if first is None else first)


# ---------------------------------------------------------------------- activations
def activation(g, layer, v, out_shape):
    """The ONNX form declared with the layer's op (``onnx=`` of :mod:`handgrad.ops.declare`);
    an activation along an axis gets channels-last data (the axis refers to that layout)."""
    try:
        decl = ops.declaration(layer.forward_op)
    except KeyError:  # a custom Activation subclass with its own kernel
        raise _no_export(layer) from None
    if decl.onnx is None:
        raise _no_export(layer)
    if "axis" in layer.hyper:
        v = channels_last(g, v)
    return _out(v, decl.onnx(g, v.name, **layer.hyper), out_shape)


def _no_export(layer):
    names = declared(REGISTRY, "onnx_form") + [
        name for name, cls in sorted(REGISTRY.items()) if cls.chain]
    return ValueError(f"export_onnx: {layer.label} ({type(layer).__name__}) has no ONNX "
                      f"export; exportable: {', '.join(names)} and, in a graph Model, "
                      f"{', '.join(declared(REGISTRY, 'onnx_graph_form'))}")
