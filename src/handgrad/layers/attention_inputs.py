"""Attention masks as graph inputs: ``mask_inputs`` names the masks that follow the data
inputs of a graph call, in the order given, as ``torch.nn.MultiheadAttention`` takes
them (bool True = may NOT attend, float = added to the scores).

Per-example shapes (the Input's ``shape``; the batch axis N comes first in the arrays):

- ``key_padding_mask``: ``(Tk,)``, e.g. ``Input((Tk,), dtype=bool)``;
- ``attn_mask``: ``(Tq, Tk)`` (the same for every head) or ``(H, Tq, Tk)`` (one per
  head). torch's single (Tq, Tk) mask shared by the whole batch is, in a graph, one
  such row per example (the same values repeated along N); torch's (N*H, Tq, Tk) is
  the per-example (H, Tq, Tk).
"""

from __future__ import annotations

from .._checks import describe

MASK_NAMES = ("key_padding_mask", "attn_mask")


def mask_inputs_arg(owner, value):
    """``mask_inputs`` as a tuple of distinct names from :data:`MASK_NAMES`."""
    if isinstance(value, str) or not isinstance(value, (tuple, list)) or not all(
            isinstance(name, str) for name in value):
        raise TypeError(f"{owner}: 'mask_inputs' must be a tuple of mask names from "
                        f"{MASK_NAMES}; received {describe(value)}")
    unknown = [name for name in value if name not in MASK_NAMES]
    if unknown or len(set(value)) != len(value):
        raise ValueError(f"{owner}: 'mask_inputs' must name distinct masks from "
                         f"{MASK_NAMES}; received {tuple(value)}")
    return tuple(value)


def graph_masks(label, names, arrays):
    """``{name: mask}`` for :func:`handgrad.ops.multi_head_attention` from the batched
    mask arrays of a graph call: key_padding_mask (N, Tk) as it is; attn_mask (N, Tq, Tk)
    as (N, 1, Tq, Tk) (every head), (N, H, Tq, Tk) as it is."""
    masks = {}
    for name, mask in zip(names, arrays):
        rank = len(getattr(mask, "shape", ()))
        if name == "key_padding_mask" and rank != 2:
            raise ValueError(f"{label}: the graph input 'key_padding_mask' must be (N, Tk) "
                             f"(per example (Tk,)); received {describe(mask)}")
        if name == "attn_mask":
            if rank not in (3, 4):
                raise ValueError(f"{label}: the graph input 'attn_mask' must be (N, Tq, Tk) "
                                 f"or (N, H, Tq, Tk) (per example (Tq, Tk) or (H, Tq, Tk)); "
                                 f"received {describe(mask)}")
            mask = mask[:, None] if rank == 3 else mask
        masks[name] = mask
    return masks
