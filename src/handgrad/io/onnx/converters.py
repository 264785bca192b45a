"""The ONNX conversion of the activations, by kernel (``ACTIVATIONS``): the form that
``Activation.onnx_form`` reaches through the graph builder (``g.activation``). The other
layers' forms are declared by the layers (:mod:`handgrad.layers.onnx_forms`).

A converter is ``f(g, layer, v, out_shape) -> Value``: it adds the nodes computing
``layer`` on the graph value ``v`` and returns the result; ``out_shape`` is the
layer's per-example output shape (channels last).
"""

from __future__ import annotations

import math

from ... import ops
from ...layers import REGISTRY
from ...layers.declarations import declared
from .graph import Value, channels_last


def _out(v, name, shape, first=None):
    return Value(name, tuple(shape), v.first if first is None else first)


# ---------------------------------------------------------------------- activations
def activation(g, layer, v, out_shape):
    kernel, x = layer.forward_op, v.name
    if kernel is ops.identity:
        return v
    if kernel in AXIS_ACTIVATIONS:  # the axis refers to the channels-last layout
        v = channels_last(g, v)
        name, hint = AXIS_ACTIVATIONS[kernel]
        return _out(v, g.op(name, [v.name], hint, axis=layer.hyper["axis"]), out_shape)
    if kernel not in ACTIVATIONS:
        raise _no_export(layer)
    return _out(v, ACTIVATIONS[kernel](g, x, layer.hyper), out_shape)


def _gelu(g, x, approximate):
    half = g.op("Mul", [x, g.const(0.5, "half")], "half_x")
    if approximate == "none":
        inner = g.op("Erf", [g.op("Mul", [x, g.const(1 / math.sqrt(2), "inv_sqrt2")])], "erf")
    else:
        cube = g.op("Mul", [g.op("Mul", [x, x], "x2"), x], "x3")
        u = g.op("Add", [x, g.op("Mul", [cube, g.const(0.044715, "k")])], "u")
        inner = g.op("Tanh", [g.op("Mul", [u, g.const(math.sqrt(2 / math.pi), "c")])], "t")
    return g.op("Mul", [half, g.op("Add", [inner, g.const(1.0, "one")])], "gelu")


def _softplus(g, x, beta, threshold):
    bx = x if beta == 1 else g.op("Mul", [x, g.const(beta, "beta")], "beta_x")
    limit = g.const(threshold, "threshold")
    soft = g.op("Softplus", [g.op("Min", [bx, limit], "clipped")], "softplus")
    if beta != 1:
        soft = g.op("Div", [soft, g.const(beta, "beta")], "softplus")
    return g.op("Where", [g.op("Greater", [bx, limit], "linear"), x, soft], "softplus")


# kernel -> the nodes of an elementwise activation: f(g, x, hyper) -> output name
ACTIVATIONS = {
    ops.relu: lambda g, x, h: g.op("Relu", [x], "relu"),
    ops.tanh: lambda g, x, h: g.op("Tanh", [x], "tanh"),
    ops.sigmoid: lambda g, x, h: g.op("Sigmoid", [x], "sigmoid"),
    ops.leaky_relu: lambda g, x, h: g.op("LeakyRelu", [x], "leaky_relu",
                                         alpha=h["negative_slope"]),
    ops.elu: lambda g, x, h: g.op("Elu", [x], "elu", alpha=h["alpha"]),
    ops.selu: lambda g, x, h: g.op("Selu", [x], "selu", alpha=ops.activations.SELU_ALPHA,
                                   gamma=ops.activations.SELU_SCALE),
    ops.hard_sigmoid: lambda g, x, h: g.op("HardSigmoid", [x], "hard_sigmoid", alpha=1 / 6,
                                           beta=0.5),
    ops.gelu: lambda g, x, h: _gelu(g, x, h["approximate"]),
    ops.softplus: lambda g, x, h: _softplus(g, x, h["beta"], h["threshold"]),
}
# kernel -> (ONNX op, name hint) of the activations along an axis
AXIS_ACTIVATIONS = {ops.softmax: ("Softmax", "softmax"),
                    ops.log_softmax: ("LogSoftmax", "log_softmax")}


def _no_export(layer):
    names = declared(REGISTRY, "onnx_form") + [
        name for name, cls in sorted(REGISTRY.items()) if cls.chain]
    return ValueError(f"export_onnx: {layer.label} ({type(layer).__name__}) has no ONNX "
                      f"export; exportable: {', '.join(names)} and, in a graph Model, "
                      f"{', '.join(declared(REGISTRY, 'onnx_graph_form'))}")
