"""convert_torch's parameters read outside their module's call (``get_attr``) and
``nn.MultiheadAttention``; index reads of tensors (``select``, used by ``getitem``).

Parameters and buffers read by ``get_attr`` (ViT's ``class_token``,
``encoder.pos_embedding``) are held as an :class:`Attr`: the tensor's flat positions
(an integer ``arange`` in the tensor's shape), carried through views, permutes, expands
and index reads by running the same torch op on them. Where an Attr meets a converted
tensor (``torch.cat``, arithmetic) it becomes a ``Parameter`` layer named after the
torch attribute (so ``from_torch`` loads it by that name) that gathers the tensor by
those positions for every example (held in that tensor's layout): a chain of views of
a parameter is one gather. Another Attr a view reads (``table[relative_position_index]``)
gives its values, and its name goes to the Parameter's ``torch_sources``. A buffer
becomes a constant ``Parameter`` (``trainable=False``) with its values.
"""

from __future__ import annotations

import math

import numpy as np

from .. import layers as L
from .torch_convert_ops import Value


class Attr:
    """A parameter or buffer ``target`` of the traced module as the converter holds it:
    ``index`` (a torch int64 tensor of the current shape) gives each entry's flat
    position in ``tensor`` (of shape ``shape``); ``trainable`` for a parameter; ``sources``:
    the buffers whose values chose the positions (``relative_position_index``)."""

    def __init__(self, target, tensor, index, trainable, sources=frozenset()):
        self.target, self.tensor, self.index, self.trainable = target, tensor, index, trainable
        self.shape, self.sources = tuple(tensor.shape), frozenset(sources)

    def values(self):
        """The entries as read (the tensor gathered by the index)."""
        return self.tensor.reshape(-1)[self.index]


def attribute(conv, node):
    """The :class:`Attr` of a ``get_attr`` node."""
    import torch
    tensor = conv.runtime[node]
    if not isinstance(tensor, torch.Tensor) or tensor.ndim == 0:
        conv.refuse(node, "a parameter or buffer that is not a tensor of at least one axis")
    trainable = node.target in dict(conv.module.named_parameters())
    index = torch.arange(tensor.numel()).reshape(tensor.shape)
    return Attr(node.target, tensor.detach(), index, trainable)


def _flat(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _flat(a)
        else:
            yield a


def _positions(a):
    """``a`` with every Attr replaced by its values (an index into the viewed one)."""
    if isinstance(a, Attr):
        return a.values()
    if isinstance(a, (list, tuple)):
        return type(a)(_positions(x) for x in a)
    if isinstance(a, dict):
        return {k: _positions(x) for k, x in a.items()}
    return a


def view(conv, node, target, args, kwargs):
    """An op on parameters alone (no converted tensor): its :class:`Attr` (True), else
    False."""
    values = list(_flat([*args, *kwargs.values()]))
    if not any(isinstance(v, Attr) for v in values) or any(isinstance(v, Value)
                                                           for v in values):
        return False
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    conv.values[node] = _view(conv, node, target, name, args, kwargs)
    return True


def _view(conv, node, target, name, args, kwargs):
    """An op on a parameter alone: run on its positions (a view, a permute, an expand)."""
    import torch
    attr = args[0]
    if not isinstance(attr, Attr):
        conv.refuse(node, f"{name} of a parameter that is not its first argument")
    # the viewed parameter by its positions; another (an index buffer) by its values
    pos_args = (attr.index, *_positions(args[1:]))
    pos_kwargs = _positions(kwargs)
    try:
        if node.op == "call_method":
            index = getattr(pos_args[0], target)(*pos_args[1:], **pos_kwargs)
        else:
            index = target(*pos_args, **pos_kwargs)
    except (RuntimeError, TypeError) as error:
        conv.refuse(node, f"{name} of the parameter {attr.target!r} is not a view ({error})")
    expected = conv.runtime[node]
    made = Attr(attr.target, attr.tensor, index, attr.trainable,
                attr.sources | {v.target for v in _flat([*args[1:], *kwargs.values()])
                                if isinstance(v, Attr)})
    # a view's result is the parameter's entries at the positions it moved (a sum is not)
    if not isinstance(index, torch.Tensor) or index.dtype != torch.int64 or \
            tuple(index.shape) != tuple(expected.shape) or index.ndim == 0 or \
            not 0 <= int(index.min()) <= int(index.max()) < math.prod(attr.shape) or \
            not torch.equal(made.values(), expected):
        conv.refuse(node, f"{name} of the parameter {attr.target!r} computes new values; "
                          f"only views, permutes, expands and index reads are converted")
    return made


def materialized(conv, node, args, kwargs):
    """``args`` and ``kwargs`` with every Attr that meets a converted tensor as the output
    of a ``Parameter`` layer, broadcast to that tensor's rank over its batch."""
    values = [v for v in _flat([*args, *kwargs.values()]) if isinstance(v, Value)]
    if not values or not any(isinstance(v, Attr) for v in _flat([*args, *kwargs.values()])):
        return args, kwargs
    like = values[0]

    def convert(a):
        if isinstance(a, Attr):
            return parameter(conv, node, a, like)
        if isinstance(a, (list, tuple)):
            return type(a)(convert(x) for x in a)
        return a

    return convert(args), {k: convert(v) for k, v in kwargs.items()}


def parameter(conv, node, attr, like):
    """The Value of a ``Parameter`` layer that gives ``attr`` for each example of
    ``like``'s batch (the attribute's leading axis is 1, or an expand over the batch),
    held in ``like``'s layout (a per-channel factor (C, 1, 1) of maps: (1, 1, C))."""
    index, rank, batch = attr.index, len(like.shape), like.shape[0]
    if index.ndim > rank:
        conv.refuse(node, f"the parameter {attr.target!r} has more axes than the tensor "
                          f"it meets")
    index = index.reshape((1,) * (rank - index.ndim) + tuple(index.shape))
    if index.shape[0] not in (1, batch) or (index != index[:1]).any():
        conv.refuse(node, f"the parameter {attr.target!r} differs along the batch axis")
    try:
        np.broadcast_shapes(tuple(index.shape[1:]), like.shape[1:])
    except ValueError:
        conv.refuse(node, f"the parameter {attr.target!r} (as read: {tuple(index.shape)}) "
                          f"does not broadcast to the tensor it meets {like.shape}")
    per_example = index[0].numpy()
    layout = like.layout if rank >= 3 else "plain"
    if layout == "cf":
        per_example = np.ascontiguousarray(np.moveaxis(per_example, 0, -1))
    made = conv.attributes.get(attr.target)
    if made is None:
        sources = sorted(attr.sources | ({attr.target} if not attr.trainable else set()))
        values = None if attr.trainable else attr.tensor.cpu().numpy()
        layer = L.Parameter(attr.shape, per_example, trainable=attr.trainable,
                            name=attr.target, torch_sources=sources,
                            **({} if values is None else {"dtype": str(values.dtype)}))
        if values is not None:  # a buffer: a constant, its values fixed now
            layer.ensure_built(like.shape[1:])
            layer.tensor[...] = values
        conv.names.add(attr.target)
        conv.attributes[attr.target] = made = layer
    elif not np.array_equal(made.index, per_example):
        conv.refuse(node, f"the parameter {attr.target!r} is read in two different ways "
                          f"(handgrad holds it once, as one gather)")
    return Value(made(like.tensor), layout, (batch, *index.shape[1:]))


def select(conv, node, x, index):
    """``x[index]`` for ints and slices of step 1 on one axis past the batch (ViT's class
    token ``x[:, 0]``): the axis cropped (a Cropping1D on (N, axis, rest)), then
    reshaped."""
    index = index if isinstance(index, tuple) else (index,)
    whole = slice(None)
    axes = [i for i, s in enumerate(index) if not (isinstance(s, slice) and s == whole)]
    if not index or index[0] != whole or len(axes) != 1 or any(
            s is None or s is Ellipsis for s in index) or \
            (isinstance(index[axes[0]], slice) and index[axes[0]].step not in (None, 1)):
        conv.refuse(node, f"the index {index} (converted: an int or a slice of step 1 on "
                          f"one axis past the batch)")
    axis, item = axes[0], index[axes[0]]
    x = conv.as_layout(x, "plain", node)
    size = x.shape[axis]
    start, stop, _ = (slice(item, item + 1 if item != -1 else None) if isinstance(item, int)
                      else item).indices(size)
    before, rest = math.prod(x.shape[1:axis]), math.prod(x.shape[axis + 1:])
    if before != 1:
        conv.refuse(node, f"an index on axis {axis} behind other axes of size > 1")
    name = conv.name(node.name)
    y = L.Reshape((size, rest), name=f"{name}_rows")(x.tensor)
    y = L.Cropping1D((start, size - stop), name=f"{name}_crop")(y)
    return conv.call(L.Reshape(tuple(conv.runtime[node].shape[1:]) or (1,), name=name),
                     node, [Value(y, "plain", (x.shape[0], stop - start, rest))], "plain")


# ----------------------------------------------------------------------- modules
def attention(conv, node, module):
    """``nn.MultiheadAttention(query, key, value, need_weights=False)`` (batch first) as
    handgrad's MultiHeadAttention; the output is the tuple (attention output, None)."""
    args = [conv.arg(node, a) for a in node.args]
    kwargs = {k: conv.arg(node, a) for k, a in node.kwargs.items()}
    names = ("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
             "average_attn_weights", "is_causal")
    given = {**dict(zip(names, args)), **kwargs}
    masks = [k for k in ("key_padding_mask", "attn_mask") if given.get(k) is not None]
    if not module.batch_first or masks or given.get("is_causal"):
        conv.refuse(node, "MultiheadAttention is converted batch first, without masks "
                          f"(batch_first={module.batch_first}, masks {masks})")
    if not all(isinstance(given.get(k), Value) for k in ("query", "key", "value")):
        conv.refuse(node, "MultiheadAttention needs query, key and value tensors")
    q, k, v = (conv.as_layout(given[k], "plain", node) for k in ("query", "key", "value"))
    layer = conv.called[node.target][0] if node.target in conv.called else \
        L.MultiHeadAttention(
            module.embed_dim, module.num_heads, module.dropout, module.in_proj_bias is not None,
            module.kdim, module.vdim, packed=module._qkv_same_embed_dim,
            add_bias_kv=module.bias_k is not None, add_zero_attn=module.add_zero_attn,
            name=conv.name(node.target))
    conv.called[node.target] = (layer, "plain")  # a second call shares the layer
    self_attention = q is k is v
    out = layer(q.tensor if self_attention else [q.tensor, k.tensor, v.tensor])
    return (Value(out, "plain", tuple(conv.runtime[node][0].shape)), None)


#: modules called with several arguments: torch class name -> convert(conv, node, module)
MODULE_CALLS = {"MultiheadAttention": attention}
