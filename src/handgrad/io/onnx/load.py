"""ONNX import: ``load_onnx(path or onnx.ModelProto) -> handgrad.Model``, the inverse of
``export_onnx`` for the operators that map to handgrad layers (opset 13 and later; the
operators are converted in :mod:`.load_ops`).

Layout. ONNX operators are channels first; handgrad is channels last. Every ONNX tensor
is held as a handgrad tensor plus ``perm``: the ONNX tensor is ``hg.transpose(perm)``
(batch axis fixed). A tensor from Conv, pooling, BatchNormalization, Resize is held
channels last (``perm = (0, r-1, 1, ..., r-2)``); an ONNX ``Transpose`` only changes
``perm`` (no layer); an operator that needs a particular layout gets a ``Permute`` layer
in front only when the held one differs. So ``export_onnx``'s Transposes vanish, and a
graph input of rank >= 3 from another producer (torch: N, C, H, W) becomes a
channels-last handgrad Input (N, H, W, C); ``export_onnx``'s inputs (producer
"handgrad") are already channels last and stay as they are. Outputs held channels last
come out as they are (an image output of torch's N, C, H, W becomes N, H, W, C); any
other held permutation is undone by a Permute.

Flatten of a channels-first map keeps torch's memory order without moving data: the
result is held lazily (the map, flattened the handgrad way, C fastest); a following
Gemm/MatMul permutes its weight rows instead (as ``from_torch`` does), elementwise
operators act on the map, and anything else gets the transpose that torch's order needs.

Names. A layer with weights is named after its weight initializer without the trailing
``.weight`` (torch.onnx.export writes ``layer1.0.conv1.weight``, so the layer is
``layer1.0.conv1``: dots are allowed in layer names), so ``from_torch(state_dict, model)``
loads later checkpoints by name; other initializer names (export_onnx's ``W``) and layers
without weights get handgrad's automatic names; a name taken twice gets ``_2``, ...

BatchNormalization stays a trainable ``BatchNorm`` (running statistics as buffers,
torch momentum = 1 - ONNX momentum); Dropout and Identity vanish. An operator with no
handgrad counterpart, or an attribute value handgrad does not compute, is refused with a
ValueError naming the op type and the node. Float attributes (stored as float32) are
read as the shortest decimal that rounds to them (LeakyRelu's 0.1 stays 0.1 in float64).

Shape arithmetic (``Shape`` of a held tensor, then Gather, Slice, Concat, Unsqueeze, Cast,
...: torch's ``x.view(x.size(0), -1)`` or an interpolation to the input's size) is computed
at load time from the graph input's fixed sizes (``FOLDABLE``; a symbolic batch folds to -1,
and a computation that fails on it is refused naming the node); a Reshape target whose first
entry is the exported batch size keeps the batch axis. Add/Mul of tensors of one rank
broadcast (squeeze-excitation gates (N, C, 1, 1) times (N, C, H, W)); Clip is ReLU6 or
Hardtanh.

:mod:`.load_more` converts Slice (a Cropping in a layout that puts the sliced axis first),
LayerNormalization, torch's Erf-based GELU of opsets before 20 (recognized at its Div), and
arithmetic with one constant: a scalar as Rescaling, a per-channel factor (ConvNeXt's
``layer_scale``) as a Parameter named after the constant times the map.

Outputs. Several graph outputs become the Model's named outputs, keyed by the ONNX
output names (``model.output_names``; torch.onnx.export of a dictionary output writes
its values in the dictionary's order, named by ``output_names`` or numbered):
``forward`` returns them as a list in that order, ``predict`` and ``model(x)`` as a dict,
and ``backward`` takes a list or a dict by name. One output stays a plain output (named
after its layer) so that ``forward`` returns an array.

:mod:`.load_groups` holds a tensor whose batch the exporter moved or merged into another
axis (attention: ViT, Swin), :mod:`.load_attention` converts on such tensors, constants
meeting tensors as Parameter layers (class token, position embedding, masks).

Not yet: Split, export_onnx's nearest-upsample Gathers.
"""

from __future__ import annotations

import os

import numpy as np

from ... import layers as L
from ..._checks import describe
from ...layers.registry import REGISTRY
from ...layers.symbolic import input_tensor
from . import load_attention, load_maxvit, load_more, load_rearrange, load_shapes  # noqa: F401
from .held import Held, channels_last_perm
from .load_groups import full_shape, plain
from .load_ops import CONVERTERS

# Operators computed at load time when all their inputs are constants (shape arithmetic).
FOLDABLE = frozenset({"Add", "Sub", "Mul", "Div", "Cast", "Concat", "Gather", "Slice",
                      "Squeeze", "Unsqueeze", "Reshape", "Floor", "Ceil", "Range",
                      "Transpose", "Shape", "Expand", "Equal", "Where", "ConstantOfShape",
                      "Mod", "Sqrt", "ScatterND", "Not", "Pow", "Less", "Greater", "Neg",
                      "Abs", "And", "Or", "Min", "Max"})


class Loader:
    """The state of one conversion: held tensors, constants, layer names."""

    def __init__(self, proto):
        self.proto, graph = proto, proto.graph
        from onnx import numpy_helper
        self.numpy_helper = numpy_helper
        self.consts = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
        self.held, self.skip, self.names = {}, set(), set()
        self.consumers = {}
        for node in graph.node:
            for name in node.input:
                self.consumers.setdefault(name, []).append(node)
        self.node, self.weights, self.batch, self.alias = None, [], -1, {}

    # ---------------------------------------------------------------- helpers
    def fail(self, why):
        node = self.node
        return ValueError(f"load_onnx: {node.op_type} node {node.name or '(unnamed)'!r}: {why}")

    def const(self, name, what="input"):
        if name not in self.consts:
            raise self.fail(f"its {what} {name!r} must be a constant (an initializer or a "
                            f"Constant node); a computed one has no handgrad counterpart")
        return self.consts[name]

    def get(self, name):
        if name not in self.held:
            raise self.fail(f"its input {name!r} is a constant; an operator on constants "
                            f"only has no handgrad layer")
        return self.held[name]

    def layer_name(self, weight_name):
        """The layer name from its weight initializer (see the module docstring)."""
        weight_name = self.alias.get(weight_name, weight_name)
        if not weight_name.endswith(".weight"):
            return None
        base = name = weight_name[:-len(".weight")]
        index = 1
        while name in self.names:
            index += 1
            name = f"{base}_{index}"
        self.names.add(name)
        return name

    def call(self, layer, held, perm=None, params=None):
        """``layer`` on the held tensor ``held`` (taken in ``perm``, default as held);
        ``params``: arrays copied into the layer's parameters and buffers."""
        sym = self.need(held, held.perm if perm is None else perm)
        out = layer(sym)
        if params:  # copied once the Model is built in its dtype
            self.weights.append((self.node, layer, params))
        return Held(out, held.perm if perm is None else tuple(perm))

    def materialize(self, held):
        """A lazily flattened map as a real flat tensor in torch's order; a grouped tensor
        with the batch alone first as a plain one (:func:`.load_groups.plain`)."""
        if held.groups is not None:
            return plain(self, held)
        if held.flat is None:
            return held
        source = held.flat
        return Held(L.Flatten()(self.need(source, tuple(range(source.rank)))), (0, 1))

    def need(self, held, perm):
        """The handgrad tensor of ``held`` taken in the layout ``perm`` (a Permute if the
        held one differs)."""
        held = self.materialize(held)
        perm = tuple(perm)
        if held.perm == perm:
            return held.sym
        dims = [0] * held.rank
        for i, p in enumerate(perm):
            dims[p] = held.perm[i]
        return L.Permute(tuple(dims[1:]))(held.sym)

    def axis(self, held, axis):
        """The handgrad axis of the ONNX ``axis`` of ``held``."""
        axis = axis + held.rank if axis < 0 else axis
        if axis == 0:
            raise self.fail("acting on the batch axis has no handgrad layer")
        return held.perm[axis]

    # ---------------------------------------------------------------- the graph
    def inputs(self):
        graph, taken = self.proto.graph, set(self.consts)
        channels_last = self.proto.producer_name == "handgrad"
        inputs, dtypes = [], set()
        from onnx import helper
        for info in graph.input:
            if info.name in taken:
                continue
            tensor_type = info.type.tensor_type
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
            dims = [d.dim_value if d.HasField("dim_value") else None
                    for d in tensor_type.shape.dim]
            if len(dims) < 2 or any(d is None or d <= 0 for d in dims[1:]):
                raise ValueError(f"load_onnx: the graph input {info.name!r} has shape {dims}; "
                                 f"handgrad needs a batch axis and fixed per-example sizes")
            if dtype.kind != "f":
                raise ValueError(f"load_onnx: the graph input {info.name!r} is {dtype}; only "
                                 f"float inputs are supported")
            dtypes.add(dtype)
            self.batch = dims[0] if dims[0] is not None and dims[0] > 0 else -1
            rank = len(dims)
            perm = tuple(range(rank)) if channels_last else channels_last_perm(rank)
            hg_shape = [None] * rank
            for i, p in enumerate(perm):
                hg_shape[p] = dims[i]
            sym = input_tensor(tuple(hg_shape[1:]), info.name, None)
            inputs.append(sym)
            self.held[info.name] = Held(sym, perm)
        if len(dtypes) > 1:
            raise ValueError(f"load_onnx: the graph inputs mix dtypes {sorted(map(str, dtypes))}")
        return inputs, (dtypes.pop() if dtypes else np.dtype(np.float32))

    def run(self):
        for node in self.proto.graph.node:  # constants first: patterns look ahead
            if node.op_type == "Constant":
                self.node = node
                CONVERTERS["Constant"](self, node)
        for node in self.proto.graph.node:
            self.node = node
            if id(node) in self.skip:
                continue
            if load_maxvit.follow(self, node) or self.fold(node):
                continue
            converter = CONVERTERS.get(node.op_type)
            if converter is None:
                raise ValueError(
                    f"load_onnx: the {node.op_type} node {node.name or '(unnamed)'!r} has no "
                    f"handgrad counterpart; supported operators: {', '.join(sorted(CONVERTERS))}")
            converter(self, node)
        outputs = []
        for info in self.proto.graph.output:
            held = self.materialize(self.held[info.name]) if info.name in self.held else None
            if held is None:
                raise ValueError(f"load_onnx: the graph output {info.name!r} is a constant")
            ok = held.perm in (tuple(range(held.rank)), channels_last_perm(held.rank))
            outputs.append(held.sym if ok else self.need(held, tuple(range(held.rank))))
        return outputs

    def fold(self, node):
        """Compute a node on constants only (Shape of a held tensor included: its
        per-example sizes are known) once, at load time; False if it is not such a node."""
        given = [name for name in node.input if name]
        if node.op_type == "Shape" and given[0] in self.held:
            held = self.held[given[0]]
            held = held if held.groups else self.materialize(held)
            shape = np.array(full_shape(self, held), dtype=np.int64)
            a = {x.name: x.i for x in node.attribute}
            self.consts[node.output[0]] = shape[a.get("start", 0):a.get("end", len(shape))]
            return True
        if node.op_type not in FOLDABLE or not all(name in self.consts for name in given) \
                or load_attention.over_batch(self, node):
            return False
        from onnx.reference import ReferenceEvaluator
        feeds = {n: self.consts[n] for n in given}
        if getattr(self, "dtype", None) == np.float64 and all(
                v.size == 1 for v in feeds.values() if v.dtype == np.float32):
            # a scale torch computed in Python floats, written as float32 scalars (Swin's
            # head_dim ** -0.5): computed in float64
            feeds = {n: v.astype(np.float64) if v.dtype == np.float32 else v
                     for n, v in feeds.items()}
        try:
            values = ReferenceEvaluator(node).run(None, feeds)
        except Exception as error:  # e.g. a shape holding the symbolic batch (-1)
            shapes = {n: v.tolist() if v.size <= 8 else v.shape for n, v in feeds.items()}
            raise self.fail(f"computing it at load time on the constants {shapes} failed "
                            f"({type(error).__name__}: {error})") from error
        self.consts.update(zip(node.output, values))
        if node.op_type == "Transpose":  # torch's Linear on a map: MatMul(x, W^T)
            self.alias[node.output[0]] = self.alias.get(given[0], given[0])
        return True

    def set_out(self, node, held, index=0):
        self.held[node.output[index]] = held


def _as_proto(source):
    import onnx
    if isinstance(source, onnx.ModelProto):
        return source
    if isinstance(source, (str, os.PathLike)):
        return onnx.load(str(source))
    raise TypeError(f"load_onnx: 'source' must be a path or an onnx.ModelProto; received "
                    f"{describe(source)}")


def load_onnx(source):
    """The handgrad graph ``Model`` of the ONNX model ``source`` (a path or an
    ``onnx.ModelProto``), with its weights, in the dtype of its inputs. See the module
    docstring for layouts, names and what is refused."""
    try:
        import onnx  # noqa: F401
    except ImportError:
        raise ImportError('load_onnx: the onnx package is not installed (pip install '
                          '"handgrad[onnx]")') from None
    proto = _as_proto(source)
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None or opset < 13:
        raise ValueError(f"load_onnx: the model imports ONNX opset {opset}; opset 13 or later "
                         f"is supported")
    loader = Loader(proto)
    inputs, dtype = loader.inputs()
    loader.dtype = dtype
    outputs = loader.run()
    if len(outputs) > 1:  # named outputs: the graph's output names
        outputs = dict(zip((info.name for info in proto.graph.output), outputs))
    model = REGISTRY["Model"](inputs if len(inputs) > 1 else inputs[0],
                  outputs if len(outputs) > 1 else outputs[0], dtype=str(dtype))
    for node, layer, arrays in loader.weights:
        for key, value in arrays.items():
            target = layer.parameters if key in layer.parameters else layer.buffers
            if tuple(target[key].shape) != value.shape:
                loader.node = node
                raise loader.fail(f"{key} has shape {value.shape}; handgrad's "
                                  f"{type(layer).__name__} expects {tuple(target[key].shape)}")
            target[key][...] = value
    return model
