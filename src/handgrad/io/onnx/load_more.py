"""The ONNX import's converters of LayerNormalization, Slice, the Erf-based GELU pattern and
arithmetic with constants; they register into :data:`.load_ops.CONVERTERS` (layouts as in
:mod:`.load`)."""

from __future__ import annotations

import math

import numpy as np

from ... import layers as L
from .held import Held, channels_last_perm
from .load_ops import CONVERTERS, _spatial_class, attrs, converts
from .load_shapes import merge


@converts("LayerNormalization")
def layer_norm(ld, node):
    """LayerNorm over ONNX axes ``axis..``, taken with those axes trailing in order."""
    held, a = ld.materialize(ld.get(node.input[0])), attrs(node)
    r = held.rank
    axis = int(a.get("axis", -1)) % r
    if axis == 0 or any(node.output[1:]):
        raise ld.fail("normalizing the batch axis, or the mean/inverse-deviation outputs, "
                      "has no handgrad counterpart")
    perm = held.perm if tuple(held.perm[axis:]) == tuple(range(axis, r)) else tuple(range(r))
    scale = ld.const(node.input[1], "scale")
    bias = ld.const(node.input[2], "bias") if len(node.input) > 2 and node.input[2] else None
    layer = L.LayerNorm(tuple(held.onnx_shape[axis - 1:]), eps=float(a.get("epsilon", 1e-5)),
                        bias=bias is not None, name=ld.layer_name(node.input[1]))
    params = {"gamma": scale} if bias is None else {"gamma": scale, "beta": bias}
    ld.set_out(node, ld.call(layer, held, perm, params))


@converts("Slice")
def slice_(ld, node):
    """A Cropping layer, one sliced ONNX axis at a time, taken in a layout that puts that
    axis first after the batch (step 1 only)."""
    held = ld.materialize(ld.get(node.input[0]))
    consts = [ld.const(name, what).astype(np.int64).ravel() if len(node.input) > i and
              node.input[i] else None
              for i, (name, what) in enumerate(zip(list(node.input) + ["", "", ""],
                                                   ("", "starts", "ends", "axes", "steps")))
              if i > 0]
    starts, ends, axes, steps = consts
    axes = range(len(starts)) if axes is None else axes
    if steps is not None and any(s != 1 for s in steps):
        raise ld.fail(f"steps {steps.tolist()}: only step 1 is supported")
    r = held.rank
    if r < 3:
        raise ld.fail("slicing a tensor of rank < 3 has no handgrad layer")
    for start, end, axis in zip(starts, ends, axes):
        axis = int(axis) % r
        size = held.onnx_shape[axis - 1]
        start, end = (min(max(int(v) + size if v < 0 else int(v), 0), size)
                      for v in (start, end))
        if axis == 0:
            raise ld.fail("slicing the batch axis has no handgrad layer")
        if (start, end) == (0, size):
            continue
        order = [0, axis, *[j for j in range(1, r) if j != axis]]
        perm = tuple(order.index(j) for j in range(r))
        pairs = [(start, size - end)] + [(0, 0)] * (r - 3)
        held = ld.call(_spatial_class(ld, "Cropping", r - 2)(tuple(pairs)), held, perm)
    ld.set_out(node, held)


def _sole(ld, name, op_type):
    readers = ld.consumers.get(name, [])
    return readers[0] if len(readers) == 1 and readers[0].op_type == op_type else None


def _scalar(ld, name):
    value = ld.consts.get(name)
    return float(value.reshape(())) if value is not None and value.size == 1 else None


def _gelu_nodes(ld, node):
    """The nodes of torch's exact GELU below opset 20 starting at this Div:
    ``Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)``; None if it is not that."""
    x = node.input[0]
    if not np.isclose(_scalar(ld, node.input[1]) or 0.0, math.sqrt(2.0), rtol=1e-6):
        return None
    erf = _sole(ld, node.output[0], "Erf")
    add = erf and _sole(ld, erf.output[0], "Add")
    if not add or _scalar(ld, next(n for n in add.input if n != erf.output[0])) != 1.0:
        return None
    mul = _sole(ld, add.output[0], "Mul")
    if not mul or set(mul.input) != {x, add.output[0]}:
        return None
    half = _sole(ld, mul.output[0], "Mul")
    if not half or _scalar(ld, next(n for n in half.input if n != mul.output[0])) != 0.5:
        return None
    return [erf, add, mul, half]


def arithmetic(ld, node):
    """A merge of graph tensors; with one constant: the GELU pattern (at its Div), a scalar
    as Rescaling, or a per-channel factor (ConvNeXt's layer scale) as a Parameter named
    after the constant times the map."""
    const = [name for name in node.input if name in ld.consts]
    if not const:
        return merge(ld, node)
    gelu = _gelu_nodes(ld, node) if node.op_type == "Div" else None
    if gelu is not None:
        held = ld.get(node.input[0])
        ld.skip.update(id(n) for n in gelu)
        ld.held[gelu[-1].output[0]] = ld.call(L.GELU(), ld.materialize(held))
        return None
    other = [name for name in node.input if name not in ld.consts]
    if len(other) != 1:
        raise ld.fail("arithmetic on constants only is computed at load time; this one is not")
    held, value = ld.materialize(ld.get(other[0])), ld.consts[const[0]]
    first = node.input[0] == const[0]
    if value.size == 1:
        c = float(value.reshape(()))
        if node.op_type in ("Sub", "Div") and first:
            raise ld.fail(f"a constant {node.op_type.lower()}ed by a tensor has no handgrad "
                          f"layer")
        scale, offset = {"Mul": (c, 0.0), "Div": (1.0 / c, 0.0), "Add": (1.0, c),
                         "Sub": (1.0, -c)}[node.op_type]
        return ld.set_out(node, ld.call(L.Rescaling(scale, offset), held))
    r, shape = held.rank, value.shape
    channels = held.onnx_shape[0]
    per_channel = (r > 2 and value.ndim in (r - 1, r) and value.size == channels
                   and shape[value.ndim - r + 1] == channels)
    if node.op_type != "Mul" or not per_channel:
        raise ld.fail(f"{node.op_type} with a constant of shape {shape} has no handgrad "
                      f"layer (scalars, and per-channel factors of a map, are supported)")
    # a Parameter named after the constant (torch's name: later checkpoints load), held
    # channels-last (1, ..., 1, C) and broadcast over the map by a Multiply
    index = np.arange(channels).reshape(*(1,) * (r - 2), channels)
    name = const[0] if const[0] not in ld.names else None
    ld.names.add(const[0])
    perm = channels_last_perm(r)
    param = ld.call(L.Parameter(value.shape, index=index, name=name), held, perm,
                    {"P": value})
    return ld.set_out(node, Held(L.Multiply()([ld.need(held, perm), param.sym]), perm))

for _op in ("Add", "Sub", "Mul", "Div"):
    CONVERTERS[_op] = arithmetic
