"""convert_torch handlers of the functions MaxViT's traced graph calls (attention written
out by hand), registered into :data:`.torch_convert_functions.FUNCTIONS`:

- ``torch.einsum`` of two operands in a batched-matmul form (``"bhid,bhjd->bhij"``:
  shared leading letters, one summed letter): ``Permute`` s of the operands, ``MatMul``,
  a ``Permute`` of the result where the output letters ask for it.
- ``F.softmax`` / ``Tensor.softmax``: ``Softmax`` over handgrad's axis of torch's dim.
- ``torch.swapaxes`` / ``swapdims``: a transpose.

Its chunks of any axis are :func:`.torch_convert_functions.chunk`; its table of relative
position biases gathered by ``relative_position_index`` is a ``Parameter`` (see
:mod:`.torch_convert_attention`).
"""

from __future__ import annotations

from .. import layers as L
from .einsum_form import matmul_form
from .torch_convert_functions import handles, permute
from .torch_convert_ops import Value, torch_to_handgrad_axis


def _dim(args, kwargs, position, default=None):
    return kwargs.get("dim", args[position] if len(args) > position else default)


@handles("softmax")
def softmax(conv, node, args, kwargs):
    x = args[0]
    if kwargs.get("dtype") is not None:
        conv.refuse(node, f"softmax with dtype={kwargs['dtype']}")
    axis = torch_to_handgrad_axis(_dim(args, kwargs, 1), len(x.shape), x.layout)
    return conv.call(L.Softmax(axis=axis), node, [x], x.layout)


@handles("swapaxes", "swapdims")
def swapaxes(conv, node, args, kwargs):
    dims = (kwargs.get("axis0", kwargs.get("dim0", args[1] if len(args) > 1 else None)),
            kwargs.get("axis1", kwargs.get("dim1", args[2] if len(args) > 2 else None)))
    return permute(conv, node, [args[0], *dims], {}, swap=True)


@handles("einsum")
def einsum(conv, node, args, kwargs):
    """A two-operand einsum in batched-matmul form as Permutes and a MatMul."""
    operands = args[1:] if len(args) > 2 else tuple(args[1])
    form = matmul_form(args[0])
    if form is None or len(operands) != 2 or not all(isinstance(v, Value) for v in operands):
        conv.refuse(node, f"einsum {args[0]!r} (converted: a batched matrix product of two "
                          f"tensors, their batch letter first, one summed letter)")
    ins = [_ordered(conv, node, v, order, k) for k, (v, order) in enumerate(
        zip(operands, (form.a, form.b)))]
    y = L.MatMul(name=conv.name(node.name))(ins)
    if form.out != tuple(range(len(form.out))):
        y = L.Permute(form.out[1:], name=conv.name(f"{node.name}_out"))(y)
    return Value(y, "plain", tuple(conv.runtime[node].shape))


def _ordered(conv, node, value, order, k):
    """``value`` as a handgrad tensor in torch's axis ``order``."""
    value = conv.as_layout(value, "plain", node)
    if order == tuple(range(len(order))):
        return value.tensor
    return L.Permute(order[1:], name=conv.name(f"{node.name}_in{k}"))(value.tensor)
