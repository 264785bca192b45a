"""The ONNX forms of the built-in layers, named by their classes (``onnx_form =
onnx_forms.dense``, as a kernel is named by ``forward_op``).

A form is a method ``form(layer, g, v) -> Value``: it adds the nodes computing
``layer`` on the graph value ``v`` to the builder ``g`` (from :mod:`handgrad.io.onnx`,
passed in) and returns the result. ``g`` offers ``op``, ``const``, ``ints``,
``channels_first(v)``, ``channels_last(v)``, ``value(name, shape, first)``,
``convert(layer, v)`` and ``convert_graph(model, values)``; a value has ``name``,
``shape`` (per example, channels last), ``first`` (held channels first), ``rank``
(with the batch axis) and ``ids``. A graph form ``form(layer, g, values, out_shapes)
-> [Value]`` converts one call in a graph ``Model`` (on the list ``values``, one value
per output).
"""

from __future__ import annotations

import math

import numpy as np

from .. import ops
from .declarations import conv_weight_perm


def _out(layer, g, v, name, first=None):
    """The value ``name``: ``layer``'s output on ``v``, in ``v``'s layout unless ``first``."""
    return g.value(name, tuple(layer.output_shape(v.shape)), v.first if first is None else first)


# ------------------------------------------------------------------ dense and shapes
def dense(layer, g, v):
    """MatMul (+ Add), on any leading axes."""
    v = g.channels_last(v)
    y = g.op("MatMul", [v.name, g.param(layer, "weight", layer.export_weight(), "W")], "dense")
    if layer.use_bias:
        y = g.op("Add", [y, g.param(layer, "bias", layer.parameters["b"], "b")], "dense")
    return _out(layer, g, v, y)


def tied_dense(layer, g, v):
    """MatMul with the transpose of the Embedding's table (the Gather's initializer)."""
    v = g.channels_last(v)
    table_t = g.op("Transpose", [g.const(layer.table, "W")], "tied_table", perm=[1, 0])
    y = g.op("MatMul", [v.name, table_t], "tied_dense")
    if layer.use_bias:
        y = g.op("Add", [y, g.const(layer.parameters["b"], "b")], "tied_dense")
    return _out(layer, g, v, y)


def flatten(layer, g, v):
    v = g.channels_last(v)
    return _out(layer, g, v, g.op("Flatten", [v.name], "flatten", axis=1))


def reshape(layer, g, v):
    v = g.channels_last(v)
    return _out(layer, g, v, g.op("Reshape", [v.name, g.ints([0, *layer.shape])], "reshape"))


def identity(layer, g, v):
    """Inference: nothing to compute (dropout)."""
    return v


# ------------------------------------------------------------- convolution, pooling
def _pad_mode(layer):
    """ONNX Pad's mode for a convolution's ``padding_mode`` (None: "zeros", the Conv's own
    pads). Opset 17's Pad has no "wrap" (opset 19), so "circular" is refused."""
    mode = getattr(layer, "padding_mode", "zeros")
    if mode == "circular":
        raise ValueError(f"export_onnx: {layer.label} has padding_mode='circular', which "
                         f"needs ONNX Pad mode 'wrap' (opset 19); the export writes opset 17")
    return {"reflect": "reflect", "replicate": "edge"}.get(mode)


def conv(layer, g, v):
    """Conv / ConvTranspose with explicit (begin, end) pads."""
    v = g.channels_first(v)
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
    x, pads = v.name, [*geometry.pads_begin, *geometry.pads_end]
    mode = _pad_mode(layer)
    if mode is not None:  # the padding_mode's Pad node (the user's pads), an unpadded Conv
        befores, afters = zip(*geometry.padding)
        x = g.op("Pad", [x, g.ints([0, 0, *befores, 0, 0, *afters], "pads")], "pad",
                 mode=mode)
        pads = [0] * (2 * n)
    inputs = [x, g.param(layer, "weight", w.transpose(conv_weight_perm(n)), "W")]
    if layer.use_bias:
        inputs.append(g.param(layer, "bias", layer.parameters["b"], "b"))
    y = g.op("ConvTranspose" if layer.transposed else "Conv", inputs, "conv",
             kernel_shape=list(kernel), strides=list(layer.stride),
             dilations=list(layer.dilation), group=layer.groups, pads=pads, **extra)
    return _out(layer, g, v, y)


MAX_POOLS = (ops.max_pool1d, ops.max_pool2d, ops.max_pool3d)


def pool(layer, g, v):
    """MaxPool, or AveragePool (count_include_pad as an explicit zero Pad)."""
    v = g.channels_first(v)
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
        return _out(layer, g, v, y)
    include = ops.resolve_count_include_pad(layer.label, kw["padding"], kw["count_include_pad"])
    if include and any(p for pair in geometry.padding for p in pair):
        # zero padding that counts in the divisor, then windows clipped to it
        user_ends = [after for _, after in geometry.padding]
        x = g.op("Pad", [x, g.ints([0, 0, *begins, 0, 0, *user_ends], "pads")], "pad")
        ends = [max(e - u, 0) for e, u in zip(ends, user_ends)]
        begins = [0] * len(axes)
    y = g.op("AveragePool", [x], "avg_pool", pads=begins + ends, count_include_pad=0,
             **attrs)
    return _out(layer, g, v, y)


def global_pool(layer, g, v):
    keep = layer.kwargs["keepdims"]
    axes = list(range(2, v.rank)) if v.first else list(range(1, v.rank - 1))
    op = "ReduceMax" if layer.forward_op is ops.global_max_pool else "ReduceMean"
    y = g.op(op, [v.name], "global_pool", axes=axes, keepdims=int(keep))
    return _out(layer, g, v, y, v.first and keep)


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


def _running_norm(layer, g, v, batch_statistics):
    """Running statistics if kept (BatchNormalization), else the statistics over the
    batch and spatial axes (``batch_statistics``) or the spatial axes only."""
    mean = layer.buffers.get("running_mean")
    if mean is not None:
        v = g.channels_first(v)
        channels = mean.shape[0]
        gamma, beta = layer.parameters.get("gamma"), layer.parameters.get("beta")
        inputs = [v.name, g.const(np.ones(channels), "gamma") if gamma is None
                  else g.param(layer, "weight", gamma, "gamma"),
                  g.const(np.zeros(channels), "beta") if beta is None
                  else g.param(layer, "bias", beta, "beta"),
                  g.param(layer, "running_mean", mean, "running_mean"),
                  g.param(layer, "running_var", layer.buffers["running_var"], "running_var")]
        # ONNX's momentum weighs the running value (torch's weighs the batch); a cumulative
        # average (momentum None) has no ONNX form and is left out (inference ignores it)
        momentum = {} if layer.momentum is None else {"momentum": 1.0 - layer.momentum}
        y = g.op("BatchNormalization", inputs, "batch_norm", epsilon=layer.eps, **momentum)
        return _out(layer, g, v, y)
    spatial = list(range(2, v.rank)) if v.first else list(range(1, v.rank - 1))
    axes = [0, *spatial] if batch_statistics else spatial
    return _out(layer, g, v, _affine(g, layer, v, _standardize(g, v.name, axes, layer.eps)))


def batch_norm(layer, g, v):
    return _running_norm(layer, g, v, True)


def instance_norm(layer, g, v):
    return _running_norm(layer, g, v, False)


def group_norm(layer, g, v):
    v = g.channels_last(v)
    *spatial, channels = v.shape
    groups = layer.num_groups
    x = g.op("Reshape", [v.name, g.ints([0, *spatial, groups, channels // groups])], "groups")
    y = _standardize(g, x, [*range(1, v.rank - 1), v.rank], layer.eps)
    y = g.op("Reshape", [y, g.ints([0, *v.shape])], "ungroup")
    return _out(layer, g, v, _affine(g, layer, v, y))


def layer_norm(layer, g, v):
    v = g.channels_last(v)
    shape = layer.param_shape(v.shape)
    gamma, beta = layer.parameters.get("gamma"), layer.parameters.get("beta")
    inputs = [v.name, g.const(np.ones(shape), "gamma") if gamma is None
              else g.param(layer, "weight", gamma, "gamma")]
    if beta is not None:
        inputs.append(g.param(layer, "bias", beta, "beta"))
    y = g.op("LayerNormalization", inputs, "layer_norm", axis=-len(shape), epsilon=layer.eps)
    return _out(layer, g, v, y)


def rms_norm(layer, g, v):
    """x / sqrt(ReduceMean(x^2) + eps) * gamma over the trailing axes (any opset)."""
    v = g.channels_last(v)
    shape = layer.param_shape(v.shape)
    eps = layer.eps if layer.eps is not None else float(np.finfo(layer.dtype).eps)
    axes = list(range(v.rank - len(shape), v.rank))
    square = g.op("Mul", [v.name, v.name], "square")
    mean = g.op("ReduceMean", [square], "mean_square", axes=axes, keepdims=1)
    rms = g.op("Sqrt", [g.op("Add", [mean, g.const(eps, "eps")], "mean_square_eps")], "rms")
    y = g.op("Div", [v.name, rms], "rms_norm")
    gamma = layer.parameters.get("gamma")
    if gamma is not None:
        y = g.op("Mul", [y, g.const(gamma, "gamma")], "scaled")
    return _out(layer, g, v, y)


# ------------------------------------------------------------ embedding, sequences
def _check_lookup(layer, v):
    """An id lookup exports as a Gather when it reads the graph's ids and has no max_norm."""
    if not v.ids:
        raise ValueError(f"export_onnx: {layer.label} must be the model's first layer (its "
                         f"input is the graph's int64 ids)")
    if layer.max_norm is not None:
        raise ValueError(f"export_onnx: {layer.label} has max_norm={layer.max_norm}; ONNX's "
                         f"Gather cannot renormalize the table's rows")


def embedding(layer, g, v):
    _check_lookup(layer, v)
    return _out(layer, g, v, g.op("Gather", [g.const(layer.parameters["W"], "W"), v.name],
                                  "embedding", axis=0), False)


def embedding_bag(layer, g, v):
    """Fixed-length bags, (N, L) ids: Gather then ReduceSum/Mean/Max over L."""
    _check_lookup(layer, v)
    if layer.padding_idx is not None:
        raise ValueError(f"export_onnx: {layer.label} has padding_idx={layer.padding_idx}; "
                         f"ONNX has no EmbeddingBag and a Reduce cannot leave ids out")
    rows = g.op("Gather", [g.const(layer.parameters["W"], "W"), v.name], "rows", axis=0)
    op = {"sum": "ReduceSum", "mean": "ReduceMean", "max": "ReduceMax"}[layer.mode]
    if op == "ReduceSum":
        y = g.op(op, [rows, g.ints([1])], "bag", keepdims=0)
    else:
        y = g.op(op, [rows], "bag", axes=[1], keepdims=0)
    return _out(layer, g, v, y, False)


def _attend(layer, g, v, out_shape, key=None, value=None):
    """Attention of the query ``v`` to ``key`` and ``value`` (None: self-attention, or
    ``value = key``): heads split by Reshape/Transpose, softmax(q k^T / sqrt(d)) v."""
    for option in ("add_bias_kv", "add_zero_attn"):
        if getattr(layer, option):
            raise ValueError(f"export_onnx: {layer.label} has {option}=True, which the "
                             f"attention export does not express; build it without")
    if layer.mask_inputs:
        raise ValueError(f"export_onnx: {layer.label} takes masks as graph inputs "
                         f"(mask_inputs={layer.mask_inputs}), which the attention export does "
                         f"not express; export a model built with mask_inputs=()")
    v = g.channels_last(v)
    key = v if key is None else g.channels_last(key)
    value = key if value is None else g.channels_last(value)
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
    projected = _packed_projection(layer, g, v, weights, biases) if (
        layer.name and key is v and value is v and all(w.shape == (e, e) for w in weights)) \
        else [None] * 3
    for role, source, w, b, perm, y in zip("qkv", (v, key, value), weights, biases,
                                           ([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3]),
                                           projected):
        if y is None:
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
    y = g.op("MatMul", [ctx, g.param(layer, "out_proj.weight", p["W_out"], "W_out")],
             "attention_out")
    if layer.use_bias:
        y = g.op("Add", [y, g.param(layer, "out_proj.bias", p["b_out"], "b_out")],
                 "attention_out")
    return g.value(y, tuple(out_shape), False)


def _packed_projection(layer, g, v, weights, biases):
    """Self-attention's q, k, v as torch writes them (a named layer): one MatMul with the
    transpose of ``{name}.in_proj_weight`` (torch's (3E, E)), one Add of
    ``{name}.in_proj_bias``, Slices of the last axis; load_onnx names them back."""
    e = weights[0].shape[0]
    w = g.param(layer, "in_proj_weight", np.concatenate(weights, axis=1).T, "W_in")
    y = g.op("MatMul", [v.name, g.op("Transpose", [w], "W_in", perm=[1, 0])], "qkv")
    if biases[0] is not None:
        y = g.op("Add", [y, g.param(layer, "in_proj_bias", np.concatenate(biases), "b_in")],
                 "qkv")
    return [g.op("Slice", [y, g.ints([i * e]), g.ints([(i + 1) * e]), g.ints([-1])], role)
            for i, role in enumerate("qkv")]


def attention(layer, g, v):
    """Self-attention."""
    return _attend(layer, g, v, layer.output_shape(v.shape))


def graph_attention(layer, g, values, out_shapes):
    """mha(query), mha([query, key_value]) or mha([query, key, value]) in a graph."""
    return [_attend(layer, g, values[0], out_shapes[0], *values[1:])]


# --------------------------------------------------------------- merges (graph forms)
def _aligned(g, values):
    """``(values in one layout, whether it is channels first)``: the first one's when it
    is held channels first, else channels last (a merge in a conv section adds no
    Transpose)."""
    first = values[0].first and all(v.rank >= 3 for v in values)
    return [g.channels_first(v) if first else g.channels_last(v) for v in values], first


def add(layer, g, values, out_shapes):
    """Sum of the inputs, in one layout."""
    values, first = _aligned(g, values)
    return [g.value(g.op("Sum", [v.name for v in values], "add"), out_shapes[0], first)]


def multiply(layer, g, values, out_shapes):
    """Mul, input by input, in one layout."""
    values, first = _aligned(g, values)
    y = values[0].name
    for v in values[1:]:
        y = g.op("Mul", [y, v.name], "multiply")
    return [g.value(y, out_shapes[0], first)]


def concatenate(layer, g, values, out_shapes):
    """Concat: on the channel axis of maps held channels first, axis 1; otherwise
    channels last on handgrad's axis."""
    rank = values[0].rank  # with the batch axis
    axis = layer.axis % rank
    if axis == rank - 1 and values[0].first and rank >= 3:  # channels, held channels first
        values = [g.channels_first(v) for v in values]
        return [g.value(g.op("Concat", [v.name for v in values], "concatenate", axis=1),
                        out_shapes[0], True)]
    values = [g.channels_last(v) for v in values]
    return [g.value(g.op("Concat", [v.name for v in values], "concatenate", axis=axis),
                    out_shapes[0], False)]

