"""Symbolic tensors: what calling a layer on ``handgrad.Input`` returns.

A :class:`SymbolicTensor` holds no data, only a per-example ``shape`` (no batch
axis), a ``dtype`` (or None: the model's) and the :class:`Node` that produces it
(None for an input). A :class:`Node` records one call of a layer: the layer, its
input tensors and its output tensors. ``handgrad.Model`` walks these records back
from its outputs to its inputs and runs the nodes in topological order.

The output shape of a call is found without touching the layer's parameters: an
unbuilt layer is probed through a throwaway copy, built from the input shapes and
run once on an all-zero example in inference mode (no data needed, nothing drawn
from the layer's own generator).
"""

from __future__ import annotations

import copy
import itertools

import numpy as np

from .._checks import describe, float_dtype

_ids = itertools.count()

#: The sizes that stand for an unknown (None) axis when a call is probed: the layer is
#: built at the first, run at both, and an output axis whose size differs is None.
PROBE_SIZES = (16, 23)


def concrete(shape, size=PROBE_SIZES[0]) -> tuple:
    """``shape`` with every None (an unknown size) replaced by ``size``."""
    return tuple(size if d is None else d for d in shape)


def shape_matches(shape, expected) -> bool:
    """Whether a per-example ``shape`` fits ``expected`` (None: any size there)."""
    return len(shape) == len(expected) and all(
        e is None or int(d) == e for d, e in zip(shape, expected))


class SymbolicTensor:
    """A tensor of a graph under construction: per-example ``shape``, ``dtype``, the
    producing ``node`` (None for an ``Input``) and the output ``index`` in that node."""

    def __init__(self, shape, dtype=None, node=None, index=0, name=None):
        self.shape = tuple(None if d is None else int(d) for d in shape)
        self.dtype = None if dtype is None else np.dtype(dtype)
        self.node, self.index, self.name = node, index, name
        self.uid = next(_ids)

    def _merge(self, other, layer, symbol):
        """``t1 + t2``, ``t1 - t2``, ``t1 * t2``: a new ``Add``/``Subtract``/``Multiply``
        layer called on both tensors."""
        if not isinstance(other, SymbolicTensor):
            raise TypeError(f"'{symbol}' on a symbolic tensor takes another symbolic tensor "
                            f"(it adds a {layer} layer to the graph); received "
                            f"{describe(other)}; for a constant use a layer such as "
                            f"Rescaling or Lambda")
        from .registry import REGISTRY  # the merge layers register themselves

        return REGISTRY[layer]()([self, other])

    def __add__(self, other):
        return self._merge(other, "Add", "+")

    def __sub__(self, other):
        return self._merge(other, "Subtract", "-")

    def __mul__(self, other):
        return self._merge(other, "Multiply", "*")

    # reached only when the left operand is not a tensor: refused by _merge
    __radd__, __rsub__, __rmul__ = __add__, __sub__, __mul__

    def __repr__(self):
        source = "input" if self.node is None else f"{self.node.layer.label}"
        label = f" {self.name!r}" if self.name else ""
        return f"SymbolicTensor{label}(shape={self.shape}, from {source})"


class Node:
    """One call of ``layer`` on ``inputs`` (SymbolicTensors) giving ``outputs``;
    ``training``: None (the running model's mode) or the bool the call was made with."""

    def __init__(self, layer, inputs, output_shapes, dtype, training=None):
        self.layer, self.inputs, self.training = layer, list(inputs), training
        self.outputs = [SymbolicTensor(shape, dtype, self, i)
                        for i, shape in enumerate(output_shapes)]


class GraphNetwork:
    """The mark of a layer that runs a graph of :class:`Node` calls (``handgrad.Model``),
    by which the floors below the model (the summary, the exports, torch interop)
    recognize it with ``isinstance`` without importing it. Such a layer has ``inputs``
    and ``outputs`` (SymbolicTensors), ``nodes`` (topological order), ``input_names``,
    ``output_names`` (the output-producing layers' names), ``single_input`` and
    ``single_output``.

    Its declarations (:mod:`.declarations`) hand the consumers' walks its nodes: each
    receives the consumer's service and calls its graph walk."""

    def torch_walk(self, walker, layouts):
        return walker.graph(self, layouts)

    def field_walk(self, fields, given):
        return fields.graph(self, given)

    def onnx_form(self, g, v):
        """A step of a chain: one input and one output."""
        if not (self.single_input and self.single_output):
            raise ValueError(f"export_onnx: {self.label} has several inputs or outputs, so "
                             f"it cannot be a step of a chain")
        return g.convert_graph(self, [v])[0]

    def onnx_graph_form(self, g, values, out_shapes):
        return g.convert_graph(self, values)

    def input_ids(self):
        return self.single_input and self.input_takes_ids(self.inputs[0])

    def input_takes_ids(self, tensor):
        """An Input of integer dtype, or one whose every call takes ids (an Embedding)."""
        if tensor.dtype is not None:
            return tensor.dtype.kind in "iu"
        calls = [node for node in self.nodes if any(t is tensor for t in node.inputs)]
        return bool(calls) and all(len(n.inputs) == 1 and n.layer.input_ids() for n in calls)


def call_labels(nodes) -> dict:
    """``{id(node): label}``: the layer's name for its first call among ``nodes``,
    ``name[k]`` for its call ``k`` (0-based) when the layer is shared."""
    calls, labels = {}, {}
    for node in nodes:
        k = calls[id(node.layer)] = calls.get(id(node.layer), -1) + 1
        labels[id(node)] = node.layer.name if k == 0 else f"{node.layer.name}[{k}]"
    return labels


def tensor_labels(network) -> dict:
    """``{tensor uid: label}`` for the inputs and every node output of a graph
    ``network``: the Input's name, the call label of the node that made it
    (:func:`call_labels`), or ``label:i`` for output ``i`` of a call with several."""
    labels = dict(zip((t.uid for t in network.inputs), network.input_names))
    calls = call_labels(network.nodes)
    for node in network.nodes:
        for t in node.outputs:
            several = len(node.outputs) > 1
            labels[t.uid] = f"{calls[id(node)]}:{t.index}" if several else calls[id(node)]
    return labels


def input_tensor(shape, name=None, dtype=None) -> SymbolicTensor:
    """``handgrad.Input``: a graph input of per-example ``shape`` (no batch axis; None
    for an axis of any size, e.g. ``(None, F)`` for sequences of any length)."""
    if not isinstance(shape, (tuple, list)) or not all(
            d is None or (isinstance(d, (int, np.integer)) and not isinstance(d, bool)
                          and d >= 0) for d in shape):
        raise TypeError(f"Input: 'shape' must be a tuple of ints >= 0 or None (per example, "
                        f"no batch axis); received {describe(shape)}")
    if name is not None and not isinstance(name, str):
        raise TypeError(f"Input: 'name' must be a string or None; received {describe(name)}")
    dtype = float_dtype("Input", "dtype", dtype, integers=True)  # integers: ids
    return SymbolicTensor(shape, dtype, None, 0, name)


def _float_dtype(layer, tensors):
    """The float dtype a call computes in, or None for the model's: the layer's own (set,
    or from its build), else that of its first float input with a dtype (an integer
    input, such as an Embedding's ids, says nothing about it)."""
    if layer.dtype is not None:
        return layer.dtype
    return next((t.dtype for t in tensors if t.dtype is not None and t.dtype.kind == "f"),
                None)


def connect(layer, inputs, training=None):
    """Record ``layer`` called on the SymbolicTensors ``inputs`` (in the mode ``training``:
    None, the model's, or a bool); returns its output tensor (or the list of them when
    the layer has several outputs)."""
    if training is not None and not isinstance(training, bool):
        raise TypeError(f"{layer.label}: 'training' must be None (the model's mode) or a "
                        f"bool; received {describe(training)}")
    tensors = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
    if not tensors or not all(isinstance(t, SymbolicTensor) for t in tensors):
        received = (f"[{', '.join(describe(t) for t in tensors)}]"
                    if isinstance(inputs, (list, tuple)) else describe(inputs))
        raise TypeError(f"{layer.label}: calling a layer builds a graph and takes a "
                        f"handgrad.Input tensor or what another layer call returned (or a "
                        f"list of them); received {received}; to run it on arrays use "
                        f"{type(layer).__name__}.forward(x)")
    given = _float_dtype(layer, tensors)
    dtype = given or np.dtype(np.float32)
    probe = layer if layer.built else copy.deepcopy(layer)
    shapes = [t.shape for t in tensors]
    sizes = PROBE_SIZES if any(None in shape for shape in shapes) else PROBE_SIZES[:1]

    def run(size):
        examples = [np.zeros((1, *concrete(t.shape, size)), dtype=t.dtype if t.dtype is not
                             None and t.dtype.kind in "iu" else dtype) for t in tensors]
        out = probe.graph_forward(examples, training=False)
        return out, out if isinstance(out, (list, tuple)) else [out]

    try:
        if not probe.built:
            probe.graph_build([concrete(shape) for shape in shapes],
                              np.random.default_rng(0), dtype)
        out, outs = run(sizes[0])
    except (ValueError, TypeError) as error:
        raise ValueError(f"{layer.label} cannot be called on per-example shape(s) "
                         f"{', '.join(map(str, shapes))}: {error}") from None
    out_shapes = [o.shape[1:] for o in outs]
    if len(sizes) > 1:
        try:
            others = run(sizes[1])[1]
        except (ValueError, TypeError) as error:
            raise ValueError(f"{layer.label} needs a fixed size on the axes that are None in "
                             f"its input shape(s) {', '.join(map(str, shapes))} (an Input "
                             f"with None takes any size there): {error}") from None
        out_shapes = [tuple(a if a == b else None for a, b in zip(o, other.shape[1:]))
                      for o, other in zip(out_shapes, others)]
    node = Node(layer, tensors, out_shapes, given, training)
    for tensor, o in zip(node.outputs, outs):
        if o.dtype.kind in "iu":  # an integer output (a max pooling's indices)
            tensor.dtype = o.dtype
    return node.outputs if isinstance(out, (list, tuple)) else node.outputs[0]
