"""Converters of the layer calls that take several tensors (nodes of a graph ``Model``)::

    Add                   Sum of the inputs, in one layout
    Multiply              Mul, input by input, in one layout
    Concatenate           Concat: on the channel axis of maps held channels first, axis 1;
                          otherwise channels last on handgrad's axis
    MultiHeadAttention    mha([query, key_value]) or mha([query, key, value]): attention
                          of the query to the key and value tensors (+ causal mask)

The inputs of an elementwise merge are put in the layout of the first one (channels
first when it is held so, else channels last), so a merge inside a conv section adds
no Transpose. A converter is ``f(g, layer, values, out_shape) -> Value``.
"""

from __future__ import annotations

from ...layers import Add, Concatenate, MultiHeadAttention, Multiply
from .converters import attention
from .graph import Value, channels_first, channels_last


def _aligned(g, values):
    """``(values in one layout, whether it is channels first)``."""
    first = values[0].first and all(v.rank >= 3 for v in values)
    return [channels_first(g, v) if first else channels_last(g, v) for v in values], first


def add(g, layer, values, out_shape):
    values, first = _aligned(g, values)
    return Value(g.op("Sum", [v.name for v in values], "add"), tuple(out_shape), first)


def multiply(g, layer, values, out_shape):
    values, first = _aligned(g, values)
    y = values[0].name
    for v in values[1:]:
        y = g.op("Mul", [y, v.name], "multiply")
    return Value(y, tuple(out_shape), first)


def concatenate(g, layer, values, out_shape):
    rank = values[0].rank  # with the batch axis
    axis = layer.axis % rank
    if axis == rank - 1 and values[0].first and rank >= 3:  # channels, held channels first
        values = [channels_first(g, v) for v in values]
        return Value(g.op("Concat", [v.name for v in values], "concatenate", axis=1),
                     tuple(out_shape), True)
    values = [channels_last(g, v) for v in values]
    return Value(g.op("Concat", [v.name for v in values], "concatenate", axis=axis),
                 tuple(out_shape), False)


def cross_attention(g, layer, values, out_shape):
    return attention(g, layer, values[0], out_shape, *values[1:])


#: layer family -> converter of a call on several tensors
MULTI_CONVERTERS = {Add: add, Multiply: multiply, Concatenate: concatenate,
                    MultiHeadAttention: cross_attention}


def multi_converter(layer):
    """The converter of a call of ``layer`` on several tensors (nearest base class)."""
    for cls in type(layer).__mro__:
        if cls in MULTI_CONVERTERS:
            return MULTI_CONVERTERS[cls]
    raise ValueError(f"export_onnx: {layer.label} ({type(layer).__name__}) is called on "
                     f"several tensors and has no ONNX export for that; exportable: Add, "
                     f"Multiply, Concatenate, MultiHeadAttention and graph Models")
