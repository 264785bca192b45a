"""The ONNX import's converters of merges, layout and shape operators (Add, Mul, Sub,
Sum, Concat, Transpose, Flatten, Reshape, Squeeze, Unsqueeze, Pad, Resize); they
register into :data:`.load_ops.CONVERTERS`."""

from __future__ import annotations

import numpy as np

from ... import layers as L
from .held import Held, channels_last_perm
from .load_ops import attrs, channels_last, converts

MERGES = {"Add": L.Add, "Sum": L.Add, "Mul": L.Multiply, "Sub": L.Subtract}


@converts("Add", "Sum", "Mul", "Sub")
def merge(ld, node):
    """Two or more graph tensors of one shape, taken in the first one's layout."""
    if any(name in ld.consts for name in node.input):
        raise ld.fail("arithmetic with a constant has no handgrad layer (only a MatMul's "
                      "bias is taken into its Dense)")
    held = [ld.materialize(ld.get(name)) for name in node.input]
    shapes = [h.onnx_shape for h in held]
    try:
        np.broadcast_shapes(*shapes)
    except ValueError:
        raise ld.fail(f"inputs of shapes {shapes} do not broadcast") from None
    if len({len(shape) for shape in shapes}) > 1:
        raise ld.fail(f"inputs of shapes {shapes}: broadcasting across ranks has no "
                      f"handgrad layout")
    perm = held[0].perm  # size-1 axes broadcast the same way in any common layout
    out = MERGES[node.op_type]()([ld.need(h, perm) for h in held])
    ld.set_out(node, Held(out, perm))


@converts("Concat")
def concat(ld, node):
    held = [ld.materialize(ld.get(name)) for name in node.input]
    if len(held) == 1:  # DenseNet's first block concatenates one tensor
        ld.set_out(node, held[0])
        return
    perm = held[0].perm
    axis = ld.axis(held[0], int(attrs(node)["axis"]))
    out = L.Concatenate(axis=axis)([ld.need(h, perm) for h in held])
    ld.set_out(node, Held(out, perm))


@converts("Transpose")
def transpose(ld, node):
    """No layer: the held permutation changes."""
    held = ld.materialize(ld.get(node.input[0]))
    order = attrs(node).get("perm", list(reversed(range(held.rank))))
    if order[0] != 0:
        raise ld.fail(f"perm {list(order)} moves the batch axis")
    ld.set_out(node, Held(held.sym, tuple(held.perm[i] for i in order)))


def _flatten(ld, node, held):
    if held.rank <= 2:
        return held
    if held.perm == tuple(range(held.rank)):
        return Held(L.Flatten()(held.sym), (0, 1))
    return Held(None, (0, 1), held)  # lazy: the next Gemm permutes its rows


@converts("Flatten")
def flatten(ld, node):
    held = ld.materialize(ld.get(node.input[0]))
    if int(attrs(node).get("axis", 1)) != 1:
        raise ld.fail("only axis=1 (keep the batch axis) is supported")
    ld.set_out(node, _flatten(ld, node, held))


@converts("Reshape")
def reshape(ld, node):
    held = ld.materialize(ld.get(node.input[0]))
    shape = [int(d) for d in ld.const(node.input[1], "shape")]
    if shape and shape[0] == ld.batch:  # a target computed from Shape: the batch size
        shape[0] = 0
    if attrs(node).get("allowzero", 0) or not shape or shape[0] not in (0, -1):
        raise ld.fail(f"shape {shape} must keep the batch axis (0 or -1 first)")
    size = int(np.prod(held.onnx_shape))
    rest = [held.onnx_shape[i - 1] if d == 0 else d for i, d in enumerate(shape)][1:]
    if -1 in rest:
        known = int(np.prod([d for d in rest if d != -1]))
        rest[rest.index(-1)] = size // known
    if len(rest) == 1:
        ld.set_out(node, _flatten(ld, node, held))
        return
    sym = ld.need(held, tuple(range(held.rank)))
    ld.set_out(node, Held(L.Reshape(tuple(rest))(sym), tuple(range(len(rest) + 1))))


def _axes(ld, node):
    axes = attrs(node).get("axes")
    if axes is None and len(node.input) > 1 and node.input[1]:
        axes = ld.const(node.input[1], "axes").tolist()
    return axes


@converts("Squeeze", "Unsqueeze")
def squeeze(ld, node):
    """Axes of size 1 dropped (inserted) in the held tensor, its other axes in place."""
    held = ld.materialize(ld.get(node.input[0]))
    axes = _axes(ld, node)
    shape = (None, *held.sym.shape)
    if node.op_type == "Squeeze":
        axes = [i for i in range(1, held.rank) if shape[held.perm[i]] == 1] if axes is None \
            else [a % held.rank for a in axes]
        if 0 in axes or any(shape[held.perm[a]] != 1 for a in axes):
            raise ld.fail(f"axes {axes} are not of size 1 past the batch axis")
        gone = {held.perm[a] for a in axes}
        kept = [j for j in range(held.rank) if j not in gone]
        sym = L.Reshape(tuple(shape[j] for j in kept[1:]))(held.sym)
        perm = tuple(kept.index(p) for i, p in enumerate(held.perm) if i not in axes)
    else:
        rank = held.rank + len(axes)
        axes = sorted(a % rank for a in axes)
        if 0 in axes:
            raise ld.fail("inserting an axis before the batch axis is not supported")
        sym = L.Reshape((*shape[1:], *(1,) * len(axes)))(held.sym)
        old, new, perm = iter(held.perm), iter(range(held.rank, rank)), []
        perm = [next(new) if i in axes else next(old) for i in range(rank)]
    ld.set_out(node, Held(sym, tuple(perm)))


@converts("Pad")
def pad(ld, node):
    """A padding layer on the spatial axes of the tensor held channels last."""
    held = ld.materialize(ld.get(node.input[0]))
    a = attrs(node)
    mode = a.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    pads = [int(p) for p in ld.const(node.input[1], "pads")]
    value = float(ld.const(node.input[2]).reshape(())) if len(node.input) > 2 and \
        node.input[2] else 0.0
    if len(node.input) > 3 and node.input[3]:
        raise ld.fail("the axes input is not supported")
    r = held.rank
    held = channels_last(ld, held, [i for i in range(r) if pads[i] or pads[r + i]])
    hg = [(0, 0)] * r
    for i in range(r):
        hg[held.perm[i]] = (pads[i], pads[r + i])
    if hg[0] != (0, 0) or hg[-1] != (0, 0) or r < 3:
        raise ld.fail(f"pads {pads} pad the batch or channel axis; handgrad pads spatial axes")
    flat = [p for pair in reversed(hg[1:-1]) for p in pair]  # torch's last-axis-first order
    n = r - 2
    if mode == "constant":
        layer = (L.ZeroPad1D, L.ZeroPad2D, L.ZeroPad3D)[n - 1](tuple(flat)) if value == 0 else \
            (L.ConstantPad1D, L.ConstantPad2D, L.ConstantPad3D)[n - 1](tuple(flat), value)
    elif mode in ("reflect", "edge"):
        prefix = "ReflectionPad" if mode == "reflect" else "ReplicationPad"
        layer = getattr(L, f"{prefix}{n}D")(tuple(flat))
    else:
        raise ld.fail(f"mode {mode!r} has no handgrad padding layer")
    ld.set_out(node, ld.call(layer, held))


_RESIZE_MODES = {("nearest", "asymmetric"): "nearest", ("linear", "half_pixel"): "linear",
                 ("linear", "pytorch_half_pixel"): "linear",
                 ("linear", "align_corners"): "linear", ("cubic", "half_pixel"): "cubic",
                 ("cubic", "align_corners"): "cubic"}


@converts("Resize")
def resize(ld, node):
    """Upsample (torch's interpolate) on the tensor held channels last."""
    held = ld.materialize(ld.get(node.input[0]))
    a = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs(node).items()}
    mode, coords = a.get("mode", "nearest"), a.get("coordinate_transformation_mode",
                                                   "half_pixel")
    kind = _RESIZE_MODES.get((mode, coords))
    if kind is None or (kind == "nearest" and a.get("nearest_mode", "round_prefer_floor")
                        != "floor") or (kind == "cubic" and a.get("cubic_coeff_a") != -0.75):
        raise ld.fail(f"mode={mode}, coordinate_transformation_mode={coords} has no handgrad "
                      f"interpolation (torch's modes export as nearest/asymmetric/floor, "
                      f"linear or cubic with half_pixel or align_corners)")
    n = held.rank - 2
    if kind != "nearest":
        kind = {"linear": ("linear", "bilinear", "trilinear"), "cubic": (None, "bicubic", None)
                }[kind][n - 1]
    scales = ld.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    sizes = ld.const(node.input[3]) if len(node.input) > 3 and node.input[3] else None
    kw = {"mode": kind, "align_corners": (coords == "align_corners") if kind != "nearest"
          else None}
    if sizes is not None and sizes.size:
        kw["size"] = tuple(int(s) for s in sizes[2:])
    elif scales is not None and scales.size:
        if any(s != 1 for s in scales[:2]):
            raise ld.fail(f"scales {scales.tolist()} resize the batch or channel axis")
        kw["scale_factor"] = tuple(float(s) for s in scales[2:])
    else:
        raise ld.fail("neither scales nor sizes is given")
    ld.set_out(node, ld.call(L.Upsample(**kw), held, channels_last_perm(held.rank)))
