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
"""

from __future__ import annotations

from dataclasses import dataclass

from .._checks import describe, is_int
from ..layers.base import Layer

# Layers are recognized by the class names in their MRO, so subclasses are covered.
POINTWISE = ("Activation", "Dropout", "Dense", "BatchNorm", "LayerNorm", "GroupNorm",
             "InstanceNorm")
WHOLE_INPUT = ("Flatten", "Reshape", "GlobalPool", "MultiHeadAttention", "Recurrent")


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


def _is(layer, names):
    return any(cls.__name__ in names for cls in type(layer).__mro__)


def _per_axis(value, default, rank):
    value = default if value is None else value
    return (int(value),) * rank if is_int(value) else tuple(int(v) for v in value)


def _window(layer, rank):
    """(kernel, stride, dilation) per axis of a window layer, or None."""
    pool = isinstance(getattr(layer, "kwargs", None), dict)
    config = layer.kwargs if pool else vars(layer)
    if "kernel_size" not in config:
        return None
    kernel = _per_axis(config["kernel_size"], 1, rank)
    stride = _per_axis(config.get("stride"), kernel if pool else 1, rank)  # pool: None = k
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


def next_field(layer, field: ReceptiveField) -> ReceptiveField:
    """The receptive field after ``layer`` given the field of its input."""
    if field.kind == "none":
        return field
    if _is(layer, ("Sequential",)):
        for child in layer.layers:
            field = next_field(child, field)
        return field
    if _is(layer, ("Residual",)):
        short = field if layer.shortcut is None else next_field(layer.shortcut, field)
        return _merge([next_field(layer.block, field), short])
    if _is(layer, WHOLE_INPUT):
        return ReceptiveField("whole")
    if field.kind != "window":
        return field
    if getattr(layer, "transposed", False):
        return ReceptiveField("n/a")
    window = _window(layer, len(field.size))
    if window is not None:
        size = tuple(r + d * (k - 1) * j for r, j, (k, s, d) in
                     zip(field.size, field.jump, zip(*window)))
        return ReceptiveField("window", size, tuple(j * s for j, s in
                                                    zip(field.jump, window[1])))
    return field if _is(layer, POINTWISE) else ReceptiveField("n/a")


def receptive_fields(model) -> list:
    """``[(layer name, ReceptiveField)]`` for the layers of a built ``Sequential``."""
    if not getattr(model, "built", False) or not hasattr(model, "layers"):
        raise ValueError(f"receptive_fields: 'model' must be a built Sequential; received "
                         f"{describe(model)}")
    field, rows = input_field(model.input_shape), []
    for layer in model.layers:
        field = next_field(layer, field)
        rows.append((layer.name, field))
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


def summary_table(model) -> str:
    """The text of ``Sequential.summary``: per layer the output shape, parameter count,
    parameter memory and (for spatial inputs) receptive field, then the totals."""
    fields = receptive_fields(model)
    spatial = fields and fields[0][1].kind != "none"
    rows = [("Layer (type)", "Output shape", "Params", "Memory", "Receptive field")]
    shape = model.input_shape
    for layer, (_, field) in zip(model.layers, fields):
        shape = layer.output_shape(shape)
        rows.append((f"{layer.name} ({type(layer).__name__})", str((None, *shape)),
                     f"{layer.count_params():,}", format_bytes(parameter_bytes(layer)),
                     str(field)))
    rows = [row if spatial else row[:-1] for row in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    align = ["<", "<", ">", ">", "<"]
    rule = "-" * (sum(widths) + 2 * (len(widths) - 1))
    lines = [f"Model: {model.name or 'sequential'}   input {(None, *model.input_shape)}", rule]
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


def walk(layer, prefix=""):
    """``(path, layer)`` for ``layer`` and every layer nested in it, depth first; paths
    join names as in ``named_parameters`` (``"block.conv"``)."""
    yield prefix, layer
    for key, value in vars(layer).items():
        children = value if isinstance(value, list) else [value]
        for child in children:
            if isinstance(child, Layer) and child is not layer:
                name = (child.name or key) if isinstance(value, list) else key
                yield from walk(child, f"{prefix}.{name}" if prefix else name)


def conv_layers(model) -> list:
    """The (transposed) convolution layers in ``model``, in order."""
    return [layer for _, layer in walk(model) if _is(layer, ("ConvND",))]
