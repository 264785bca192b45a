"""The ONNX import's converters of what torch exports for MaxViT's attention (layouts as in
:mod:`.load`):

- ``Einsum`` of two tensors in a batched-matmul form (``"bhid,bhjd->bhij"``): the operands
  taken in the orders (batch, i, k) and (batch, k, j), a ``MatMul``, the result held in the
  equation's output order (no Permute for the output).
- A float initializer (or its flat Reshape, export_onnx's form) ``Gather`` ed by constant
  indices (MaxViT's table of relative position biases): not folded into a constant but
  followed as an index into the flat initializer through ``Gather``, ``Reshape``,
  ``Transpose``, ``Unsqueeze``, ``Squeeze`` and ``Flatten`` (the same op run on the index);
  where it meets a graph tensor in ``Add``, ``Sub`` or ``Mul``, or is ``Expand`` ed over
  the batch, :mod:`.load_attention` makes it a trainable ``Parameter(shape, index)`` named
  after the initializer (its torch name).

The loader calls :func:`follow` before its constant folding.
"""

from __future__ import annotations

import numpy as np

from ... import layers as L
from ..einsum_form import matmul_form
from .held import Held
from .load_ops import attrs, converts

#: ops that move or pick entries without arithmetic: they carry a gathered index along
_INDEXING = frozenset({"Gather", "Reshape", "Transpose", "Unsqueeze", "Squeeze", "Flatten",
                       "Identity"})


def _gathered(ld):
    if not hasattr(ld, "gathered"):
        ld.gathered = {}  # tensor name -> (initializer name, index into its flat values)
    return ld.gathered


def _flat(ld):
    if not hasattr(ld, "flat"):
        ld.flat = {}  # tensor name -> the float initializer it is the flat Reshape of
    return ld.flat


def _is_float_initializer(ld, name):
    return name in ld.consts and ld.consts[name].dtype.kind == "f" and any(
        init.name == name for init in ld.proto.graph.initializer)


def follow(ld, node):
    """Whether ``node`` is a step of a gathered initializer (then it is done here)."""
    gathered, flat = _gathered(ld), _flat(ld)
    data = node.input[0] if node.input else ""
    if _is_float_initializer(ld, data) and node.op_type == "Reshape" and np.array_equal(
            ld.consts.get(node.input[1]), [-1]):
        flat[node.output[0]] = data  # export_onnx's flat P of a Parameter: folded
        return False
    start = (node.op_type == "Gather" and data not in gathered
             and (_is_float_initializer(ld, data) or data in flat)
             and all(name in ld.consts for name in node.input[1:]))
    if node.op_type == "Expand" or (not start and data not in gathered):
        return False  # an Expand of a gathered initializer is a Parameter (load_attention)
    if node.op_type not in _INDEXING or any(name in gathered for name in node.input[1:]):
        raise ld.fail(f"the initializer {gathered.get(data, (data,))[0]!r} is used in a "
                      f"{node.op_type} (converted: gathered, reshaped, transposed, then "
                      f"added to or multiplied with a tensor)")
    source, index = gathered.get(data, (flat.get(data, data), None))
    if index is None:
        index = np.arange(ld.consts[data].size).reshape(ld.consts[data].shape)
    from onnx.reference import ReferenceEvaluator
    feeds = {name: ld.consts[name] for name in node.input[1:] if name}
    feeds[data] = index
    gathered[node.output[0]] = (source, ReferenceEvaluator(node).run(None, feeds)[0])
    return True


@converts("Einsum")
def einsum(ld, node):
    equation = attrs(node)["equation"]
    equation = equation.decode() if isinstance(equation, bytes) else equation
    form = matmul_form(equation)
    if form is None or len(node.input) != 2:
        raise ld.fail(f"equation {equation!r} (converted: a batched matrix product of two "
                      f"tensors, their batch letter first, one summed letter)")
    held = [ld.materialize(ld.get(name)) for name in node.input]
    # sym = ONNX.transpose(order) is held with perm argsort(order)
    ins = [ld.need(h, tuple(np.argsort(order))) for h, order in zip(held, (form.a, form.b))]
    ld.set_out(node, Held(L.MatMul()(ins), tuple(int(p) for p in form.out)))
