"""One ONNX converter per layer type, for :mod:`handgrad.io.onnx.export` (see its table).

A converter is ``f(g, layer, v, out_shape) -> Value``: it adds the nodes computing
``layer`` on the graph value ``v`` and returns the result; ``out_shape`` is the
layer's per-example output shape (channels last).
"""

from __future__ import annotations

import math

import numpy as np

from ... import ops
from ...layers import (
    Activation,
    BatchNorm,
    ConvND,
    Dense,
    Dropout,
    Embedding,
    Flatten,
    GlobalPool,
    GroupNorm,
    InstanceNorm,
    LayerNorm,
    MultiHeadAttention,
    Pool,
    Recurrent,
    Reshape,
    TiedDense,
)
from ..torch_layouts import conv_weight_perm
from .graph import Value, channels_first, channels_last


def _out(v, name, shape, first=None):
    return Value(name, tuple(shape), v.first if first is None else first)


# ------------------------------------------------------------------ dense and shapes
def dense(g, layer, v, out_shape):
    v = channels_last(g, v)
    y = g.op("MatMul", [v.name, g.const(layer.parameters["W"], "W")], "dense")
    if layer.use_bias:
        y = g.op("Add", [y, g.const(layer.parameters["b"], "b")], "dense")
    return _out(v, y, out_shape)


def tied_dense(g, layer, v, out_shape):
    """MatMul with the transpose of the Embedding's table (the Gather's initializer)."""
    v = channels_last(g, v)
    table_t = g.op("Transpose", [g.const(layer.table, "W")], "tied_table", perm=[1, 0])
    y = g.op("MatMul", [v.name, table_t], "tied_dense")
    if layer.use_bias:
        y = g.op("Add", [y, g.const(layer.parameters["b"], "b")], "tied_dense")
    return _out(v, y, out_shape)


def flatten(g, layer, v, out_shape):
    v = channels_last(g, v)
    return _out(v, g.op("Flatten", [v.name], "flatten", axis=1), out_shape)


def reshape(g, layer, v, out_shape):
    v = channels_last(g, v)
    return _out(v, g.op("Reshape", [v.name, g.ints([0, *layer.shape])], "reshape"), out_shape)


def dropout(g, layer, v, out_shape):
    return v


# ------------------------------------------------------------- convolution, pooling
def conv(g, layer, v, out_shape):
    v = channels_first(g, v)
    w, n = layer.parameters["W"], layer.rank
    spatial, kernel = v.shape[:-1], w.shape[:n]
    if layer.transposed:
        geometry = ops.conv_transpose_geometry(
            spatial, kernel, stride=layer.stride, padding=layer.padding,
            output_padding=layer.output_padding, dilation=layer.dilation, op=layer.label)
        # the adjoint convolution's pad_after is the end padding minus output_padding
        extra = {"output_padding": [max(-a.pad_after, 0) for a in geometry.axes]}
    else:
        geometry = ops.conv_geometry(spatial, kernel, stride=layer.stride,
                                     padding=layer.padding, dilation=layer.dilation,
                                     op=layer.label)
        extra = {}
    inputs = [v.name, g.const(w.transpose(conv_weight_perm(n)), "W")]
    if layer.use_bias:
        inputs.append(g.const(layer.parameters["b"], "b"))
    y = g.op("ConvTranspose" if layer.transposed else "Conv", inputs, "conv",
             kernel_shape=list(kernel), strides=list(layer.stride),
             dilations=list(layer.dilation), group=layer.groups,
             pads=[*geometry.pads_begin, *geometry.pads_end], **extra)
    return _out(v, y, out_shape)


MAX_POOLS = (ops.max_pool1d, ops.max_pool2d)


def pool(g, layer, v, out_shape):
    v = channels_first(g, v)
    kw = layer.kwargs
    geometry = ops.pool_geometry(v.shape[:-1], kw["kernel_size"], stride=kw["stride"],
                                 padding=kw["padding"], dilation=kw.get("dilation", 1),
                                 ceil_mode=kw["ceil_mode"], op=layer.label)
    axes = geometry.axes
    attrs = {"kernel_shape": [a.kernel for a in axes], "strides": [a.stride for a in axes]}
    begins, ends = list(geometry.pads_begin), list(geometry.pads_end)
    x = v.name
    if layer.forward_op in MAX_POOLS:
        y = g.op("MaxPool", [x], "max_pool", dilations=[a.dilation for a in axes],
                 pads=begins + ends, **attrs)
        return _out(v, y, out_shape)
    if kw["count_include_pad"] and any(p for pair in geometry.padding for p in pair):
        # zero padding that counts in the divisor, then windows clipped to it
        user_ends = [after for _, after in geometry.padding]
        x = g.op("Pad", [x, g.ints([0, 0, *begins, 0, 0, *user_ends], "pads")], "pad")
        ends = [max(e - u, 0) for e, u in zip(ends, user_ends)]
        begins = [0] * len(axes)
    y = g.op("AveragePool", [x], "avg_pool", pads=begins + ends, count_include_pad=0,
             **attrs)
    return _out(v, y, out_shape)


def global_pool(g, layer, v, out_shape):
    keep = layer.kwargs["keepdims"]
    axes = list(range(2, v.rank)) if v.first else list(range(1, v.rank - 1))
    op = "ReduceMax" if layer.forward_op is ops.global_max_pool else "ReduceMean"
    y = g.op(op, [v.name], "global_pool", axes=axes, keepdims=int(keep))
    return _out(v, y, out_shape, v.first and keep)


# -------------------------------------------------------------------- normalization
def _channel(g, v, vector, hint):
    """A per-channel constant shaped to broadcast against ``v`` in its layout."""
    shape = (-1, *([1] * (v.rank - 2))) if v.first else (-1,)
    return g.const(np.reshape(vector, shape), hint)


def _standardize(g, x, axes, eps):
    """(x - mean) / sqrt(var + eps) over ``axes`` (biased variance)."""
    mean = g.op("ReduceMean", [x], "mean", axes=axes, keepdims=1)
    centered = g.op("Sub", [x, mean], "centered")
    var = g.op("ReduceMean", [g.op("Mul", [centered, centered], "square")], "var", axes=axes,
               keepdims=1)
    std = g.op("Sqrt", [g.op("Add", [var, g.const(eps, "eps")], "var_eps")], "std")
    return g.op("Div", [centered, std], "normalized")


def _affine(g, layer, v, y):
    gamma, beta = layer.parameters.get("gamma"), layer.parameters.get("beta")
    if gamma is not None:
        y = g.op("Mul", [y, _channel(g, v, gamma, "gamma")], "scaled")
    if beta is not None:
        y = g.op("Add", [y, _channel(g, v, beta, "beta")], "shifted")
    return y


def running_norm(g, layer, v, out_shape):
    """Batch or instance norm: running statistics if kept, else the batch's/example's."""
    mean = layer.buffers.get("running_mean")
    if mean is not None:
        v = channels_first(g, v)
        channels = mean.shape[0]
        gamma, beta = layer.parameters.get("gamma"), layer.parameters.get("beta")
        inputs = [v.name, g.const(np.ones(channels) if gamma is None else gamma, "gamma"),
                  g.const(np.zeros(channels) if beta is None else beta, "beta"),
                  g.const(mean, "running_mean"), g.const(layer.buffers["running_var"],
                                                         "running_var")]
        y = g.op("BatchNormalization", inputs, "batch_norm", epsilon=layer.eps)
        return _out(v, y, out_shape)
    spatial = list(range(2, v.rank)) if v.first else list(range(1, v.rank - 1))
    axes = spatial if isinstance(layer, InstanceNorm) else [0, *spatial]
    return _out(v, _affine(g, layer, v, _standardize(g, v.name, axes, layer.eps)), out_shape)


def group_norm(g, layer, v, out_shape):
    v = channels_last(g, v)
    *spatial, channels = v.shape
    groups = layer.num_groups
    x = g.op("Reshape", [v.name, g.ints([0, *spatial, groups, channels // groups])], "groups")
    y = _standardize(g, x, [*range(1, v.rank - 1), v.rank], layer.eps)
    y = g.op("Reshape", [y, g.ints([0, *v.shape])], "ungroup")
    return _out(v, _affine(g, layer, v, y), out_shape)


def layer_norm(g, layer, v, out_shape):
    v = channels_last(g, v)
    shape = layer.param_shape(v.shape)
    gamma, beta = layer.parameters.get("gamma"), layer.parameters.get("beta")
    inputs = [v.name, g.const(np.ones(shape) if gamma is None else gamma, "gamma")]
    if beta is not None:
        inputs.append(g.const(beta, "beta"))
    y = g.op("LayerNormalization", inputs, "layer_norm", axis=-len(shape), epsilon=layer.eps)
    return _out(v, y, out_shape)


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


# ------------------------------------------------------------ embedding, sequences
def embedding(g, layer, v, out_shape):
    if not v.ids:
        raise ValueError(f"export_onnx: {layer.label} must be the model's first layer (its "
                         f"input is the graph's int64 ids)")
    return _out(v, g.op("Gather", [g.const(layer.parameters["W"], "W"), v.name], "embedding",
                        axis=0), out_shape, False)


_GATE_ORDER = {"rnn": [0], "lstm": [0, 3, 1, 2], "gru": [1, 0, 2]}  # torch -> ONNX blocks


def _gates(array, cell):
    """Reorder the gate blocks of the last axis from torch's order to ONNX's."""
    blocks = np.split(array, len(_GATE_ORDER[cell]), axis=-1)
    return np.concatenate([blocks[i] for i in _GATE_ORDER[cell]], axis=-1)


def recurrent(g, layer, v, out_shape):
    v = channels_last(g, v)
    p, cell, hidden, dirs = layer.parameters, layer.cell, layer.hidden_size, layer.directions
    x = g.op("Transpose", [v.name], "time_major", perm=[1, 0, 2])  # (T, N, F)
    attrs = {"hidden_size": hidden,
             "direction": "bidirectional" if dirs == 2 else "forward"}
    if cell == "gru":
        attrs["linear_before_reset"] = 1
    if cell == "rnn":
        attrs["activations"] = ["Relu" if layer.nonlinearity == "relu" else "Tanh"] * dirs
    for k in range(layer.num_layers):
        s = [layer.parameter_suffix(k, d) for d in range(dirs)]
        w = np.stack([_gates(p[f"W_ih{sfx}"], cell).T for sfx in s])
        r = np.stack([_gates(p[f"W_hh{sfx}"], cell).T for sfx in s])
        inputs = [x, g.const(w, "W"), g.const(r, "R")]
        if layer.use_bias:
            inputs.append(g.const(np.stack([np.concatenate(
                [_gates(p[f"b_ih{sfx}"], cell), _gates(p[f"b_hh{sfx}"], cell)]) for sfx in s]),
                "B"))
        y, y_h = g.op(cell.upper(), inputs, cell, outputs=2, **attrs)  # (T, D, N, H), (D, N, H)
        y = g.op("Transpose", [y], "y", perm=[0, 2, 1, 3])
        x = g.op("Reshape", [y, g.ints([0, 0, dirs * hidden])], "y")  # (T, N, D*H)
    if layer.return_sequences:
        out = g.op("Transpose", [x], "batch_major", perm=[1, 0, 2])
    else:
        last = g.op("Transpose", [y_h], "h_n", perm=[1, 0, 2])
        out = g.op("Reshape", [last, g.ints([0, dirs * hidden])], "h_n")
    return _out(v, out, out_shape)


def attention(g, layer, v, out_shape, key=None, value=None):
    """Attention of the query ``v`` to ``key`` and ``value`` (None: self-attention, or
    ``value = key``): heads split by Reshape/Transpose, softmax(q k^T / sqrt(d)) v."""
    v = channels_last(g, v)
    key = v if key is None else channels_last(g, key)
    value = key if value is None else channels_last(g, value)
    p, e, heads = layer.parameters, layer.embed_dim, layer.num_heads
    steps, d = v.shape[0], e // heads
    if layer.packed:
        weights = np.split(p["W_in"], 3, axis=1)
        biases = np.split(p["b_in"], 3) if layer.use_bias else [None] * 3
    else:
        weights = [p["W_q"], p["W_k"], p["W_v"]]
        biases = [p.get("b_q"), p.get("b_k"), p.get("b_v")]
    split = g.ints([0, -1, heads, d], "heads")
    parts = []
    for role, source, w, b, perm in zip("qkv", (v, key, value), weights, biases,
                                        ([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3])):
        y = g.op("MatMul", [source.name, g.const(w, f"W_{role}")], role)
        if b is not None:
            y = g.op("Add", [y, g.const(b, f"b_{role}")], role)
        y = g.op("Reshape", [y, split], role)
        parts.append(g.op("Transpose", [y], role, perm=perm))  # k: (N, H, d, T)
    scores = g.op("MatMul", [parts[0], parts[1]], "scores")
    scores = g.op("Mul", [scores, g.const(1 / math.sqrt(d), "scale")], "scores")
    if layer.causal:  # query i sees keys j <= i
        mask = np.triu(np.full((steps, key.shape[0]), -np.inf), k=1)
        scores = g.op("Add", [scores, g.const(mask, "causal_mask")], "scores")
    probs = g.op("Softmax", [scores], "attention", axis=-1)
    ctx = g.op("Transpose", [g.op("MatMul", [probs, parts[2]], "context")], "context",
               perm=[0, 2, 1, 3])
    ctx = g.op("Reshape", [ctx, g.ints([0, steps, e])], "context")
    y = g.op("MatMul", [ctx, g.const(p["W_out"], "W_out")], "attention_out")
    if layer.use_bias:
        y = g.op("Add", [y, g.const(p["b_out"], "b_out")], "attention_out")
    return _out(v, y, out_shape)


CONVERTERS = {
    Dense: dense, TiedDense: tied_dense, Flatten: flatten, Reshape: reshape, Dropout: dropout,
    ConvND: conv, GlobalPool: global_pool, Pool: pool, BatchNorm: running_norm,
    InstanceNorm: running_norm, GroupNorm: group_norm, LayerNorm: layer_norm,
    Activation: activation, Embedding: embedding, Recurrent: recurrent,
    MultiHeadAttention: attention,
}


def _no_export(layer):
    return ValueError(f"export_onnx: {layer.label} ({type(layer).__name__}) has no ONNX "
                      f"export; exportable: Sequential, graph Model, Residual, Add, Multiply, "
                      f"Concatenate, Dense, TiedDense, Flatten, Reshape, Dropout, convolutions, "
                      f"pooling, normalizations, activations, Embedding, RNN/LSTM/GRU and "
                      f"MultiHeadAttention")


def converter(layer):
    """The converter of ``layer``'s class (the nearest registered base class)."""
    for cls in type(layer).__mro__:
        if cls in CONVERTERS:
            return CONVERTERS[cls]
    raise _no_export(layer)
