"""The torch functions and tensor methods that :mod:`.torch_convert` converts, by name.

:data:`FUNCTIONS` maps a function's or method's name (``"cat"``, ``"avg_pool2d"``,
``"layer_norm"``) to ``handler(conv, node, args, kwargs) -> Value`` (``conv``: the
converter; ``args``/``kwargs``: converted values, :class:`.torch_convert_attention.Attr` s
of parameters and recorded constants); a handler registers with ``@handles(name, ...)``,
here and in :mod:`.torch_convert_resize`, :mod:`.torch_convert_maxvit` and
:mod:`.torch_convert_swin`. A handler may return a list or tuple that ``getitem`` takes
items of (``chunk``'s pieces, ``MultiheadAttention``'s (output, None)). Layouts as in
:mod:`.torch_convert`.
"""

from __future__ import annotations

import math

from .. import layers as L
from .torch_convert_attention import Attr, select
from .torch_convert_ops import (
    POOL_SETTINGS,
    Value,
    only_new_axes,
    pool_layer,
    torch_to_handgrad_axis,
)
from .torch_convert_sequences import sequence_item

FUNCTIONS = {}


def handles(*names, parameters=False):
    """Register the decorated handler under torch's function or method ``names``;
    ``parameters``: it takes parameters read outside their module as :class:`Attr` s
    (else they come as ``Parameter`` layers' values, see :mod:`.torch_convert_attention`)."""
    def register(handler):
        handler.takes_parameters = parameters
        FUNCTIONS.update(dict.fromkeys(names, handler))
        return handler
    return register


def bind(names, defaults, args, kwargs):
    """torch's positional ``args`` and ``kwargs`` after the input as a dict over ``names``
    (``defaults`` for the missing ones)."""
    bound = {**defaults, **dict(zip(names, args)), **kwargs}
    return {k: bound[k] for k in names if k in bound}


# ---------------------------------------------------------------- reshapes and permutes
@handles("view", "reshape", "unsqueeze")
def reshape(conv, node, args=(), kwargs=None):
    x = args[0]
    shape = tuple(conv.runtime[node].shape)
    if shape[:1] != x.shape[:1]:
        conv.refuse(node, f"a reshape from {x.shape} to {shape} moves the batch axis")
    if len(shape) >= 3 and math.prod(shape[2:]) == 1 and shape[1] == math.prod(x.shape[1:]) \
            and (x.layout == "plain" or math.prod(x.shape[2:]) == 1):
        # (N, C) -> (N, C, 1, ..., 1): a map of unit size, the same order in both
        return conv.call(L.Reshape((*shape[2:], shape[1])), node, [x], "cf")
    x = conv.as_layout(x, "plain", node)
    return conv.call(L.Reshape(shape[1:]), node, [x], "plain")


@handles("flatten")
def flatten(conv, node, args, kwargs):
    start = kwargs.get("start_dim", args[1] if len(args) > 1 else 0)
    end = kwargs.get("end_dim", args[2] if len(args) > 2 else -1)
    return conv.flatten(node, args[0], start, end)


@handles("contiguous", "clone", "detach")
def identity(conv, node, args, kwargs):
    """Tensor methods that change nothing handgrad holds."""
    return args[0]


def held_order(layout, rank):
    """torch's dims in the order handgrad holds them: (0, 2, .., 1) for maps."""
    return [0, *range(2, rank), 1] if layout == "cf" else list(range(rank))


@handles("permute", "transpose")
def permute(conv, node, args, kwargs, swap=False):
    """torch's ``permute``, ``transpose`` (``swap``: of two dims): nothing where handgrad
    holds the result already (a map back to channels-last), else a ``Permute``."""
    x, dims, rank = args[0], args[1:], len(args[0].shape)
    if swap or getattr(node.target, "__name__", node.target) == "transpose":
        perm = list(range(rank))
        a, b = (d % rank for d in dims)
        perm[a], perm[b] = perm[b], perm[a]
    else:
        dims = kwargs.get("dims", dims[0] if len(dims) == 1 else dims)
        perm = [d % rank for d in dims]
    if perm[0] != 0:
        conv.refuse(node, "a permutation that moves the batch axis")
    shape, held = tuple(conv.runtime[node].shape), held_order(x.layout, rank)
    for layout in ("plain", "cf") if rank >= 3 else ("plain",):
        if [perm[d] for d in held_order(layout, rank)] == held:  # handgrad holds the result
            return Value(x.tensor, layout, shape, x.spatial)
    axes = [torch_to_handgrad_axis(d, rank, x.layout) % rank for d in perm]
    return conv.call(L.Permute(tuple(axes[1:])), node, [x], "plain")


@handles("cat")
def concatenate(conv, node, args, kwargs):
    values, dim = args[0], kwargs.get("dim", args[1] if len(args) > 1 else 0)
    if len(values) == 1:  # torch.cat of one tensor: that tensor
        return values[0]
    rank = len(values[0].shape)
    layout = values[0].layout if all(v.layout == values[0].layout for v in values) \
        else "plain"
    ins = [conv.as_layout(v, layout, node) for v in values]
    if dim % rank == 0:
        conv.refuse(node, "a concatenation along the batch axis")
    axis = torch_to_handgrad_axis(dim, rank, layout)
    return conv.call(L.Concatenate(axis), node, ins, layout)


@handles("chunk")
def chunk(conv, node, args, kwargs):
    """The pieces of ``x.chunk(n, dim)`` (sizes as torch's), a ``Cropping`` each, in a
    layout that holds the chunked dim first after the batch, else through a ``Permute``
    there and back."""
    x, rank = args[0], len(args[0].shape)
    dim = kwargs.get("dim", args[2] if len(args) > 2 else 0) % rank
    pieces = conv.runtime[node]
    if len(pieces) == 1:
        return [x]
    if dim == 0 or not 3 <= rank <= 5:
        conv.refuse(node, f"a chunk of dim {dim} of a rank-{rank} tensor (converted: a "
                          f"non-batch axis of a tensor of rank 3 to 5)")
    layout = next((lay for lay in dict.fromkeys((x.layout, "plain", "cf"))
                   if torch_to_handgrad_axis(dim, rank, lay) % rank == 1), None)
    if layout is not None:
        front, back = conv.as_layout(x, layout, node), None
    else:  # plain: torch's dims are handgrad's axes
        order = [0, dim, *[j for j in range(1, rank) if j != dim]]
        front = Value(L.Permute(tuple(order[1:]), name=conv.name(f"{node.name}_front"))(
            conv.as_layout(x, "plain", node).tensor), "plain", x.shape, x.spatial)
        back = tuple(order.index(j) for j in range(1, rank))
    out, start, size = [], 0, x.shape[dim]
    for k, piece in enumerate(pieces):
        end = start + piece.shape[dim]
        crop = getattr(L, f"Cropping{rank - 2}D")(((start, size - end),) + ((0, 0),) * (
            rank - 3), name=conv.name(f"{node.name}_{k}"))
        y = crop(front.tensor)
        if back is not None:
            y = L.Permute(back, name=conv.name(f"{node.name}_{k}_back"))(y)
        out.append(Value(y, front.layout, tuple(piece.shape), x.spatial))
        start = end
    return out


@handles("getitem")
def getitem(conv, node, args, kwargs):
    """An item of a list or tuple (a chunk's piece, an attention module's output), the
    sequence of a recurrent module, new unit axes, or an index read of a tensor."""
    held, index = args[0], args[1]
    if isinstance(held, (list, tuple)):
        part = held[index]
        if part is None and node.users:
            conv.refuse(node, "this output (attention weights) is not converted")
        return part
    if sequence_item(conv, node, index):
        return held
    if only_new_axes(index):
        return reshape(conv, node, [held])
    return select(conv, node, held, index)


# ---------------------------------------------------------------- pooling and norms
def _pool(kind, rank):
    names = ("kernel_size", *POOL_SETTINGS[kind])

    def handler(conv, node, args, kwargs):
        settings = bind(names, {}, args[1:], kwargs)
        try:
            layer = pool_layer(kind, rank, settings.pop("kernel_size"), settings)
        except (TypeError, ValueError) as error:
            conv.refuse(node, str(error))
        return conv.call(layer, node, [conv.as_layout(args[0], "cf", node)], "cf")
    return handler


for _n in (1, 2, 3):
    for _kind in ("Max", "Avg"):
        handles(f"{_kind.lower()}_pool{_n}d")(_pool(_kind, _n))


@handles("adaptive_avg_pool2d", "adaptive_max_pool2d")
def adaptive_pool(conv, node, args, kwargs):
    kind = "Avg" if "avg" in node.target.__name__ else "Max"
    layer = getattr(L, f"Adaptive{kind}Pool2D")(args[1] if len(args) > 1 else
                                               kwargs["output_size"])
    return conv.call(layer, node, [conv.as_layout(args[0], "cf", node)], "cf")


@handles("mean")
def mean(conv, node, args, kwargs):
    x, rest = args[0], args[1:]
    dims = kwargs.get("dim", rest[0] if rest else None)
    keep = kwargs.get("keepdim", rest[1] if len(rest) > 1 else False)
    rank = len(x.shape)
    dims = tuple(sorted(d % rank for d in ((dims,) if isinstance(dims, int) else dims)))
    if x.layout != "cf" or dims != tuple(range(2, rank)):
        conv.refuse(node, f"a mean over dims {dims} (converted: the spatial dims of maps)")
    layer = getattr(L, f"GlobalAvgPool{rank - 2}D")(keepdims=bool(keep))
    return conv.call(layer, node, [x], "cf" if keep else "plain")


@handles("layer_norm", parameters=True)
def layer_norm(conv, node, args, kwargs):
    """``F.layer_norm`` with its module's weight and bias (torchvision's LayerNorm2d): a
    LayerNorm named after the module that holds them."""
    a = bind(("normalized_shape", "weight", "bias", "eps"),
             {"weight": None, "bias": None, "eps": 1e-5}, args[1:], kwargs)
    weight, bias = a["weight"], a["bias"]
    params = [p for p in (weight, bias) if p is not None]
    owner = params[0].target.rpartition(".")[0] if params else None
    names = [f"{owner}.weight", f"{owner}.bias"] if weight is not None else []
    if not all(isinstance(p, Attr) and tuple(p.index.shape) == p.shape and bool(
            (p.index.reshape(-1) == p.index.new_tensor(range(p.index.numel()))).all())
            for p in params) or [p.target for p in params] != names[:len(params)]:
        conv.refuse(node, "a layer norm's weight and bias must be the 'weight' and 'bias' of "
                          "one module")
    layer = L.LayerNorm(tuple(a["normalized_shape"]), a["eps"], weight is not None,
                        bias is not None, name=conv.name(owner) if owner else None)
    if owner:
        conv.owned.add(owner)
    return conv.call(layer, node, [conv.as_layout(args[0], "plain", node)], "plain")


@handles("stochastic_depth")
def stochastic_depth(conv, node, args, kwargs):
    """torchvision's ``stochastic_depth(x, p, mode, training)``: a StochasticDepth layer
    (the identity when p = 0). The traced ``training`` (``self.training`` when traced) is
    not kept: the layer drops paths in handgrad's training mode and not in evaluation."""
    a = bind(("p", "mode", "training"), {"training": True}, args[1:], kwargs)
    x = args[0]
    if a["p"] == 0:
        return x
    return conv.call(L.StochasticDepth(a["p"], a["mode"]), node, [x], x.layout)
