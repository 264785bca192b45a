"""Max and average pooling one spatial axis at a time (the pure-NumPy path).

A pooling window is a product of 1-D windows, and both reductions are separable::

    max over (k_0, ..., k_{d-1}) = max over k_0 of ( ... max over k_{d-1} of x)

so a d-D pooling is d 1-D poolings. Each 1-D stage reads its input once per tap of
*its* axis (kh + kw passes for a 2-D window instead of kh * kw), and every stage after
the first runs on an already reduced array.

Sums (average pooling, :func:`sum_forward`) take the first spatial axis first, over rows
that merge the last spatial axis with the channels (long contiguous passes), the last
axis at the end; the backward (:func:`sum_backward`) spreads each stage's gradient back
over its taps in the reverse order (a store for the first tap of each stride residue,
an add for the rest, as the max stages' backward; positions no store writes start at
zero).

Max pooling's stages run the last axis first. Its winner is the first maximum in
row-major tap order (PyTorch). Reducing the last axis first keeps that order: each
row's first maximum, then the first row holding the window's maximum. A stage starts
from a tap that every output reads (its
``first``), takes the taps before it in descending order where they are ``>=`` the
running maximum, then the taps after it where they are ``>``; each non-first tap keeps
that boolean ``take`` (the shape of the outputs it reads), and a window's winner is its
last tap, in that order, whose ``take`` holds. The backward turns the takes into one
mask per tap and writes ``dy * mask`` at the tap's input positions (a plain store for
the first tap of each stride residue, an add for the rest). NaN windows are left to the
caller (their winner is the last NaN, which ``>`` cannot see): :func:`max_forward`
returns None for them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._checks import array_module
from ._block_threads import run_blocks
from ._blocks import image_blocks, merged_last
from ._pool_indices import _axis_taps, covers_once

STAGE_BLOCK_VALUES = 1 << 18
"""Input values per block of images (1 MB of float32, 2 MB of float64): max pool 3x3/2 of
(32, 32, 32, 32) forward + backward on two threads took 3.1-3.5 ms (float32) in blocks of
1 MB, 3.6-3.8 ms in 512 KB; float64, in random order with torch over 61 rounds, five
processes: 4.7-6.6 ms in blocks of 2 MB, 4.9-6.8 in 1 MB (float32 in 2 MB: 1-3% slower
than in 1 MB)."""


@dataclass(frozen=True)
class Stage:
    """One 1-D stage: the array axis it reduces, its input's shape, its taps ``(k,
    input slice, output slice)`` in processing order (the first reads every output), the
    stride residue of each tap's inputs, whether the taps read each input exactly once,
    and (max pooling) each non-first tap's ``take``."""

    axis: int
    in_shape: tuple[int, ...]
    taps: tuple
    residues: tuple[int, ...]
    tiles: bool
    takes: tuple = ()


def _stage_plan(window, full_first=True):
    """(taps in processing order, residues, tiles) of one axis: a tap that every output
    reads first, or None where there is none (the caller then takes the general path);
    with ``full_first`` False, the taps in order where there is none."""
    taps = [t for t in _axis_taps(window) if t is not None]
    full = [i for i, (_, _, out) in enumerate(taps)
            if out.start == 0 and out.stop == window.size_out]
    if not full and full_first:
        return None
    first = full[0] if full else 0
    order = [first, *range(first - 1, -1, -1), *range(first + 1, len(taps))]
    taps = tuple(taps[i] for i in order)
    residues = tuple((k * window.dilation - window.pad_before) % window.stride
                     for k, _, _ in taps)
    return taps, residues, covers_once((window,))


def _at(axis, index):
    """The index tuple selecting ``index`` along array axis ``axis``."""
    return (slice(None),) * axis + (index,)


def _stages(x_shape, axes):
    """The plans of the stages, the last spatial axis first, with each stage's input
    shape; None when an axis has no tap that reads every output."""
    shape, plans = list(x_shape), []
    for i in range(len(axes) - 1, -1, -1):
        plan = _stage_plan(axes[i])
        if plan is None:
            return None
        plans.append((i + 1, tuple(shape), *plan))
        shape[i + 1] = axes[i].size_out
    return plans


def _out_shape(in_shape, axis, size):
    return (*in_shape[:axis], size, *in_shape[axis + 1:])


def max_forward(x, axes):
    """(y, stages) of a max pooling of x (N, *S, C), or None where a window holds a NaN
    or an axis has no tap that every output reads."""
    xp = array_module(x)
    plans = _stages(x.shape, axes)
    if plans is None:
        return None
    takes = [[xp.empty(_out_shape(in_shape, axis, out.stop - out.start), dtype=bool)
              for _, _, out in taps[1:]] for axis, in_shape, taps, _, _ in plans]
    y = xp.empty((x.shape[0], *(a.size_out for a in axes), x.shape[-1]), dtype=x.dtype)

    def block(images):
        z = x[images]
        for (axis, _, taps, _, _), stage_takes in zip(plans, takes):
            z = _max_stage(xp, z, axis, taps, [t[images] for t in stage_takes])
        y[images] = z

    run_blocks(block, image_blocks(x.shape, x.dtype.itemsize,
                                     STAGE_BLOCK_VALUES * x.dtype.itemsize))
    if bool(xp.isnan(y).any()):
        return None
    return y, tuple(Stage(axis, in_shape, taps, residues, tiles, tuple(stage_takes))
                    for (axis, in_shape, taps, residues, tiles), stage_takes
                    in zip(plans, takes))


def _max_stage(xp, z, axis, taps, takes):
    """One stage's running maximum over ``taps`` of z, each non-first tap's ``take``
    written into ``takes``."""
    y = z[_at(axis, taps[0][1])].copy()
    for (k, inputs, outputs), take in zip(taps[1:], takes):
        values, running = z[_at(axis, inputs)], y[_at(axis, outputs)]
        compare = xp.greater_equal if k < taps[0][0] else xp.greater  # ties to the earlier
        compare(values, running, out=take)
        xp.maximum(running, values, out=running)
    return y


def _sum_plans(x_shape, axes):
    """Per axis (first to last), the stage that sums it, its array axis and input shape
    in the order :func:`sum_forward` runs them (the earlier axes on merged rows)."""
    shape, stages = list(x_shape), []
    for i, window in enumerate(axes):
        last = i == len(axes) - 1
        in_shape = tuple(shape) if last else (*shape[:-2], shape[-2] * shape[-1])
        stages.append(Stage(i + 1, in_shape, *_stage_plan(window, full_first=False)))
        shape[i + 1] = window.size_out
    return stages


def sum_forward(x, axes):
    """y (N, *O, C): the sum of each window (the padding adds nothing)."""
    stages = _sum_plans(x.shape, axes)
    z = merged_last(x)
    for stage, window in zip(stages[:-1], axes):
        z = _sum_stage(z, stage, window.size_out)
    z = z.reshape(*z.shape[:-1], *x.shape[-2:])
    return _sum_stage(z, stages[-1], axes[-1].size_out)


def _sum_stage(z, stage, size_out):
    """The sum over the taps of ``stage`` along its axis of z: a copy of its first tap
    where every output reads it, else zeros, plus the other taps."""
    taps, axis = stage.taps, stage.axis
    _, inputs, outputs = taps[0]
    if outputs.stop - outputs.start == size_out:
        y = z[_at(axis, inputs)].copy()
    else:
        y = np.zeros((*z.shape[:axis], size_out, *z.shape[axis + 1:]), dtype=z.dtype)
        y[_at(axis, outputs)] = z[_at(axis, inputs)]
    for _, inputs, outputs in taps[1:]:
        y[_at(axis, outputs)] += z[_at(axis, inputs)]
    return y


def sum_backward(share, axes, x_shape):
    """dx (x_shape) = each window's ``share`` (N, *O, C) added at every position of it:
    the stages of :func:`sum_forward` transposed, the last axis first."""
    xp = array_module(share)
    stages = _sum_plans(x_shape, axes)
    dz = _scatter_stage(xp, share, stages[-1], [None] * len(stages[-1].taps), True)
    dz = merged_last(dz)
    for stage in reversed(stages[:-1]):
        dz = _scatter_stage(xp, dz, stage, [None] * len(stage.taps), True)
    return dz.reshape(x_shape)


def _masks(xp, stage, out_shape):
    """One boolean mask per tap of a max stage: the outputs whose winner it reads."""
    masks = [None] * len(stage.taps)
    claimed = None
    for position in range(len(stage.taps) - 1, 0, -1):
        take, outputs = stage.takes[position - 1], _at(stage.axis, stage.taps[position][2])
        if claimed is None:
            claimed = xp.zeros(out_shape, dtype=bool)
            masks[position] = take
        else:
            masks[position] = take & ~claimed[outputs]
        claimed[outputs] |= take
    masks[0] = None if claimed is None else ~claimed
    return masks


def _scatter_stage(xp, dz, stage, masks, finite, dx=None):
    """dx (stage.in_shape) = each tap's ``dz * mask`` added at its input positions
    (``mask`` None: all of dz); ``finite`` says dz holds no inf or NaN (then a product
    with a boolean mask is exact, else the masked-out entries are set to zero)."""
    if dx is None:
        dx = xp.empty(stage.in_shape, dtype=dz.dtype)
    if not stage.tiles:
        dx[_at(stage.axis, _unstored(stage))] = 0
    written = set()
    for (_, inputs, outputs), residue, mask in zip(stage.taps, stage.residues, masks):
        target, values = dx[_at(stage.axis, inputs)], dz[_at(stage.axis, outputs)]
        if residue not in written:
            written.add(residue)
            _select(xp, values, mask, finite, out=target)
        else:
            target += _select(xp, values, mask, finite)
    return dx


def _unstored(stage):
    """The positions along the stage's axis that no store writes (the first tap of each
    stride residue stores, the others add): they start at zero."""
    stored = np.zeros(stage.in_shape[stage.axis], dtype=bool)
    residues = set()
    for (_, inputs, _), residue in zip(stage.taps, stage.residues):
        if residue not in residues:
            residues.add(residue)
            stored[inputs] = True
    return np.flatnonzero(~stored)


def _select(xp, values, mask, finite, out=None):
    """values where ``mask`` (None: everywhere), else 0, into ``out`` if given."""
    if mask is None:
        if out is None:
            return values
        out[...] = values
        return out
    if finite:
        return xp.multiply(values, mask, out=out)
    chosen = xp.where(mask, values, xp.zeros((), dtype=values.dtype))
    if out is None:
        return chosen
    out[...] = chosen
    return out


def max_backward(dy, stages):
    """dx of :func:`max_forward`: per block of images, the stages in reverse, each
    routing its output gradient to the winners of its axis."""
    xp = array_module(dy)
    finite = bool(xp.isfinite(dy).all())
    dx = xp.empty(stages[0].in_shape, dtype=dy.dtype)

    def block_of_images(images):
        dz = dy[images]
        for i in range(len(stages) - 1, -1, -1):
            block = _block_stage(stages[i], images)
            masks = _masks(xp, block, dz.shape)
            dz = _scatter_stage(xp, dz, block, masks, finite, dx[images] if i == 0 else None)

    run_blocks(block_of_images, image_blocks(dx.shape, dx.dtype.itemsize,
                                                 STAGE_BLOCK_VALUES * dx.dtype.itemsize))
    return dx


def _block_stage(stage, images):
    """The stage restricted to a block of images."""
    count = len(range(*images.indices(stage.in_shape[0])))
    return Stage(stage.axis, (count, *stage.in_shape[1:]), stage.taps, stage.residues,
                 stage.tiles, tuple(t[images] for t in stage.takes))
