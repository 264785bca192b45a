"""ONNX export (opset 17): ``export_onnx(model, path, input_shape)``.

The graph takes handgrad's input and gives handgrad's output, in handgrad's
channels-last layout: input ``"input"`` (N, *input_shape) with a symbolic batch
dimension ``N`` (int64 ids when the first layer is an ``Embedding``), output
``"output"`` (N, *output_shape), in the model's float dtype. A graph ``Model`` gives
one ONNX graph with its inputs and outputs, named after its Inputs
(``model.input_names``) and its output layers (``model.output_names``; a name that
repeats, or that an input has, gets ``_2``, ``_3``, ...): its nodes are converted one
by one in topological order, a tensor that fans out is read by every consumer, the
calls of a shared layer use the same initializers (equal constants are stored once),
and a nested ``Model`` (in a graph or in ``Sequential``) is converted in place. An
Input is int64 ids when its dtype is an integer or when every call on it starts with
an ``Embedding``.

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
    RMSNorm               x / Sqrt(ReduceMean(x * x) + eps) (* gamma) over the same axes
    Dropout               removed
    Rescaling             Mul by the scale (+ Add of a non-zero offset), in any layout
    activations           the ONNX form declared with the op (``onnx=`` beside the kernel,
                          :mod:`handgrad.ops.declare`); one with an ``axis`` (Softmax,
                          LogSoftmax) on channels-last data, the same axis
    Embedding             Gather(W, ids)
    TiedDense             MatMul(x, Transpose(W)) (+ Add), W the Embedding's initializer
    RNN, LSTM, GRU        one RNN/LSTM/GRU node per layer (both directions in one node),
                          sequence-first with Transposes; gates reordered (torch LSTM
                          i,f,g,o -> ONNX i,o,f,c; GRU r,z,n -> z,r,h with
                          linear_before_reset=1); return_sequences=False takes Y_h
    MultiHeadAttention    self-attention from MatMul, Softmax and Transposes (+ causal mask);
                          a named layer's self-attention projects as torch writes it: one
                          MatMul by Transpose({name}.in_proj_weight), Add {name}.in_proj_bias,
                          Slices; {name}.out_proj.weight/bias
    Parameter             its initializer (named after the layer) Expand-ed to the batch of
                          the input's Shape; Gather-ed from its flat values first where its
                          index is more than a reshape
    Residual              both branches, then Add (in the block's layout)
    Sequential            its layers in order (nested models too)
    Model (graph)         its nodes in topological order; Add, Multiply, Concatenate and
                          attention to other tensors by their ``onnx_graph_form``

Each layer declares its form (``onnx_form``, :mod:`handgrad.layers.onnx_forms` for the
built-ins) and receives the graph builder (:class:`Builder`); a layer without one
(``WaveNetBlock``, a custom layer that declares none) raises a ValueError naming it. Dropout in
attention and the masks of a cross-attention call are not part of a Sequential
forward, so they are not exported either.

onnx's ``ReferenceEvaluator`` (checked with onnx 1.23) computes a ConvTranspose with
``group > 1`` wrongly and knows no ``Relu`` activation for RNN; onnxruntime runs
both (the tests give the reference evaluator spec-conforming versions of the two).
onnxruntime has no float64 Conv kernel; float64 graphs are valid ONNX all the same.
"""

from __future__ import annotations

import numpy as np

from ..._checks import describe
from ..._device import host_copy
from ..._named import unique_names
from ...layers import REGISTRY, Layer
from ...layers.declarations import declared
from ...layers.symbolic import GraphNetwork
from .converters import _no_export, activation
from .graph import Graph, Value

OPSET = 17
IR_VERSION = 8  # the IR version of opset 17, for older runtimes


class Builder(Graph):
    """The graph under construction, as the layers' ONNX forms receive it (``g``): the
    :class:`Graph` services plus the conversion of sub-layers and of activations."""

    def convert(self, layer, v):
        """The graph of ``layer`` applied to ``v``; returns the output :class:`Value`: a
        chain (``layer.chain``) converts its children in order, any other layer adds
        the nodes its ``onnx_form`` declares (a layer without one raises), then the node
        of its fused ``activation`` if any."""
        if layer.chain:
            for _, child in layer.children():
                v = self.convert(child, v)
            return v
        if layer.onnx_form is None:
            raise _no_export(layer)
        v = layer.onnx_form(self, v)
        fused = getattr(layer, "activation_layer", None)  # Dense(..., activation="relu")
        return v if fused is None else self.activation(fused, v)

    def convert_graph(self, model, values):
        """The output :class:`Value` s of the graph ``model`` given its input Values: every
        node in topological order, each reading the Values its input tensors hold; a
        call converts by its layer's ``onnx_graph_form`` if it has one, else on one
        tensor as :meth:`convert` does."""
        held = {t.uid: v for t, v in zip(model.inputs, values)}
        for node in model.nodes:
            layer, ins = node.layer, [held[t.uid] for t in node.inputs]
            if layer.onnx_graph_form is not None:
                outs = layer.onnx_graph_form(self, ins, [t.shape for t in node.outputs])
            elif len(ins) == 1:
                outs = [self.convert(layer, ins[0])]
            else:
                raise ValueError(
                    f"export_onnx: {layer.label} ({type(layer).__name__}) is called on "
                    f"several tensors and has no ONNX export for that; exportable: "
                    f"{', '.join(declared(REGISTRY, 'onnx_graph_form'))}")
            held.update((t.uid, v) for t, v in zip(node.outputs, outs))
        return [held[t.uid] for t in model.outputs]

    def activation(self, layer, v):
        """An activation by its kernel (see :mod:`.converters`)."""
        return activation(self, layer, v, tuple(layer.output_shape(v.shape)))


def _graph_inputs(model, input_shape):
    """``[(name, per-example shape, ids)]`` of the ONNX graph's inputs."""
    if isinstance(model, GraphNetwork):
        shapes = [t.shape for t in model.inputs]
        expected = shapes[0] if model.single_input else shapes
        if input_shape is not None and _as_shapes(input_shape) != expected:
            raise ValueError(f"export_onnx: the input shapes of {model.label} are those of "
                             f"its Inputs, {expected}; received input_shape={input_shape!r}")
        names = unique_names(model.input_names, first_suffix=2)
        return [(name, t.shape, model.input_takes_ids(t))
                for name, t in zip(names, model.inputs)]
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
    return [("input", input_shape, model.input_ids())]


def _as_shapes(value):
    """A shape, or a list of shapes, as tuples (for comparing)."""
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(s, (list, tuple)) for s in value):
        return [tuple(s) for s in value]
    return tuple(value) if isinstance(value, (list, tuple)) else value


def _name_output(g, v, name, renamed):
    """Give the graph output ``name`` to the Value ``v`` (channels last): rename its
    producer's output when nothing else reads it, else add an Identity."""
    v = g.channels_last(v)
    source = renamed.get(v.name, v.name)
    producer = next((n for n in g.nodes if source in n.output), None)
    if producer is None or source != v.name or any(source in n.input for n in g.nodes):
        g.nodes.append(g.onnx.helper.make_node("Identity", [source], [name]))
    else:
        producer.output[list(producer.output).index(source)] = name
        renamed[v.name] = name
    return v


def export_onnx(model, path, input_shape=None):
    """Write ``model`` as an ONNX (opset 17) file at ``path`` (None: do not write) and
    return the ``onnx.ModelProto``.

    ``input_shape`` is the per-example input shape (default: the model's; a graph
    ``Model``'s are those of its Inputs); the batch dimension is symbolic. Inputs and
    outputs are channels last, as in handgrad; a graph ``Model`` gives one graph with its
    inputs and outputs, named as in ``model.input_names`` and ``model.output_names``.
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
    if model.device != "cpu":  # the converters read parameters as NumPy: a host copy
        model = host_copy(model)
    inputs = _graph_inputs(model, input_shape)
    graph_model = isinstance(model, GraphNetwork)
    taken = {name for name, _, _ in inputs}
    output_names = (unique_names(model.output_names, taken, first_suffix=2) if graph_model
                    else ["output"])
    g = Builder(onnx, model.dtype, reserved=taken)
    values = [Value(name, shape, ids=ids) for name, shape, ids in inputs]
    outs = g.convert_graph(model, values) if graph_model else [g.convert(model, values[0])]
    renamed, outputs = {}, []
    for name, out in zip(output_names, outs):
        out = _name_output(g, out, name, renamed)
        elem = np.dtype(np.int64 if out.ids else model.dtype)
        outputs.append(onnx.helper.make_tensor_value_info(
            name, onnx.helper.np_dtype_to_tensor_dtype(elem), ["N", *out.shape]))
    inputs = [onnx.helper.make_tensor_value_info(
        name, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(np.int64 if ids else model.dtype)),
        ["N", *shape]) for name, shape, ids in inputs]
    graph = onnx.helper.make_graph(g.nodes, model.name or "handgrad", inputs, outputs,
                                   g.initializers)
    proto = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", OPSET)],
                                   producer_name="handgrad", ir_version=IR_VERSION)
    onnx.checker.check_model(proto)
    if path is not None:
        onnx.save(proto, str(path))
    return proto
