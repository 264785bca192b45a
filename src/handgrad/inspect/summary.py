"""Looking inside a model without running it: receptive fields, parameter memory and
the summary table.

Receptive field. Along each spatial axis, one output position of a layer sees ``size``
consecutive input positions of the model, and neighbouring output positions are
``jump`` input positions apart. A window layer (convolution or pooling with kernel
``k``, stride ``s``, dilation ``d``) maps them as::

    size' = size + (d * (k - 1)) * jump        jump' = jump * s

(two 3x3 convolutions: 1 -> 3 -> 5; conv 3, pool 2, conv 3: 1 -> 3 -> 4 -> 8, jump 2).
Padding moves the window but does not change its size. Point-wise layers (activations,
dropout, dense on the channel axis, normalization, whose pooled statistics are ignored
as is usual) keep the field; flatten, reshape, global pools, attention and recurrent
layers see the whole input; a transposed convolution has no single window ("n/a").
In a graph ``Model`` the fields follow the tensors: a merge of branches (``Add``,
``Multiply``, ``Concatenate`` on the channel axis) has the largest of their windows (as a
``Residual``), attention over several inputs sees them whole.

The summary table has one row per layer of a ``Sequential``, or one row per node (layer
call) of a graph ``Model``, with a "Connected to" column: the inputs of the call, by Input
name or by the label of the call that made them (``name``, ``name[k]`` for the call
``k`` of a shared layer, ``label:i`` for output ``i`` of a call with several). A shared
layer's parameters are counted at its first call (its later calls show 0) and once in
the totals.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._checks import describe, is_int
from ..layers import ConvND, Layer
from ..layers.symbolic import GraphNetwork, call_labels


@dataclass(frozen=True)
class ReceptiveField:
    """``kind`` is "window" (``size`` and ``jump`` per spatial axis), "whole" (every
    output position sees the whole input), "n/a" (no single window) or "none" (the
    input has no spatial axis)."""

    kind: str
    size: tuple = ()
    jump: tuple = ()

    def __str__(self):
        if self.kind != "window":
            return {"whole": "whole input", "none": "-"}.get(self.kind, self.kind)
        jump = self.jump[:1] if len(set(self.jump)) == 1 else self.jump
        return f"{'x'.join(map(str, self.size))} (jump {'x'.join(map(str, jump))})"


def input_field(input_shape) -> ReceptiveField:
    """The field of the model input (per-example shape, channels last): size 1, jump 1."""
    spatial = len(input_shape) - 1
    return ReceptiveField("window", (1,) * spatial, (1,) * spatial) if spatial > 0 \
        else ReceptiveField("none")


def chain_children(layer) -> list:
    """``[(name, child)]`` of a container whose forward runs its children one after the
    other (``layer.chain``: a ``Sequential``); ``[]`` for a leaf and for the containers
    that are not chains (a ``Residual``'s branches add; a graph model is "n/a")."""
    return list(layer.children()) if layer.chain else []


def _per_axis(value, default, rank):
    value = default if value is None else value
    return (int(value),) * rank if is_int(value) else tuple(int(v) for v in value)


def _window(layer, rank, pool):
    """(kernel, stride, dilation) per axis of a window layer, or None: from a pool's
    ``kwargs`` (stride None = the kernel), else from the layer's attributes."""
    config = layer.kwargs if pool else vars(layer)
    if "kernel_size" not in config:
        return None
    kernel = _per_axis(config["kernel_size"], 1, rank)
    stride = _per_axis(config.get("stride"), kernel if pool else 1, rank)
    dilation = _per_axis(config.get("dilation"), 1, rank)
    if not len(kernel) == len(stride) == len(dilation) == rank:
        return None
    return kernel, stride, dilation


def _merge(fields):
    """The field of a sum of branches: the largest window (same jumps required)."""
    if any(f.kind == "whole" for f in fields):
        return ReceptiveField("whole")
    if all(f.kind == "window" for f in fields) and len({f.jump for f in fields}) == 1:
        return ReceptiveField("window", tuple(map(max, *(f.size for f in fields))),
                              fields[0].jump)
    return fields[0] if all(f == fields[0] for f in fields) else ReceptiveField("n/a")


class _Fields:
    """The service a container's ``field_walk(fields, given) -> [field per output]``
    receives: the field after a layer, the merge of branches, a graph's output fields."""

    @staticmethod
    def after(layer, field):
        return next_field(layer, field)

    @staticmethod
    def merge(fields):
        return _merge(fields)

    @staticmethod
    def graph(model, given):
        if len(given) != len(model.inputs):  # a step of a chain with several inputs
            return [ReceptiveField("n/a")]
        fields = graph_fields(model, given)
        return [fields[t.uid] for t in model.outputs]


def next_field(layer, field: ReceptiveField) -> ReceptiveField:
    """The receptive field after ``layer`` given the field of its input, by the rule the
    layer declares (``receptive_field``; a container: ``field_walk`` or a chain)."""
    if field.kind == "none":
        return field
    if layer.field_walk is not None:
        return layer.field_walk(_Fields, [field])[0]
    steps = chain_children(layer)
    if steps:
        for _, child in steps:
            field = next_field(child, field)
        return field
    rule = layer.receptive_field
    if rule == "whole":
        return ReceptiveField("whole")
    if field.kind != "window" or rule == "pointwise":
        return field
    window = _window(layer, len(field.size), rule == "pool") if rule in ("window",
                                                                       "pool") else None
    if window is None:
        return ReceptiveField("n/a")
    size = tuple(r + d * (k - 1) * j for r, j, (k, s, d) in
                 zip(field.size, field.jump, zip(*window)))
    return ReceptiveField("window", size, tuple(j * s for j, s in zip(field.jump, window[1])))


def _node_fields(node, given) -> list:
    """The fields of the outputs of one graph call given those of its inputs."""
    layer = node.layer
    if layer.field_walk is not None:
        return layer.field_walk(_Fields, given)
    if len(given) == 1:
        return [next_field(layer, given[0])] * len(node.outputs)
    if all(f.kind == "none" for f in given):
        return [given[0]] * len(node.outputs)
    rule = layer.receptive_field
    if rule == "merge":
        return [_merge(given)]
    return [ReceptiveField("whole" if rule == "whole" else "n/a")] * len(node.outputs)


def graph_fields(model, inputs) -> dict:
    """``{tensor uid: ReceptiveField}`` for every tensor of the graph ``model`` given the
    fields of its inputs (a list in input order)."""
    fields = {t.uid: field for t, field in zip(model.inputs, inputs)}
    for node in model.nodes:
        outs = _node_fields(node, [fields[t.uid] for t in node.inputs])
        fields.update((t.uid, field) for t, field in zip(node.outputs, outs))
    return fields


def receptive_fields(model) -> list:
    """``[(layer name, ReceptiveField)]`` for the layers of a built ``Sequential``, or
    ``[(call label, field of its first output)]`` for the nodes of a graph ``Model``."""
    if isinstance(model, GraphNetwork):
        fields = graph_fields(model, [input_field(t.shape) for t in model.inputs])
        labels = call_labels(model.nodes)
        return [(labels[id(node)], fields[node.outputs[0].uid]) for node in model.nodes]
    steps = chain_children(model) if isinstance(model, Layer) and model.built else []
    if not steps:
        raise ValueError(f"receptive_fields: 'model' must be a built Sequential or a graph "
                         f"Model; received {describe(model)}")
    field, rows = input_field(model.input_shape), []
    for name, layer in steps:
        field = next_field(layer, field)
        rows.append((name, field))
    return rows


def parameter_bytes(layer) -> int:
    """Bytes held by the layer's parameters (gradients take as much again)."""
    return int(sum(p.nbytes for p in layer.named_parameters().values()))


def format_bytes(count) -> str:
    """``1536`` -> ``"1.5 KiB"`` (binary units)."""
    if count < 1024:
        return f"{int(count)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        count /= 1024
        if count < 1024 or unit == "TiB":
            return f"{count:.1f} {unit}"


def _shape(shape):
    return str((None, *shape))


def _table(title, rows, align, model) -> str:
    """The rows under ``title`` (the first row is the header), then the totals."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    rule = "-" * (sum(widths) + 2 * (len(widths) - 1))
    lines = [title, rule]
    for i, row in enumerate(rows):
        lines.append("  ".join(f"{v:{a}{w}}" for v, a, w in zip(row, align, widths)).rstrip())
        if i == 0:
            lines.append(rule)
    total = model.count_params()
    trainable = sum(p.size for p in model.named_parameters(trainable_only=True).values())
    lines += [rule, f"Total params: {total:,}", f"Trainable params: {trainable:,}",
              f"Non-trainable params: {total - trainable:,}",
              f"Parameter memory: {format_bytes(parameter_bytes(model))}"]
    return "\n".join(lines)


def _graph_table(model) -> str:
    """One row per node: label (type), output shape(s), parameters (at the first call of
    a layer), memory, the calls it is connected to and the receptive field."""
    labels, fields = call_labels(model.nodes), receptive_fields(model)
    sources = {t.uid: name for name, t in zip(model.input_names, model.inputs)}
    for node in model.nodes:
        for t in node.outputs:
            several = len(node.outputs) > 1
            sources[t.uid] = f"{labels[id(node)]}:{t.index}" if several else labels[id(node)]
    spatial = any(input_field(t.shape).kind != "none" for t in model.inputs)
    rows, seen = [("Layer (type)", "Output shape", "Params", "Memory", "Connected to",
                   "Receptive field")], set()
    for node, (_, field) in zip(model.nodes, fields):
        layer = node.layer
        first = id(layer) not in seen
        seen.add(id(layer))
        rows.append((f"{labels[id(node)]} ({layer.type_label})",
                     ", ".join(_shape(t.shape) for t in node.outputs),
                     f"{layer.count_params() if first else 0:,}",
                     format_bytes(parameter_bytes(layer) if first else 0),
                     ", ".join(sources[t.uid] for t in node.inputs), str(field)))
    rows = [row if spatial else row[:-1] for row in rows]
    inputs = ", ".join(f"{name} {_shape(t.shape)}" for name, t in
                       zip(model.input_names, model.inputs))
    title = (f"Model: {model.name or 'model'}   inputs {inputs}   outputs "
             f"{', '.join(model.output_names)}")
    return _table(title, rows, ["<", "<", ">", ">", "<", "<"], model)


def summary_table(model) -> str:
    """The text of ``summary()``: per layer of a ``Sequential`` (per node of a graph
    ``Model``, with the "Connected to" column) the output shape, parameter count,
    parameter memory and (for spatial inputs) receptive field, then the totals."""
    if isinstance(model, GraphNetwork):
        return _graph_table(model)
    fields = receptive_fields(model)
    spatial = fields and fields[0][1].kind != "none"
    rows = [("Layer (type)", "Output shape", "Params", "Memory", "Receptive field")]
    shape = model.input_shape
    for (name, layer), (_, field) in zip(chain_children(model), fields):
        shape = layer.output_shape(shape)
        rows.append((f"{name} ({layer.type_label})", _shape(shape),
                     f"{layer.count_params():,}", format_bytes(parameter_bytes(layer)),
                     str(field)))
    rows = [row if spatial else row[:-1] for row in rows]
    title = f"Model: {model.name or 'sequential'}   input {_shape(model.input_shape)}"
    return _table(title, rows, ["<", "<", ">", ">", "<"], model)


def print_summary(model, input_shape=None, print_fn=print) -> str:
    """What ``model.summary()`` does: build the model for ``input_shape`` (per example)
    if it is not built, then print (with ``print_fn``; None: do not print) and return
    :func:`summary_table`. Shapes are inferred without data."""
    if not model.built:
        if input_shape is None:
            raise ValueError(f"{model.label}.summary: the model is not built; pass "
                             f"input_shape (per example, e.g. (40, 1))")
        model.build(input_shape)
    text = summary_table(model)
    if print_fn is not None:
        print_fn(text)
    return text


def conv_layers(model) -> list:
    """The (transposed) convolution layers in ``model``, in order."""
    return [layer for _, layer in model.walk() if isinstance(layer, ConvND)]
