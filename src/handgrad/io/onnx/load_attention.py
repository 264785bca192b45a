"""The ONNX import's converters for what torch exports for attention (ViT's
``nn.MultiheadAttention``, Swin's shifted windows), on the grouped layouts of
:mod:`.load_groups`; they wrap the converters registered before them in
:data:`.load_ops.CONVERTERS` and hand plain tensors to those where they can:

- Transpose, Reshape, Squeeze, Unsqueeze: bookkeeping of groups (a Reshape that splits an
  axis: one Reshape layer); a Reshape that is no regrouping falls back to the plain one.
- MatMul of two tensors: a batched ``MatMul`` over their leading axes (laid out alike);
  with a constant weight, Gemm, LayerNormalization over the last axis, Softmax, unary
  activations and arithmetic with a scalar act on the handgrad tensor in place.
- Gather of one entry (constant scalar index) of a non-batch axis: Reshape, Cropping2D,
  Reshape (ViT's ``x[:, 0]`` readout, the q/k/v of a packed projection).
- Slice with a step s (Swin's ``x[..., 0::2, 0::2, :]``): the axis split into (size/s, s)
  and the entry ``start`` of the second picked.
- A float constant in Add/Sub/Mul with a tensor (not a scalar): a ``Parameter`` broadcast
  to the tensor's layout, trainable and named after the initializer (ViT's
  ``encoder.pos_embedding``), frozen for a computed constant (Swin's shift mask);
  an initializer gathered by constant indices (:mod:`.load_maxvit`) likewise.
- Expand of an initializer (or a gathered one) over the batch, fixed or symbolic (ViT's
  class token; export_onnx's Parameter): a ``Parameter`` named after it. A Pad of zeros
  vanishes.
"""

from __future__ import annotations

import numpy as np

from ... import layers as L
from . import load_groups as G
from . import load_maxvit, load_more  # noqa: F401  (register first: their converters are wrapped)
from .held import Held
from .load_ops import CONVERTERS, attrs, converts

PLAIN = dict(CONVERTERS)  # the converters of plain tensors, wrapped below


def _initializer(ld, name):
    """Whether ``name`` is an initializer, or an Identity of one (torch's exporter writes
    one initializer for equal tensors, the others as its Identities)."""
    if not hasattr(ld, "initializers"):
        ld.initializers = {t.name for t in ld.proto.graph.initializer}
        for node in ld.proto.graph.node:
            if node.op_type == "Identity" and node.input[0] in ld.initializers:
                ld.initializers.add(node.output[0])
    return name in ld.initializers


def _grouped(ld, name):
    held = ld.held.get(name)
    return held is not None and held.groups is not None


def _viewed(ld, node, layout, names):
    """Run the plain converter on ``names`` (held in ``layout``, the same for all) seen as
    plain tensors of the handgrad axes; what it holds anew gets ``layout`` back."""
    saved = {name: ld.held[name] for name in names}
    view = Held(layout.sym, tuple(range(len(layout.sym.shape) + 1)))
    before = set(ld.held)
    for name in names:
        ld.held[name] = Held(saved[name].sym, view.perm)
    try:
        PLAIN[node.op_type](ld, node)
    finally:
        ld.held.update(saved)
    perm, groups = G.layout(ld, layout)
    for name in set(ld.held) - before:
        out = ld.held[name]
        if out.perm != tuple(range(out.rank)) or out.flat is not None:
            raise ld.fail("the operator changed the layout of a grouped tensor")
        ld.held[name] = G.make(out.sym, perm, groups)


def _same_layout(ld, helds):
    first = helds[0]
    return all(G.layout(ld, h) == G.layout(ld, first) and h.sym.shape == first.sym.shape
               for h in helds)


def _tensor_inputs(ld, node):
    return [name for name in node.input if name and name in ld.held]


def _elementwise(ld, node):
    """An op acting entry by entry (or on the last axis, canonical) on grouped inputs."""
    names = _tensor_inputs(ld, node)
    if not any(_grouped(ld, n) for n in names):
        return PLAIN[node.op_type](ld, node)
    helds = [ld.held[n] for n in names]
    if node.op_type in ("LayerNormalization", "MatMul", "Gemm"):
        a = attrs(node).get("axis", -1)
        if a not in (-1, helds[0].rank - 1):
            raise ld.fail("normalizing several axes of a grouped tensor is not supported")
        helds = [G.axis_of(ld, helds[0], -1)[0]]
        ld.held[names[0]] = helds[0]
    if not _same_layout(ld, helds):
        helds = [G.canonical(ld, h) for h in helds]
        if not _same_layout(ld, helds):
            helds = [G.plain(ld, h) for h in helds]
        for name, h in zip(names, helds):
            ld.held[name] = h
    if helds[0].groups is None:
        return PLAIN[node.op_type](ld, node)
    _viewed(ld, node, helds[0], names)


for _op in ("Relu", "Sigmoid", "Tanh", "Softplus", "LayerNormalization", "Gemm", "Div"):
    CONVERTERS[_op] = _elementwise


@converts("Add", "Sub", "Mul")
def arithmetic(ld, node):
    """With a non-scalar float constant (or a gathered initializer): a Parameter;
    otherwise elementwise."""
    gathered = getattr(ld, "gathered", {})
    consts = [n for n in node.input if n in ld.consts and ld.consts[n].size > 1
              and ld.consts[n].dtype.kind == "f"]
    names = _tensor_inputs(ld, node)
    if len(names) == 1 and any(n in gathered for n in node.input):
        source, index = gathered[next(n for n in node.input if n in gathered)]
        return _with_parameter(ld, node, names[0], source, index)
    if len(names) == 1 and consts and (_grouped(ld, names[0]) or node.op_type != "Mul"):
        value = ld.consts[consts[0]]
        if _initializer(ld, consts[0]):
            index = np.arange(value.size).reshape(value.shape)
            return _with_parameter(ld, node, names[0], consts[0], index)
        return _with_parameter(ld, node, names[0], None, value)
    return _elementwise(ld, node)


def _with_parameter(ld, node, name, source, index):
    """``x op P``: P the initializer ``source`` gathered by ``index`` (trainable, named
    after it), or with no source the constant ``index`` itself (frozen)."""
    held = ld.held[name]
    if not held.groups:
        held = ld.materialize(held)
    hg = np.ascontiguousarray(G.hg_constant(ld, held, index))
    if source is None:
        layer, params = L.Parameter(hg.shape, trainable=False), {"P": hg}
    else:
        table = ld.consts[source]
        layer = L.Parameter(table.shape, index=hg, name=source if source not in ld.names
                            else None)
        ld.names.add(source)
        params = {"P": table}
    param = layer(held.sym)
    ld.weights.append((node, layer, params))
    merged = {"Add": L.Add, "Mul": L.Multiply, "Sub": L.Subtract}[node.op_type]()
    pair = [held.sym if n == name else param for n in node.input]
    perm, groups = G.layout(ld, held)
    ld.set_out(node, G.make(merged(pair), perm, groups))


@converts("MatMul")
def matmul(ld, node):
    """Of two tensors: a batched MatMul over their leading axes; with a constant weight:
    a Dense (on the last axis of a grouped tensor)."""
    names = _tensor_inputs(ld, node)
    if len(names) == 1:
        source = ld.alias.get(node.input[1], node.input[1])
        if names[0] == node.input[0] and source in ld.consts and "." in source and \
                not source.endswith(".weight"):
            return _parameter_matmul(ld, node, source)
        return _elementwise(ld, node)
    a, b = (G.canonical(ld, ld.get(n)) for n in node.input)
    for h in (a, b):
        lists = G.group_lists(*G.layout(ld, h))
        if len(lists) < 3 or 0 in lists[-1] or 0 in lists[-2]:
            raise ld.fail(f"a product of tensors of ONNX shapes {G.full_shape(ld, a)} and "
                          f"{G.full_shape(ld, b)}: the batch must be in a leading axis")
    la, lb = G.layout(ld, a), G.layout(ld, b)
    if la[0][:-2] != lb[0][:-2] or la[1][:-2] != lb[1][:-2] or \
            a.sym.shape[:-2] != b.sym.shape[:-2]:
        raise ld.fail(f"a product of tensors of ONNX shapes {G.full_shape(ld, a)} and "
                      f"{G.full_shape(ld, b)} with different leading axes (broadcasting)")
    ld.set_out(node, G.make(L.MatMul()([a.sym, b.sym]), *la))


def _parameter_matmul(ld, node, source):
    """``x @ W`` with W an initializer named as no module's weight (``nn.MultiheadAttention``'s
    ``in_proj_weight``): a Parameter of that name (W gathered from it) and a MatMul, the
    leading axes of x merged."""
    w, table = ld.consts[node.input[1]], ld.consts[source]
    index = np.arange(table.size).reshape(table.shape)
    index = index.T if w.ndim == 2 and w.shape == table.T.shape and np.array_equal(
        w, table.T) else index
    if w.ndim != 2 or not np.array_equal(table.ravel()[index], w):
        raise ld.fail(f"the weight {source!r} of shape {w.shape} (converted: a matrix or its "
                      f"transpose)")
    held, _ = G.axis_of(ld, ld.get(node.input[0]), -1)
    shape = tuple(held.sym.shape)
    layer = L.Parameter(table.shape, index=np.ascontiguousarray(index),
                        name=source if source not in ld.names else None)
    ld.names.add(source)
    ld.weights.append((node, layer, {"P": table}))
    x = G.reshape(held.sym, (int(np.prod(shape[:-1])), shape[-1]))
    y = G.reshape(L.MatMul()([x, layer(held.sym)]), (*shape[:-1], w.shape[1]))
    ld.set_out(node, G.make(y, *G.layout(ld, held)))


@converts("Softmax")
def softmax(ld, node):
    if not _grouped(ld, node.input[0]):
        return PLAIN["Softmax"](ld, node)
    held, h = G.axis_of(ld, ld.get(node.input[0]), int(attrs(node).get("axis", -1)))
    ld.set_out(node, G.make(L.Softmax(axis=h)(held.sym), *G.layout(ld, held)))


@converts("Transpose")
def transpose(ld, node):
    held = ld.get(node.input[0])
    order = attrs(node).get("perm", list(reversed(range(held.rank))))
    ld.set_out(node, G.transpose(ld, held, order))


@converts("Reshape")
def reshape(ld, node):
    """Regrouping where it is one; else (a plain tensor) the plain Reshape."""
    held = ld.get(node.input[0])
    target = [int(d) for d in ld.const(node.input[1], "shape")]
    grouped = held.groups is not None
    if not grouped and (target[:1] in ([0], [-1], [ld.batch])) and len(target) == 2:
        return PLAIN["Reshape"](ld, node)  # a flatten: the plain one keeps torch's order
    if ld.batch <= 0 and not grouped:
        return PLAIN["Reshape"](ld, node)
    full = G.full_shape(ld, held)
    target = [full[i] if d == 0 else d for i, d in enumerate(target)]
    if -1 in target:
        known = int(np.prod([d for d in target if d != -1]))
        target[target.index(-1)] = int(np.prod(full)) // known
    out = G.regroup(ld, held, target) if int(np.prod(target)) == int(np.prod(full)) else None
    if out is None:
        if grouped:
            held = G.plain(ld, held)
            ld.held[node.input[0]] = held
            if target[0] == ld.batch:
                return PLAIN["Reshape"](ld, node)
        raise ld.fail(f"reshaping {full} to {target} is no regrouping of its axes and moves "
                      f"the batch")
    ld.set_out(node, out)


@converts("Squeeze", "Unsqueeze")
def squeeze(ld, node):
    held = ld.get(node.input[0])
    axes = attrs(node).get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = ld.const(node.input[1], "axes").tolist()
    if axes is None:
        return PLAIN[node.op_type](ld, node)
    if node.op_type == "Unsqueeze":
        return ld.set_out(node, G.unsqueeze(ld, held, axes))
    ld.set_out(node, G.squeeze(ld, held, axes))


@converts("Gather")
def gather(ld, node):
    index = ld.const(node.input[1], "index")
    if index.ndim != 0:
        raise ld.fail(f"indices of shape {index.shape} (converted: one constant index)")
    held = ld.get(node.input[0])
    ld.set_out(node, G.select(ld, held, int(attrs(node).get("axis", 0)), int(index)))


@converts("Slice")
def slice_(ld, node):
    """Steps of 1: the plain Slice; a step s: a split of the axis and a pick."""
    inputs = list(node.input) + [""] * 5
    steps = ld.const(inputs[4], "steps").ravel() if inputs[4] else None
    if steps is None or all(s == 1 for s in steps):
        if _grouped(ld, node.input[0]):
            ld.held[node.input[0]] = G.plain(ld, ld.held[node.input[0]])
        return PLAIN["Slice"](ld, node)
    held = ld.get(node.input[0])
    starts, ends = (ld.const(inputs[i], what).ravel() for i, what in ((1, "starts"),
                                                                      (2, "ends")))
    axes = ld.const(inputs[3], "axes").ravel() if inputs[3] else range(len(starts))
    for start, end, axis, step in zip(starts, ends, axes, steps):
        full = G.full_shape(ld, held)
        axis, step, start = int(axis) % len(full), int(step), int(start)
        size = full[axis]
        if step < 1 or size % step or not 0 <= start < step or min(int(end), size) < size:
            raise ld.fail(f"start {start}, end {end}, step {step} of an axis of size {size} "
                          f"(converted: steps that pick one entry of every step, to the end)")
        split = G.regroup(ld, held, [*full[:axis], size // step, step, *full[axis + 1:]])
        if split is None:
            raise ld.fail(f"the axis {axis} holds the batch")
        held = G.select(ld, split, axis + 1, start)
    ld.set_out(node, held)


@converts("Pad")
def pad(ld, node):
    pads = ld.const(node.input[1], "pads")
    if np.all(pads == 0):
        return ld.set_out(node, ld.get(node.input[0]))
    return PLAIN["Pad"](ld, node)


def _expanded(ld, node):
    """``(source, its value, whether an initializer, index)`` of the data of an Expand: a
    float constant (index: its own order) or a gathered initializer; None otherwise."""
    gathered = getattr(ld, "gathered", {})
    if node.input[0] in gathered:
        source, index = gathered[node.input[0]]
        return source, ld.consts[source], True, index
    value = ld.consts.get(node.input[0])
    if value is None or value.dtype.kind != "f":
        return None
    index = np.arange(value.size).reshape(value.shape)
    return node.input[0], value, _initializer(ld, node.input[0]), index


def _expanded_sizes(ld, node):
    """The per-example sizes of an Expand of a float constant (or a gathered initializer)
    over the batch, None for another node: the broadcast of the data and the target
    (batch, ...), the batch the graph input's, fixed or symbolic (-1 from the folded Shape
    of an ``export_onnx`` input), the data without a batch axis of its own."""
    data = _expanded(ld, node) if node.op_type == "Expand" else None
    if data is None or node.input[1] not in ld.consts:
        return None
    shape, target = data[3].shape, tuple(int(d) for d in ld.consts[node.input[1]])
    if len(target) < 2 or target[0] != ld.batch or ld.batch == 0 or len(shape) > len(target) \
            or (len(shape) == len(target) and shape[0] != 1):
        return None
    try:
        return np.broadcast_shapes(shape, (1, *target[1:]))[1:]
    except ValueError:
        return None


def over_batch(ld, node):
    """Whether ``node`` is an Expand of a constant over the batch (not folded)."""
    return _expanded_sizes(ld, node) is not None


@converts("Expand")
def expand(ld, node):
    """A constant or a gathered initializer expanded over the batch: a Parameter (named
    after an initializer; None index where it is the constant as it is)."""
    if not over_batch(ld, node):
        raise ld.fail("expanding a tensor (converted: a constant or a gathered initializer "
                      "over the batch)")
    source, value, initializer, index = _expanded(ld, node)
    sizes = _expanded_sizes(ld, node)
    index = np.ascontiguousarray(np.broadcast_to(index, (1, *sizes))[0])
    if value.shape == sizes and np.array_equal(index.ravel(), np.arange(value.size)):
        index = None
    name = source if initializer and source not in ld.names else None
    ld.names.add(source)
    layer = L.Parameter(value.shape, index=index, name=name, trainable=initializer)
    ld.weights.append((node, layer, {"P": value}))
    source = ld.held[ld.proto.graph.input[0].name]
    ld.set_out(node, Held(layer(source.sym), tuple(range(len(sizes) + 1))))
