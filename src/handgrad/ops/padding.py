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
from ._block_threads import array_halves, run_blocks
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


def _source(mode, before, size, after):
    """Per border (before, after) of one axis: the input positions ``(start, stop)`` it
    copies, in x coordinates; reflect reads them reversed, replicate spreads its single
    position over the whole border."""
    if mode == "reflect":
        return (1, before + 1), (size - 1 - after, size - 1)
    if mode == "circular":
        return (size - before, size), (0, after)
    return (0, 1), (size - 1, size)  # replicate


def _at(ndim, axis, start, stop, fixed=()):
    """The index selecting [start:stop) on ``axis`` (and the (axis, slice) pairs in
    ``fixed``), every other axis whole."""
    index = [slice(None)] * ndim
    for a, part in fixed:
        index[a] = part
    index[axis] = slice(start, stop)
    return tuple(index)


def _centres(cache, axes):
    """(axis, slice of the input's positions inside the output) for each of ``axes``."""
    return [(a, slice(cache.pads[a - 1][0], cache.pads[a - 1][0] + cache.x_shape[a]))
            for a in axes]


def pad(x, padding, mode="constant", value=0.0):
    """y = x padded on its spatial axes (see the module doc): x (N, *S, C) ->
    y (N, *(S + before + after), C). Returns ``(y, cache)`` for :func:`pad_backward`.

    x is copied into the centre of y (halves of the batch on the two NumPy threads), then
    each axis's borders are filled in axis order (the earlier axes whole, the later ones
    at their centre) from y itself, the whole batch at once (small slabs: done once, they
    cost half the calls that each half would make)."""
    x, pads, mode, value = prepare_pad("pad", x, padding, mode, value)
    xp = array_module(x)
    cache = PadCache("pad", tuple(x.shape), x.dtype, pads, mode)
    y = xp.empty(cache.y_shape, dtype=x.dtype)
    centre = _centre(cache)

    def copy_in(images):
        y[images][centre] = x[images]

    run_blocks(copy_in, array_halves(xp, x.shape[0], y.nbytes))
    _fill_borders(xp, y, cache, value)
    return y, cache


def _fill_borders(xp, y, cache, value):
    """Each axis's borders of y (whose centre holds x) filled by ``cache``'s mode, in
    axis order (the earlier axes whole, the later ones at their centre) from y itself."""
    pads, mode = cache.pads, cache.mode
    rank = len(pads)
    for axis, (before, after) in enumerate(pads, start=1):
        size, later = cache.x_shape[axis], _centres(cache, range(axis + 1, rank + 1))
        borders = ((0, before), (before + size, before + size + after))
        sources = _source(mode, before, size, after)
        for (lo, hi), (start, stop) in zip(borders, sources):
            if hi == lo:
                continue
            target = _at(y.ndim, axis, lo, hi, later)
            if mode == "constant":
                y[target] = value
                continue
            part = y[_at(y.ndim, axis, before + start, before + stop, later)]
            y[target] = xp.flip(part, axis) if mode == "reflect" else part


def _centre(cache, first=1):
    """The index of the input's positions inside the output on the spatial axes
    ``first``.. (the earlier ones whole)."""
    rank = len(cache.pads)
    return (slice(None),) * first + tuple(part for _, part in
                                          _centres(cache, range(first, rank + 1)))


def _folded(xp, g, cache, first, out=None):
    """The gradient of the padding of axes ``first``.. (the earlier ones already at the
    input's size): g's centre on those axes plus its borders (:func:`_add_borders`)."""
    out = _centre_of(g, cache, first, out)
    _add_borders(xp, g, cache, first, out)
    return out


def _centre_of(g, cache, first, out=None):
    """g's centre on the axes ``first``.. (a copy, into ``out`` when given)."""
    centre = g[_centre(cache, first)]
    if out is None:
        return centre.copy()
    out[...] = centre
    return out


def _add_borders(xp, g, cache, first, out):
    """For each axis a from ``first``, the part of g on a's borders (at the centre of
    the axes between, whole on the later ones) folded along the later axes and added
    onto the positions of ``out`` it copied (constant padding: nothing)."""
    if cache.mode == "constant":
        return
    rank = len(cache.pads)
    for axis in range(first, rank + 1):
        (before, after), size = cache.pads[axis - 1], cache.x_shape[axis]
        between = _centres(cache, range(first, axis))
        borders = ((0, before), (before + size, before + size + after))
        for (lo, hi), (start, stop) in zip(borders, _source(cache.mode, before, size, after)):
            if hi == lo:
                continue
            part = _folded(xp, g[_at(g.ndim, axis, lo, hi, between)], cache, axis + 1)
            if cache.mode == "reflect":
                part = xp.flip(part, axis)
            elif cache.mode == "replicate":
                part = part.sum(axis=axis, keepdims=True)
            out[_at(out.ndim, axis, start, stop)] += part


def pad_backward(dy, cache):
    """dx = dy at the centre plus the borders folded back (see the module doc):
    dy (N, *(S + before + after), C) -> dx (N, *S, C). The centre copied in halves of the
    batch on the two NumPy threads; the borders, small slabs, added in place once."""
    cache = check_cache("pad_backward", cache, "pad", PadCache)
    dy = upstream_grad("pad_backward", dy, cache.y_shape, cache.dtype)
    xp = array_module(dy)
    dx = xp.empty(cache.x_shape, dtype=dy.dtype)
    run_blocks(lambda images: _centre_of(dy[images], cache, 1, out=dx[images]),
               array_halves(xp, dx.shape[0], dy.nbytes))
    _add_borders(xp, dy, cache, 1, dx)
    return dx


from .samples import rearrange as _s  # noqa: E402  (the declaration's samples)

declare(pad, pad_backward, torch=_s.torch_pad, samples=_s.PAD)
__all__ = exports(__name__, globals())
