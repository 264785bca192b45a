"""Grouped layouts of the ONNX import: an ONNX axis may hold a group of handgrad axes, the
batch in any group.

Why. torch's exporter writes attention with the batch moved off ONNX axis 0 or merged into
another axis: ``nn.MultiheadAttention`` goes sequence first (Transpose [1, 0, 2]) and
reshapes to (T, N*H, d); Swin folds the batch into its windows (B*nW, T, C). A handgrad
tensor always has the batch first, so such a tensor is held as a handgrad tensor ``sym``
(N, ...), an order ``perm`` of its axes and ``groups`` (how many of the permuted axes each
ONNX axis merges): ONNX tensor = ``sym.transpose(perm).reshape(sizes of the groups)``. A
Transpose permutes the groups and a Reshape that only regroups (or splits a non-batch
axis: one Reshape layer) changes the bookkeeping, so the exporter's shuffles cost nothing;
an operator that needs a concrete layout takes :func:`canonical` (a Permute and Reshape of
the per-example axes, batch first, every non-batch ONNX axis one handgrad axis) and
batched MatMul runs over the leading axes as they are. This covers what recognising the
attention pattern would (ViT) and Swin's windows, which no fixed pattern does. Where an
operator needs the batch alone at ONNX axis 0, :func:`plain` lays it out so, or refuses
naming the node.
"""

from __future__ import annotations

import numpy as np

from ... import layers as L
from .held import Held


def batch_size(ld):
    if ld.batch <= 0:
        raise ld.fail("moving or merging the batch axis needs a fixed batch size in the "
                      "graph input")
    return ld.batch


def layout(ld, held):
    """``(perm, groups)`` of any held tensor (a plain one: one axis per group)."""
    held = ld.materialize(held) if held.flat is not None else held
    return (held.perm, held.groups) if held.groups else (held.perm, (1,) * held.rank)


def make(sym, perm, groups):
    """The Held of a layout: plain where each group is one axis and the batch leads."""
    perm, groups = tuple(int(p) for p in perm), tuple(int(g) for g in groups)
    if all(g == 1 for g in groups) and perm[0] == 0:
        return Held(sym, perm)
    return Held(sym, perm, groups=groups)


def group_lists(perm, groups):
    out, at = [], 0
    for g in groups:
        out.append(list(perm[at:at + g]))
        at += g
    return out


def hg_sizes(ld, held):
    return (batch_size(ld) if held.groups else ld.batch, *held.sym.shape)


def full_shape(ld, held):
    """The ONNX shape, batch included (its size: the graph input's)."""
    if not held.groups:
        return (ld.batch, *held.onnx_shape)
    sizes = hg_sizes(ld, held)
    return tuple(int(np.prod([sizes[a] for a in g])) for g in group_lists(*layout(ld, held)))


def permute(sym, order):
    order = tuple(order)
    return sym if order == tuple(range(len(order))) else L.Permute(order[1:])(sym)


def reshape(sym, shape):
    shape = tuple(int(d) for d in shape)
    return sym if shape == tuple(sym.shape) else L.Reshape(shape)(sym)


def plain(ld, held):
    """A grouped tensor with the batch alone at ONNX axis 0 laid out as a plain one
    (identity perm): a Permute and Reshape of the per-example axes."""
    if not held.groups:
        return held
    sizes = hg_sizes(ld, held)
    lists = group_lists(held.perm, held.groups)
    first = [a for a in lists[0] if sizes[a] != 1]
    if first != [0] or any(0 in g for g in lists[1:]):
        raise ld.fail(f"its input has the batch merged into or moved to another axis "
                      f"(ONNX shape {full_shape(ld, held)}), which this operator cannot take "
                      f"(converted: Transpose, Reshape, MatMul, Gather, Softmax, "
                      f"elementwise ops and a last-axis LayerNormalization or Dense)")
    order = [0] + [a for a in held.perm if a != 0]
    sym = reshape(permute(held.sym, order), full_shape(ld, held)[1:])
    return Held(sym, tuple(range(held.rank)))


def canonical(ld, held):
    """``held`` with the batch first and then its other axes in ONNX order, each non-batch
    ONNX axis one handgrad axis (the batch's group: the axes before and after it)."""
    perm, groups = layout(ld, held)
    sizes = (None, *held.sym.shape)  # the batch is a piece of its own: its size unused
    order = [0] + [a for a in perm if a != 0]
    shape, new_perm, new_groups = [], [], []
    for g in group_lists(perm, groups):
        pieces = [g[:g.index(0)], None, g[g.index(0) + 1:]] if 0 in g else [g]
        count = 0
        for piece in pieces:
            if piece is None:
                new_perm.append(0)
            elif piece or 0 not in g:
                shape.append(int(np.prod([sizes[a] for a in piece])))
                new_perm.append(len(shape))
            else:
                continue
            count += 1
        new_groups.append(count)
    sym = reshape(permute(held.sym, order), shape)
    return make(sym, new_perm, new_groups)


def axis_of(ld, held, axis):
    """``(canonical held, its handgrad axis of the ONNX axis)``; the axis must not hold
    the batch."""
    held = canonical(ld, held)
    perm, groups = layout(ld, held)
    axis = axis % len(groups)
    group = group_lists(perm, groups)[axis]
    if 0 in group:
        raise ld.fail(f"ONNX axis {axis} holds the batch; acting on it has no handgrad layer")
    return held, group[0]


def select(ld, held, axis, index):
    """The entry ``index`` of the ONNX ``axis`` (the axis dropped): a Reshape to
    (before, size, after), a Cropping2D, a Reshape."""
    held, h = axis_of(ld, held, axis)
    shape = tuple(held.sym.shape)
    size = shape[h - 1]
    index = int(index) + size if index < 0 else int(index)
    if not 0 <= index < size:
        raise ld.fail(f"index {index} is out of range for an axis of size {size}")
    three = (int(np.prod(shape[:h - 1])), size, int(np.prod(shape[h:])))
    sym = L.Cropping2D(((0, 0), (index, size - index - 1)))(L.Reshape(three)(held.sym))
    sym = reshape(sym, shape[:h - 1] + shape[h:])
    perm, groups = layout(ld, held)
    groups = list(groups)
    del groups[axis % len(groups)]
    return make(sym, [p - (p > h) for p in perm if p != h], groups)


def regroup(ld, held, target):
    """``held`` reshaped to the ONNX ``target`` (batch included, no 0 or -1) by regrouping
    its axes, splitting a non-batch one where a target size needs it (one Reshape layer);
    None where the target is no regrouping."""
    perm = layout(ld, held)[0]
    sizes = (batch_size(ld), *held.sym.shape)
    pieces = {a: [a] for a in range(len(sizes))}  # handgrad axis -> its piece ids
    size = dict(enumerate(sizes))
    queue, new_groups, taken, fresh = list(perm), [], [], len(sizes)
    for d in target:
        count, prod = 0, 1
        while prod < d:
            if not queue:
                return None
            a = queue[0]
            if d % (prod * size[a]) == 0:
                queue.pop(0)
            elif d % prod == 0 and size[a] % (d // prod) == 0 and a != 0 and d // prod > 1:
                owner = next(h for h, ids in pieces.items() if a in ids)
                if owner == 0:
                    return None
                first, size[fresh], size[a] = fresh, d // prod, size[a] // (d // prod)
                ids = pieces[owner]
                ids.insert(ids.index(a), first)
                a, fresh = first, fresh + 1
            else:
                return None
            taken.append(a)
            prod, count = prod * size[a], count + 1
        new_groups.append(count)
    if not new_groups or any(size[a] != 1 for a in queue):
        return None
    taken += queue
    new_groups[-1] += len(queue)
    number = {p: i for i, p in enumerate(p for h in sorted(pieces) for p in pieces[h])}
    shape = [size[p] for h in sorted(pieces)[1:] for p in pieces[h]]
    return make(reshape(held.sym, shape), [number[p] for p in taken], new_groups)


def transpose(ld, held, order):
    lists = group_lists(*layout(ld, held))
    return make(held.sym, [a for i in order for a in lists[i]], [len(lists[i]) for i in order])


def unsqueeze(ld, held, axes):
    """Size-1 ONNX axes inserted (empty groups)."""
    perm, groups = layout(ld, held)
    groups = list(groups)
    rank = len(groups) + len(axes)
    for a in sorted(int(a) % rank for a in axes):
        groups.insert(a, 0)
    return make(held.sym, perm, groups)


def squeeze(ld, held, axes):
    """Size-1 ONNX axes dropped: their (size-1) handgrad axes join a neighbouring group."""
    perm, groups = layout(ld, held)
    full = full_shape(ld, held)
    rank = len(groups)
    axes = sorted({int(a) % rank for a in axes})
    if any(full[a] != 1 for a in axes) or len(axes) == rank:
        raise ld.fail(f"axes {axes} of a tensor of shape {full} are not of size 1")
    groups = list(groups)
    for a in reversed(axes):
        extra = groups.pop(a)
        groups[a - 1 if a > 0 else 0] += extra
    return make(held.sym, perm, groups)


def hg_constant(ld, held, value):
    """The ONNX-shaped ``value`` (broadcasting to ``held``) in ``held``'s handgrad
    per-example layout: an array of the shape of ``held.sym``."""
    perm, groups = layout(ld, held)
    value = np.asarray(value)
    value = value.reshape((1,) * (len(groups) - value.ndim) + value.shape)
    sizes = (None, *held.sym.shape)  # the batch's size: never needed
    split = []
    for axis, (d, g) in enumerate(zip(value.shape, group_lists(perm, groups))):
        if d != 1 and 0 in g:
            raise ld.fail(f"a constant of shape {value.shape} varies over the batch (its "
                          f"ONNX axis {axis} holds the batch)")
        split += [sizes[a] for a in g] if d != 1 else [1] * len(g)
    value = value.reshape(split).transpose(np.argsort(perm))
    return np.broadcast_to(value[0], tuple(held.sym.shape))
