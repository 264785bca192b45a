"""A grouped convolution's weight as the block-diagonal weight of a dense one.

A grouped conv with ``groups`` groups and weight ``w`` (*K, Cg, C_out) equals the
dense conv (groups = 1) whose weight (*K, groups*Cg, C_out) holds ``w``'s group
``g`` at input rows ``g*Cg:(g+1)*Cg`` and output columns ``g*Og:(g+1)*Og`` and
zeros elsewhere. With few groups the dense GEMMs, ``groups`` times wider, run far
faster than the batched per-group GEMMs of width ``Og`` even though they multiply
the zeros too; the dense weight gradient's diagonal blocks are the grouped one.
"""

from __future__ import annotations

MAX_GROUPS = 4  # at most 4x the multiply-adds of the grouped GEMMs


def block_diagonal(xp, w, groups):
    """w (*K, Cg, C_out) -> the dense weight (*K, groups*Cg, C_out), zero off the groups."""
    kernel, per_group_in, out_channels = w.shape[:-2], w.shape[-2], w.shape[-1]
    per_group_out = out_channels // groups
    dense = xp.zeros((*kernel, groups, per_group_in, groups, per_group_out), dtype=w.dtype)
    group = xp.arange(groups)
    blocks = w.reshape(*kernel, per_group_in, groups, per_group_out)
    dense[..., group, :, group, :] = xp.moveaxis(blocks, -2, 0)  # (groups, *K, Cg, Og)
    return dense.reshape(*kernel, groups * per_group_in, out_channels)


def diagonal_blocks(xp, dense, groups):
    """The adjoint of :func:`block_diagonal`'s embedding: dense (*K, groups*Cg, C_out)
    -> its diagonal blocks as a grouped weight (*K, Cg, C_out)."""
    kernel, out_channels = dense.shape[:-2], dense.shape[-1]
    per_group_in = dense.shape[-2] // groups
    split = dense.reshape(*kernel, groups, per_group_in, groups, out_channels // groups)
    group = xp.arange(groups)
    blocks = xp.moveaxis(split[..., group, :, group, :], 0, -2)  # (*K, Cg, groups, Og)
    return xp.ascontiguousarray(blocks.reshape(*kernel, per_group_in, out_channels))
