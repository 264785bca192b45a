"""One ONNX converter per layer type, for :mod:`handgrad.io.onnx.export` (see its table).

A converter is ``f(g, layer, v, out_shape) -> Value``: it adds the nodes computing
``layer`` on the graph value ``v`` and returns the result; ``out_shape`` is the
layer's per-example output shape (channels last).
"""

from __future__ import annotations

import math

import numpy as np

from ...layers import activations as A
from ...layers.attention import MultiHeadAttention
from ...layers.conv import ConvND
from ...layers.core import Dense, Dropout, Flatten, Reshape
from ...layers.embedding import Embedding
from ...layers.normalization import BatchNorm, GroupNorm, InstanceNorm, LayerNorm
from ...layers.pooling import GlobalPool, Pool
from ...layers.recurrent import Recurrent
from ...ops import activations as act_ops
from ...ops._args.conv import prepare_conv, prepare_conv_transpose
from ...ops._args.pool import prepare_pool
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


def flatten(g, layer, v, out_shape):
    v = channels_last(g, v)
    return _out(v, g.op("Flatten", [v.name], "flatten", axis=1), out_shape)


def reshape(g, layer, v, out_shape):
    v = channels_last(g, v)
    return _out(v, g.op("Reshape", [v.name, g.ints([0, *layer.shape])], "reshape"), out_shape)


def dropout(g, layer, v, out_shape):
    return v


# ------------------------------------------------------------- convolution, pooling
def _example(g, v):
    return np.zeros((1, *v.shape), g.dtype)


def conv(g, layer, v, out_shape):
    v = channels_first(g, v)
    w, n = layer.parameters["W"], layer.rank
    if layer.transposed:
        call = prepare_conv_transpose(layer.label, n, _example(g, v), w, None, layer.stride,
                                      layer.padding, layer.output_padding, layer.dilation,
                                      layer.groups)
        # the adjoint convolution's pad_after is the end padding minus output_padding
        ends = [max(a.pad_after, 0) for a in call.axes]
        extra = {"output_padding": [max(-a.pad_after, 0) for a in call.axes]}
    else:
        call = prepare_conv(layer.label, n, _example(g, v), w, None, layer.stride,
                            layer.padding, layer.dilation, layer.groups)
        ends, extra = [max(a.pad_after, 0) for a in call.axes], {}
    inputs = [v.name, g.const(w.transpose(conv_weight_perm(n)), "W")]
    if layer.use_bias:
        inputs.append(g.const(layer.parameters["b"], "b"))
    y = g.op("ConvTranspose" if layer.transposed else "Conv", inputs, "conv",
             kernel_shape=list(w.shape[:n]), strides=list(layer.stride),
             dilations=list(layer.dilation), group=layer.groups,
             pads=[a.pad_before for a in call.axes] + ends, **extra)
    return _out(v, y, out_shape)


def pool(g, layer, v, out_shape):
    v = channels_first(g, v)
    kw = layer.kwargs
    call = prepare_pool(layer.label, layer.rank, _example(g, v), kw["kernel_size"],
                        kw["stride"], kw["padding"], kw.get("dilation", 1), kw["ceil_mode"])
    axes = call.axes
    geometry = {"kernel_shape": [a.kernel for a in axes], "strides": [a.stride for a in axes]}
    begins, ends = [a.pad_before for a in axes], [max(a.pad_after, 0) for a in axes]
    x = v.name
    if layer.forward_op.__name__.startswith("max"):
        y = g.op("MaxPool", [x], "max_pool", dilations=[a.dilation for a in axes],
                 pads=begins + ends, **geometry)
        return _out(v, y, out_shape)
    if kw["count_include_pad"] and any(p for pair in call.pads for p in pair):
        # zero padding that counts in the divisor, then windows clipped to it
        user_ends = [after for _, after in call.pads]
        x = g.op("Pad", [x, g.ints([0, 0, *begins, 0, 0, *user_ends], "pads")], "pad")
        ends = [max(e - u, 0) for e, u in zip(ends, user_ends)]
        begins = [0] * len(axes)
    y = g.op("AveragePool", [x], "avg_pool", pads=begins + ends, count_include_pad=0,
             **geometry)
    return _out(v, y, out_shape)


def global_pool(g, layer, v, out_shape):
    keep = layer.kwargs["keepdims"]
    axes = list(range(2, v.rank)) if v.first else list(range(1, v.rank - 1))
    op = "ReduceMax" if "max" in layer.forward_op.__name__ else "ReduceMean"
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
    op, hyper = layer.forward_op.__name__, layer.hyper
    simple = {"relu": "Relu", "tanh": "Tanh", "sigmoid": "Sigmoid"}
    x = v.name
    if op == "identity":
        return v
    if op in simple:
        y = g.op(simple[op], [x], op)
    elif op == "leaky_relu":
        y = g.op("LeakyRelu", [x], op, alpha=hyper["negative_slope"])
    elif op == "elu":
        y = g.op("Elu", [x], op, alpha=hyper["alpha"])
    elif op == "selu":
        y = g.op("Selu", [x], op, alpha=act_ops.SELU_ALPHA, gamma=act_ops.SELU_SCALE)
    elif op == "hard_sigmoid":
        y = g.op("HardSigmoid", [x], op, alpha=1 / 6, beta=0.5)
    elif op == "gelu":
        y = _gelu(g, x, hyper["approximate"])
    elif op == "softplus":
        y = _softplus(g, x, hyper["beta"], hyper["threshold"])
    else:  # softmax, log_softmax: the axis refers to the channels-last layout
        v = channels_last(g, v)
        name = "Softmax" if op == "softmax" else "LogSoftmax"
        y = g.op(name, [v.name], op, axis=hyper["axis"])
    return _out(v, y, out_shape)


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


# ------------------------------------------------------------ embedding, sequences
def embedding(g, layer, v, out_shape):
    if v.name != "input":
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
        s = [layer._suffix(k, d) for d in range(dirs)]
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


def attention(g, layer, v, out_shape):
    """Self-attention: heads split by Reshape/Transpose, softmax(q k^T / sqrt(d)) v."""
    v = channels_last(g, v)
    p, e, heads = layer.parameters, layer.embed_dim, layer.num_heads
    steps, d = v.shape[0], e // heads
    if layer.packed:
        weights = np.split(p["W_in"], 3, axis=1)
        biases = np.split(p["b_in"], 3) if layer.use_bias else [None] * 3
    else:
        weights = [p["W_q"], p["W_k"], p["W_v"]]
        biases = [p.get("b_q"), p.get("b_k"), p.get("b_v")]
    split = g.ints([0, steps, heads, d], "heads")
    parts = []
    for role, w, b, perm in zip("qkv", weights, biases, ([0, 2, 1, 3], [0, 2, 3, 1],
                                                          [0, 2, 1, 3])):
        y = g.op("MatMul", [v.name, g.const(w, f"W_{role}")], role)
        if b is not None:
            y = g.op("Add", [y, g.const(b, f"b_{role}")], role)
        y = g.op("Reshape", [y, split], role)
        parts.append(g.op("Transpose", [y], role, perm=perm))  # k: (N, H, d, T)
    scores = g.op("MatMul", [parts[0], parts[1]], "scores")
    scores = g.op("Mul", [scores, g.const(1 / math.sqrt(d), "scale")], "scores")
    if layer.causal:
        mask = np.triu(np.full((steps, steps), -np.inf), k=1)
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
    Dense: dense, Flatten: flatten, Reshape: reshape, Dropout: dropout, ConvND: conv,
    GlobalPool: global_pool, Pool: pool, BatchNorm: running_norm,
    InstanceNorm: running_norm, GroupNorm: group_norm, LayerNorm: layer_norm,
    A.Activation: activation, Embedding: embedding, Recurrent: recurrent,
    MultiHeadAttention: attention,
}


def converter(layer):
    """The converter of ``layer``'s class (the nearest registered base class)."""
    for cls in type(layer).__mro__:
        if cls in CONVERTERS:
            return CONVERTERS[cls]
    raise ValueError(f"export_onnx: {layer.label} ({type(layer).__name__}) has no ONNX "
                     f"export; exportable: Sequential, Residual, Dense, Flatten, Reshape, "
                     f"Dropout, convolutions, pooling, normalizations, activations, "
                     f"Embedding, RNN/LSTM/GRU and MultiHeadAttention")

