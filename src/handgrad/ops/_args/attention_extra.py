"""torch MHA's ``add_bias_kv``/``add_zero_attn``: extra key/value positions after the
projection (a learned one, then a zero one) and the mask columns that go with them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..._checks import describe
from ..._hyper import flag
from .attention import causal_keep


@dataclass(frozen=True)
class KVExtra:
    """The appended positions: ``bias`` (bias_k, bias_v as (1, H, 1, D)) or None,
    ``zero`` (a zero column after it); ``count`` = how many columns K and V gain."""

    xp: object
    bias: tuple | None
    zero: bool
    tq: int
    tk: int

    @property
    def count(self):
        return int(self.bias is not None) + int(self.zero)

    def extend(self, k, v):
        """K, V (N, H, Tk, D) -> (N, H, Tk + count, D)."""
        xp = self.xp
        if self.bias is not None:
            k, v = (xp.concatenate([x, xp.broadcast_to(b, (x.shape[0], *b.shape[1:]))], axis=2)
                    for x, b in zip((k, v), self.bias))
        if self.zero:
            k, v = (xp.concatenate([x, xp.zeros_like(x[:, :, :1])], axis=2) for x in (k, v))
        return k, v

    def _pad(self, mask):
        if mask is None:
            return None
        mask = self.xp.asarray(mask)
        if mask.ndim == 0 or mask.shape[-1] != self.tk:
            return mask  # a broadcast key axis covers the new columns too
        widths = [(0, 0)] * (mask.ndim - 1) + [(0, self.count)]
        return self.xp.pad(mask, widths)  # zeros: False / 0.0, i.e. not masked

    def pad_masks(self, key_padding_mask, attn_mask, causal):
        """The masks with ``count`` unmasked key columns (torch pads them with zeros);
        ``causal`` becomes an explicit (Tq, Tk) mask first."""
        if flag("multi_head_attention", "causal", causal):
            if attn_mask is not None:
                raise ValueError("multi_head_attention: causal=True with an attn_mask is not "
                                 "supported together with bias_k/bias_v or add_zero_attn; "
                                 "pass the causal part inside attn_mask")
            attn_mask = ~causal_keep(self.xp, self.tq, self.tk)
        return self._pad(key_padding_mask), self._pad(attn_mask), False


def bias_kv_extra(op, xp, bias_k, bias_v, add_zero_attn, shapes, dtype):
    """Check ``bias_k``/``bias_v`` ((1, 1, E), both or neither, the query's dtype) and
    ``add_zero_attn``; returns the :class:`KVExtra`."""
    zero = flag(op, "add_zero_attn", add_zero_attn)
    if (bias_k is None) != (bias_v is None):
        raise ValueError(f"{op}: 'bias_k' and 'bias_v' go together; received bias_k "
                         f"{describe(bias_k)} and bias_v {describe(bias_v)}")
    bias = None
    if bias_k is not None:
        e, h = shapes.embed, shapes.heads
        bias = []
        for name, b in (("bias_k", bias_k), ("bias_v", bias_v)):
            if getattr(b, "shape", None) != (1, 1, e) or getattr(b, "dtype", None) != dtype:
                raise ValueError(f"{op}: '{name}' must be an array of shape (1, 1, {e}) and "
                                 f"dtype {np.dtype(dtype)}; received {describe(b)}")
            bias.append(b.reshape(1, h, 1, e // h))
        bias = tuple(bias)
    return KVExtra(xp, bias, zero, shapes.tq, shapes.tk)


def split_extra_grads(grads, shapes, bias_kv):
    """(dQ, dK, dV) over Tk + extras -> ((dQ, dK, dV) over Tk, extras): extras is
    (dbias_k, dbias_v), each (1, 1, E) = the appended column's gradient summed over N,
    when the forward had the biases, else (); the zero column has no parameter."""
    dq, dk, dv = grads
    tk = shapes.tk
    extras = ()
    if bias_kv:
        extras = tuple(g[:, :, tk].sum(axis=0).reshape(1, 1, shapes.embed) for g in (dk, dv))
    return (dq, dk[:, :, :tk], dv[:, :, :tk]), extras
