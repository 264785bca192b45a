"""Validation shared by the attention kernels and their loop twins.

Masks are normalized to a :class:`Masking`: boolean ``keep`` arrays (True = the
query may attend to the key) and additive float ``biases``, each broadcastable to
the score shape ``(N, ..., Tq, Tk)``. ``causal`` adds the lower-triangular keep
mask ``j <= i`` (aligned at the top-left corner, as ``torch``'s ``is_causal``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..._checks import array_module, as_generator, describe, float_array, positive_int, same_dtype
from ..._hyper import flag, number


@dataclass(frozen=True)
class Masking:
    """Masks to apply to the scores: ``keep`` arrays (bool) and additive ``biases``."""

    keeps: tuple = ()
    biases: tuple = ()

    @property
    def active(self) -> bool:
        return bool(self.keeps or self.biases)

    def combined_bias(self, shape, dtype):
        """All masks as one additive float array of ``shape``: 0 or -inf per keep mask,
        plus the biases (the form the loop twins use)."""
        total = np.zeros(shape, dtype=dtype)
        for keep in self.keeps:
            total = total + np.where(keep, dtype.type(0), dtype.type(-np.inf))
        for bias in self.biases:
            total = total + bias
        return np.broadcast_to(total, shape)


def _mask_array(op, name, mask, scores_shape, layout):
    """``mask`` as a bool or float array broadcastable to ``scores_shape``."""
    if not (hasattr(mask, "dtype") and hasattr(mask, "shape")):
        raise TypeError(f"{op}: '{name}' must be a bool or float array {layout}; received "
                        f"{describe(mask)}")
    if mask.dtype != np.bool_ and mask.dtype.kind != "f":
        raise TypeError(f"{op}: '{name}' must have dtype bool or float; received dtype "
                        f"{mask.dtype}")
    xp = array_module(mask)
    try:
        fits = xp.broadcast_shapes(tuple(mask.shape), scores_shape) == scores_shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"{op}: '{name}' must be broadcastable to the scores {layout} = "
                         f"{scores_shape}; received shape {tuple(mask.shape)}")
    return mask


def mask_terms(op, name, mask, scores_shape, dtype, true_means_attend, layout):
    """``(keeps, biases)`` for one user mask: a bool mask becomes a keep mask (negated
    when True means "masked out"), a float mask an additive bias in ``dtype``."""
    if mask is None:
        return (), ()
    mask = _mask_array(op, name, mask, scores_shape, layout)
    if mask.dtype == np.bool_:
        return ((mask if true_means_attend else ~mask),), ()
    return (), (mask.astype(dtype, copy=False),)


def causal_keep(xp, tq, tk):
    """(Tq, Tk) bool: query i may attend to keys j <= i."""
    return xp.tri(tq, tk, dtype=bool)


def dropout_generator(op, dropout, rng):
    """The dropout rate as a float in [0, 1) and, when it is > 0, a Generator."""
    rate = number(op, "dropout", dropout, low=0.0, high=1.0, high_open=True)
    if rate == 0.0:
        return rate, None
    return rate, as_generator(op, "rng", rng, allow_none=False)


@dataclass(frozen=True)
class AttentionCall:
    """Validated arguments of :func:`scaled_dot_product_attention`."""

    q: object
    k: object
    v: object
    masking: Masking
    rate: float
    rng: object
    scale: float


def prepare_attention(op, q, k, v, mask, causal, dropout, rng, scale) -> AttentionCall:
    """Check q (N, ..., Tq, E), k (N, ..., Tk, E), v (N, ..., Tk, Ev) and the options."""
    layouts = {"q": "(N, ..., Tq, E)", "k": "(N, ..., Tk, E)", "v": "(N, ..., Tk, Ev)"}
    arrays = {}
    for name, value in (("q", q), ("k", k), ("v", v)):
        arrays[name] = float_array(op, name, value)
        if arrays[name].ndim < 3:
            raise ValueError(f"{op}: '{name}' must have at least 3 dimensions "
                             f"{layouts[name]}; received shape {tuple(arrays[name].shape)}")
    q, k, v = arrays["q"], arrays["k"], arrays["v"]
    same_dtype(op, q=q, k=k, v=v)
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(f"{op}: 'q', 'k' and 'v' must share the leading axes (N, ...); "
                         f"received shapes {q.shape}, {k.shape} and {v.shape}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"{op}: 'k' and 'v' must have the same number of keys Tk; received "
                         f"shapes {k.shape} and {v.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"{op}: 'q' and 'k' must have the same feature size E; received "
                         f"shapes {q.shape} and {k.shape}")
    scores = (*q.shape[:-1], k.shape[-2])
    keeps, biases = mask_terms(op, "mask", mask, scores, q.dtype, True, "(N, ..., Tq, Tk)")
    if flag(op, "causal", causal):
        keeps += (causal_keep(array_module(q), q.shape[-2], k.shape[-2]),)
    rate, generator = dropout_generator(op, dropout, rng)
    if scale is None:  # with E = 0 every score is an empty sum, 0 whatever the scale
        scale = 1.0 / float(np.sqrt(q.shape[-1])) if q.shape[-1] else 1.0
    else:
        scale = number(op, "scale", scale)
    return AttentionCall(q, k, v, Masking(keeps, biases), rate, generator, scale)


@dataclass(frozen=True)
class MHAShapes:
    """Sizes of a multi-head attention call."""

    batch: int
    tq: int
    tk: int
    embed: int
    heads: int
    self_attention: bool
    packed: bool

    @property
    def head_dim(self) -> int:
        return self.embed // self.heads


def _weight(op, name, w, shape):
    w = float_array(op, name, w, 2)
    if tuple(w.shape) != shape:
        raise ValueError(f"{op}: '{name}' must have shape {shape}; received {tuple(w.shape)}")
    return w


def _bias(op, name, b, size):
    if b is None:
        return None
    b = float_array(op, name, b, 1)
    if tuple(b.shape) != (size,):
        raise ValueError(f"{op}: '{name}' must have shape ({size},); received {tuple(b.shape)}")
    return b


def prepare_projections(op, query, key, value, in_weight, in_bias, out_weight, out_bias,
                        num_heads):
    """Validate the inputs and weights of :func:`multi_head_attention`; returns
    ``(query, key, value, in_weight, in_bias, out_weight, out_bias, shapes)`` with
    ``in_weight``/``in_bias`` as given (one packed array or a tuple of three)."""
    query = float_array(op, "query", query, 3, "(N, Tq, E)")
    if (key is None) != (value is None):
        raise ValueError(f"{op}: pass both 'key' and 'value' (cross-attention) or neither "
                         f"(self-attention); received key={describe(key)}, "
                         f"value={describe(value)}")
    n, tq, embed = query.shape
    heads = positive_int(op, "num_heads", num_heads)
    if embed == 0:
        raise ValueError(f"{op}: 'query' (N, Tq, E) must have E >= 1 features; received an "
                         f"array of shape {tuple(query.shape)}")
    if embed % heads:
        raise ValueError(f"{op}: the embedding size E = {embed} must be divisible by "
                         f"num_heads = {heads}")
    self_attention = key is None
    if not self_attention:
        key = float_array(op, "key", key, 3, "(N, Tk, kdim)")
        value = float_array(op, "value", value, 3, "(N, Tk, vdim)")
        if key.shape[0] != n or value.shape[0] != n or key.shape[1] != value.shape[1]:
            raise ValueError(f"{op}: 'key' and 'value' must be (N, Tk, .) with the query's N = "
                             f"{n} and one Tk; received shapes {key.shape} and {value.shape}")
    kdim = embed if self_attention else key.shape[2]
    vdim = embed if self_attention else value.shape[2]
    packed = not isinstance(in_weight, (tuple, list))
    if packed:
        if kdim != embed or vdim != embed:
            raise ValueError(f"{op}: a packed 'in_weight' (E, 3E) needs key and value "
                             f"features equal to E = {embed}; received kdim = {kdim}, vdim = "
                             f"{vdim} (pass in_weight as a tuple (w_q, w_k, w_v))")
        in_weight = _weight(op, "in_weight", in_weight, (embed, 3 * embed))
        in_bias = _bias(op, "in_bias", in_bias, 3 * embed)
    else:
        if len(in_weight) != 3:
            raise ValueError(f"{op}: 'in_weight' must be one (E, 3E) array or a tuple (w_q, "
                             f"w_k, w_v); received a sequence of {len(in_weight)}")
        in_weight = tuple(_weight(op, f"in_weight[{i}]", w, (d, embed))
                          for i, (w, d) in enumerate(zip(in_weight, (embed, kdim, vdim))))
        if in_bias is not None:
            if not isinstance(in_bias, (tuple, list)) or len(in_bias) != 3:
                raise TypeError(f"{op}: with separate projections 'in_bias' must be None or a "
                                f"tuple (b_q, b_k, b_v); received {describe(in_bias)}")
            in_bias = tuple(_bias(op, f"in_bias[{i}]", b, embed) for i, b in enumerate(in_bias))
    out_weight = _weight(op, "out_weight", out_weight, (embed, embed))
    out_bias = _bias(op, "out_bias", out_bias, embed)
    flat_in = in_weight if isinstance(in_weight, tuple) else (in_weight,)
    flat_bias = in_bias if isinstance(in_bias, tuple) else (in_bias,)
    named = {"query": query, "key": key, "value": value, "out_weight": out_weight,
             "out_bias": out_bias}
    named.update({f"in_weight{i}": w for i, w in enumerate(flat_in)})
    named.update({f"in_bias{i}": b for i, b in enumerate(flat_bias)})
    same_dtype(op, **named)
    tk = tq if self_attention else key.shape[1]
    shapes = MHAShapes(n, tq, tk, embed, heads, self_attention, packed)
    return query, key, value, in_weight, in_bias, out_weight, out_bias, shapes


def mha_masking(op, xp, key_padding_mask, attn_mask, causal, shapes, dtype) -> Masking:
    """Masks of :func:`multi_head_attention` in ``torch.nn.MultiheadAttention``'s
    convention (bool True = may NOT attend; float = added), as a :class:`Masking` on
    scores (N, H, Tq, Tk). ``attn_mask`` is (Tq, Tk), torch's (N*H, Tq, Tk) or
    broadcastable to (N, H, Tq, Tk); ``key_padding_mask`` is (N, Tk)."""
    n, h, tq, tk = shapes.batch, shapes.heads, shapes.tq, shapes.tk
    scores = (n, h, tq, tk)
    keeps, biases = (), ()
    if key_padding_mask is not None:
        kpm = _mask_array(op, "key_padding_mask", key_padding_mask, (n, tk), "(N, Tk)")
        if kpm.ndim != 2:
            raise ValueError(f"{op}: 'key_padding_mask' must be a 2-D array (N, Tk) = "
                             f"{(n, tk)}; received shape {tuple(kpm.shape)}")
        k, b = mask_terms(op, "key_padding_mask", kpm[:, None, None, :], scores, dtype,
                          False, "(N, Tk)")
        keeps, biases = keeps + k, biases + b
    if attn_mask is not None:
        if getattr(attn_mask, "ndim", None) == 3 and tuple(attn_mask.shape) == (n * h, tq, tk):
            attn_mask = attn_mask.reshape(n, h, tq, tk)
        k, b = mask_terms(op, "attn_mask", attn_mask, scores, dtype, False,
                          "(Tq, Tk), (N*H, Tq, Tk) or (N, H, Tq, Tk)")
        keeps, biases = keeps + k, biases + b
    if flag(op, "causal", causal):
        keeps += (causal_keep(xp, tq, tk),)
    return Masking(keeps, biases)
