"""Padding of the spatial axes of channels-last maps, as ``F.pad`` on channels-first ones.

``x`` is (N, L, C), (N, H, W, C) or (N, D, H, W, C); ``padding`` gives, per spatial
axis and in the array's own axis order, a ``(before, after)`` pair of ints >= 0 (an int
``p`` is ``(p, p)``; a single int pads every side). The output has
``size + before + after`` positions on each axis; output position ``o`` reads input
position ``o - before`` when it lies inside, else (per ``mode``):

- ``"constant"``: ``value``;
- ``"reflect"``: the mirror image without repeating the edge (``-1 -> 1``,
  ``size -> size - 2``), ``before, after < size``;
- ``"replicate"``: the nearest edge position;
- ``"circular"``: position ``(o - before) mod size``, ``before, after <= size``.

Torch's ``F.pad(x, pad)`` lists pairs from the LAST axis backwards:
``pad = (left, right, top, bottom, front, back)`` for (N, C, D, H, W) is handgrad's
``padding = ((front, back), (top, bottom), (left, right))`` for (N, D, H, W, C).

Backward: ``dx[i] = sum of dy[o]`` over the output positions ``o`` that read ``i``;
the centre is ``dy[before:before + size]`` and the padded borders fold back onto the
positions they copied (mirrored for reflect, the edge for replicate, the opposite end
for circular); constant padding drops them (``value`` gets no gradient).
"""

from __future__ import annotations

from dataclasses import dataclass

from .._checks import array_module, choice, describe, float_array, is_int, upstream_grad
from ._args.cache import Cache, check_cache
from .declare import declare, exports

MODES = ("constant", "reflect", "replicate", "circular")


@dataclass(frozen=True)
class PadCache(Cache):
    """The input's shape and dtype, the per-axis ``(before, after)`` pairs and the mode."""

    x_shape: tuple
    dtype: object
    pads: tuple
    mode: str

    @property
    def y_shape(self):
        inner = tuple(s + b + a for s, (b, a) in zip(self.x_shape[1:-1], self.pads))
        return (self.x_shape[0], *inner, self.x_shape[-1])


def _pairs(op, padding, n):
    """``padding`` as n ``(before, after)`` pairs of ints >= 0."""
    expected = (f"an int or a tuple of {n} (before, after) pairs (one per spatial axis, "
                f"channels-last order)")
    if is_int(padding):
        padding = (padding,) * n
    if not isinstance(padding, (tuple, list)) or len(padding) != n:
        raise TypeError(f"{op}: 'padding' must be {expected}; received {describe(padding)}")
    pairs = []
    for item in padding:
        pair = (item, item) if is_int(item) else item
        if (not isinstance(pair, (tuple, list)) or len(pair) != 2
                or not all(is_int(p) for p in pair)):
            raise TypeError(f"{op}: 'padding' must be {expected}; received {padding!r}")
        if min(pair) < 0:
            raise ValueError(f"{op}: 'padding' must be >= 0 on every side; received "
                             f"{padding!r}")
        pairs.append((int(pair[0]), int(pair[1])))
    return tuple(pairs)


def prepare_pad(op, x, padding, mode, value):
    """Validated ``(x, pads, mode, value)``, shared with the loop twin."""
    x = float_array(op, "x", x, (3, 4, 5), "(N, L, C), (N, H, W, C) or (N, D, H, W, C)")
    mode = choice(op, "mode", mode, MODES)
    pads = _pairs(op, padding, x.ndim - 2)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{op}: 'value' must be a number; received {describe(value)}")
    if mode != "constant" and value != 0:
        raise ValueError(f"{op}: 'value' is for mode 'constant' only; received value="
                         f"{value} with mode {mode!r}")
    limit = {"reflect": lambda s: s - 1, "circular": lambda s: s}.get(mode)
    for axis, (size, pair) in enumerate(zip(x.shape[1:-1], pads), start=1):
        if size == 0 and (mode != "constant") and max(pair) > 0:
            raise ValueError(f"{op}: mode {mode!r} cannot pad the empty axis {axis} of "
                             f"'x' (shape {tuple(x.shape)})")
        if limit is not None and max(pair) > limit(size):
            bound = "< " if mode == "reflect" else "<= "
            raise ValueError(f"{op}: mode {mode!r} needs padding {bound}the axis size; "
                             f"received {pair} on axis {axis} of size {size}")
    return x, pads, mode, value


def _border(xp, x, axis, start, stop, reverse=False):
    """x[..., start:stop, ...] along ``axis`` (reversed with ``reverse``)."""
    index = [slice(None)] * x.ndim
    index[axis] = slice(start, stop)
    part = x[tuple(index)]
    return xp.flip(part, axis) if reverse else part


def _pad_axis(xp, x, axis, before, after, mode):
    """x padded on one axis by slices of itself (reflect, replicate, circular)."""
    size = x.shape[axis]
    if mode == "reflect":
        parts = (_border(xp, x, axis, 1, before + 1, True), x,
                 _border(xp, x, axis, size - 1 - after, size - 1, True))
    elif mode == "circular":
        parts = (_border(xp, x, axis, size - before, size), x, _border(xp, x, axis, 0, after))
    else:  # replicate
        shape = list(x.shape)
        first, last = _border(xp, x, axis, 0, 1), _border(xp, x, axis, size - 1, size)
        parts = (xp.broadcast_to(first, shape[:axis] + [before] + shape[axis + 1:]), x,
                 xp.broadcast_to(last, shape[:axis] + [after] + shape[axis + 1:]))
    return xp.concatenate(parts, axis=axis)


def pad(x, padding, mode="constant", value=0.0):
    """y = x padded on its spatial axes (see the module doc): x (N, *S, C) ->
    y (N, *(S + before + after), C). Returns ``(y, cache)`` for :func:`pad_backward`."""
    x, pads, mode, value = prepare_pad("pad", x, padding, mode, value)
    xp = array_module(x)
    cache = PadCache("pad", tuple(x.shape), x.dtype, pads, mode)
    if mode == "constant":
        y = xp.full(cache.y_shape, value, dtype=x.dtype)
        y[_centre(cache)] = x
        return y, cache
    y = x
    for axis, (before, after) in enumerate(pads, start=1):
        if before or after:
            y = _pad_axis(xp, y, axis, before, after, mode)
    return y, cache


def _centre(cache):
    """The index of the input's positions inside the output."""
    return (slice(None), *(slice(b, b + s) for s, (b, _) in zip(cache.x_shape[1:-1],
                                                                   cache.pads)), slice(None))


def _fold_axis(xp, g, axis, before, size, after, mode):
    """The gradient of one axis's padding: g (.., before + size + after, ..) -> (.., size, ..),
    each border added onto the positions it copied."""
    out = _border(xp, g, axis, before, before + size).copy()
    head, tail = _border(xp, g, axis, 0, before), _border(xp, g, axis, before + size, None)
    index = [slice(None)] * g.ndim

    def add(start, stop, values):
        index[axis] = slice(start, stop)
        out[tuple(index)] += values

    if mode == "reflect":
        add(1, before + 1, xp.flip(head, axis))
        add(size - 1 - after, size - 1, xp.flip(tail, axis))
    elif mode == "circular":
        add(size - before, size, head)
        add(0, after, tail)
    else:  # replicate
        add(0, 1, head.sum(axis=axis, keepdims=True))
        add(size - 1, size, tail.sum(axis=axis, keepdims=True))
    return out


def pad_backward(dy, cache):
    """dx = dy at the centre plus the borders folded back (see the module doc):
    dy (N, *(S + before + after), C) -> dx (N, *S, C)."""
    cache = check_cache("pad_backward", cache, "pad", PadCache)
    dy = upstream_grad("pad_backward", dy, cache.y_shape, cache.dtype)
    xp = array_module(dy)
    if cache.mode == "constant":
        return dy[_centre(cache)].copy()
    dx = dy
    for axis in range(len(cache.pads), 0, -1):
        (before, after), size = cache.pads[axis - 1], cache.x_shape[axis]
        if before or after:
            dx = _fold_axis(xp, dx, axis, before, size, after, cache.mode)
    return xp.ascontiguousarray(dx)


from .samples import rearrange as _s  # noqa: E402  (the declaration's samples)

declare(pad, pad_backward, torch=_s.torch_pad, samples=_s.PAD)
__all__ = exports(__name__, globals())
