"""ONNX export (opset 17): ``export_onnx(model, path, input_shape)``.

The graph takes handgrad's input and gives handgrad's output, in handgrad's
channels-last layout: input ``"input"`` (N, *input_shape) with a symbolic batch
dimension ``N`` (int64 ids when the first layer is an ``Embedding``), output
``"output"`` (N, *output_shape), in the model's float dtype.

Layout scheme. ONNX's Conv, ConvTranspose, pooling and BatchNormalization want
channels first. Every value in the graph carries a layout flag (channels last or
first); a layer that needs the other one gets a ``Transpose`` in front, and nothing
else moves data. So a conv section (conv, batch norm, activations, pooling) runs
channels-first between one Transpose at its start and one where a layer that
needs channels last (Flatten, Dense, Reshape, LayerNorm, Softmax, ...) or the
graph output follows; elementwise layers keep whatever layout they get. Because
handgrad's Flatten flattens the channels-last map, the graph goes back to channels
last before it, so Flatten and the following Dense export as they are.

Per layer (exact: the ONNX graph computes handgrad's function, up to rounding)::

    Dense                 MatMul (+ Add)                  (any leading axes)
    Conv1D/2D             Conv: pads, strides, dilations, group; "same"/"causal"/pairs as
                          explicit (begin, end) pads
    ConvTranspose1D/2D    ConvTranspose: pads (begin, max(end - output_padding, 0)) and
                          output_padding = max(output_padding - end, 0)
    MaxPool1D/2D          MaxPool, ceil_mode as extra end padding (never ceil_mode=1)
    AvgPool1D/2D          AveragePool; count_include_pad=True as an explicit zero Pad
                          and count_include_pad=0 (torch's divisor, also in ceil mode)
    Global pools          ReduceMean / ReduceMax over the spatial axes (keepdims)
    Flatten, Reshape      Flatten(axis=1), Reshape([0, *shape]) on channels-last data
    BatchNorm             BatchNormalization with the running statistics (inference);
                          without them (track_running_stats=False) ReduceMean-based
                          normalization over the batch and spatial axes
    InstanceNorm          per-example ReduceMean normalization (or running statistics)
    GroupNorm             Reshape to (N, *S, G, C/G), normalize, Reshape back
    LayerNorm             LayerNormalization(axis=-len(normalized_shape))
    Dropout, Identity     removed
    ReLU, LeakyReLU, ELU, Relu, LeakyRelu, Elu, Selu, Tanh, Sigmoid,
    SELU, Tanh, Sigmoid   (Selu with handgrad's alpha and scale)
    GELU                  0.5 x (1 + Erf(x / sqrt 2)) (opset 17 has no Gelu);
                          approximate="tanh": 0.5 x (1 + Tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    Softplus(beta, thr)   Where(beta x > thr, x, Softplus(Min(beta x, thr)) / beta)
    HardSigmoid           HardSigmoid(alpha=1/6, beta=0.5)
    Softmax, LogSoftmax   Softmax / LogSoftmax on the same axis
    Embedding             Gather(W, ids)
    RNN, LSTM, GRU        one RNN/LSTM/GRU node per layer (both directions in one node),
                          sequence-first with Transposes; gates reordered (torch LSTM
                          i,f,g,o -> ONNX i,o,f,c; GRU r,z,n -> z,r,h with
                          linear_before_reset=1); return_sequences=False takes Y_h
    MultiHeadAttention    self-attention from MatMul, Softmax and Transposes (+ causal mask)
    Residual              both branches, then Add (in the block's layout)
    Sequential            its layers in order (nested models too)

``WaveNetBlock`` and custom layers raise a ValueError naming the layer. Dropout in
attention and the masks of a cross-attention call are not part of a Sequential
forward, so they are not exported either.

onnx's ``ReferenceEvaluator`` (checked with onnx 1.23) computes a ConvTranspose with
``group > 1`` wrongly and knows no ``Relu`` activation for RNN; onnxruntime runs
both (the tests give the reference evaluator spec-conforming versions of the two).
onnxruntime has no float64 Conv kernel; float64 graphs are valid ONNX all the same.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..._checks import describe
from ...layers import Embedding, Layer, Residual
from .converters import converter
from .graph import Graph, Value, channels_first, channels_last

OPSET = 17
IR_VERSION = 8  # the IR version of opset 17, for older runtimes


def convert(g, layer, v):
    """The graph of ``layer`` applied to ``v``; returns the output :class:`Value`.

    A ``Residual`` adds its branches; a chain (``layer.chain``: ``Sequential``) converts
    its children in order; any other layer has a converter of its family or raises."""
    if isinstance(layer, Residual):
        block = convert(g, layer.block, v)
        short = v if layer.shortcut is None else convert(g, layer.shortcut, v)
        short = channels_first(g, short) if block.first else channels_last(g, short)
        return replace(block, name=g.op("Add", [block.name, short.name], "residual"))
    if layer.chain:
        for _, child in layer.children():
            v = convert(g, child, v)
        return v
    out_shape = tuple(layer.output_shape(v.shape))
    return converter(layer)(g, layer, v, out_shape)


def _first_leaf(layer):
    """The layer that sees the graph input: the first child of a chain or a
    ``Residual`` (its block), down to a leaf."""
    if layer.chain or isinstance(layer, Residual):
        for _, child in layer.children():
            return _first_leaf(child)
    return layer


def export_onnx(model, path, input_shape=None):
    """Write ``model`` as an ONNX (opset 17) file at ``path`` (None: do not write) and
    return the ``onnx.ModelProto``.

    ``input_shape`` is the per-example input shape (default: the model's); the batch
    dimension is symbolic. Inputs and outputs are channels last, as in handgrad.
    """
    try:
        import onnx
        import onnx.numpy_helper
    except ImportError:
        raise ImportError('export_onnx: the onnx package is not installed (pip install '
                          '"handgrad[onnx]")') from None
    if not isinstance(model, Layer):
        raise TypeError(f"export_onnx: 'model' must be a handgrad layer or model; received "
                        f"{describe(model)}")
    if input_shape is None:
        if not model.built:
            raise ValueError("export_onnx: the model is not built; pass input_shape (per "
                             "example, e.g. (40, 1))")
        input_shape = model.input_shape
    if not isinstance(input_shape, (tuple, list)) or not all(
            isinstance(d, (int, np.integer)) and d > 0 for d in input_shape):
        raise TypeError(f"export_onnx: 'input_shape' must be a tuple of positive ints (per "
                        f"example); received {describe(input_shape)}")
    input_shape = tuple(int(d) for d in input_shape)
    if not model.built:
        model.build(input_shape)
    g = Graph(onnx, model.dtype)
    ids = isinstance(_first_leaf(model), Embedding)
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(np.int64 if ids else model.dtype))
    inputs = [onnx.helper.make_tensor_value_info("input", elem, ["N", *input_shape])]
    out = channels_last(g, convert(g, model, Value("input", input_shape)))
    producer = next((n for n in g.nodes if out.name in n.output), None)
    if producer is None:  # the model is the identity
        g.nodes.append(onnx.helper.make_node("Identity", [out.name], ["output"]))
    else:
        producer.output[list(producer.output).index(out.name)] = "output"
    out_elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(model.dtype))
    outputs = [onnx.helper.make_tensor_value_info("output", out_elem, ["N", *out.shape])]
    graph = onnx.helper.make_graph(g.nodes, model.name or "handgrad", inputs, outputs,
                                   g.initializers)
    proto = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", OPSET)],
                                   producer_name="handgrad", ir_version=IR_VERSION)
    onnx.checker.check_model(proto)
    if path is not None:
        onnx.save(proto, str(path))
    return proto
