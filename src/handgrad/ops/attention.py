"""Scaled dot-product attention and multi-head attention.

Scaled dot-product attention, per batch entry (the leading axes (N, ...) are a batch)::

    s   = scale * q k^T (+ float masks)        (Tq, Tk); keys hidden by a bool mask: -inf
    p   = softmax(s) along the keys
    pd  = p * m                                m = [u >= rate] / (1 - rate), u ~ U[0, 1)
    out = pd v                                 (Tq, Ev)

Backward, with ``r = rowsum(dout * out)``, which equals ``rowsum(dp * p)`` (so the
(Tq, Tk) product ``dp * p`` is never formed)::

    dv = pd^T dout
    dp = (dout v^T) * m
    ds = p * (dp - r)                          the softmax Jacobian; 0 wherever p is 0
    dq = scale * ds k,     dk = scale * ds^T q

A masked key has ``p = 0``, so it receives exactly zero gradient. A query row whose
keys are all masked gives ``p = 0``: its output is zeros and it passes no gradient
(PyTorch's ``F.scaled_dot_product_attention`` also gives zeros there, and
``nn.MultiheadAttention`` with ``need_weights=False``; with ``need_weights=True``
torch gives NaN).

Multi-head attention, batch-first like ``nn.MultiheadAttention(batch_first=True)``::

    Q = query W_q + b_q,  K = key W_k + b_k,  V = value W_v + b_v      (N, T, E)
    head h uses columns h*D ... (h+1)*D - 1 of Q, K and V (D = E / H)
    A = the heads' attention outputs side by side                      (N, Tq, E)
    y = A W_o + b_o

Weights are stored (F_in, F_out) as in :func:`handgrad.ops.linear`. From torch:
``in_weight = in_proj_weight.T`` (E, 3E) with columns q | k | v and
``in_bias = in_proj_bias``; separate projections ``w_q = q_proj_weight.T``,
``w_k = k_proj_weight.T`` (kdim, E), ``w_v = v_proj_weight.T`` (vdim, E) with
``in_proj_bias`` split in three; ``out_weight = out_proj.weight.T``. The backward
runs the same steps in reverse, with :func:`linear_backward` for the projections.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .._checks import array_module, upstream_grad
from ._args.attention import (
    MHAShapes,
    dropout_generator,
    mha_masking,
    prepare_attention,
    prepare_projections,
)
from ._args.attention_extra import bias_kv_extra, split_extra_grads
from ._args.cache import Cache, check_cache
from .declare import declare, exports
from .dropout import dropout as apply_dropout
from .linear import linear, linear_backward


def _t(x):
    """The last two axes swapped (a view)."""
    return x.swapaxes(-1, -2)


def _masked_softmax(xp, s, masking):
    """softmax(s + biases) along the last axis, -inf where a keep mask is False, in place
    on ``s``; rows with no visible key become zeros (also when there are no keys)."""
    if s.shape[-1] == 0:
        return s
    for bias in masking.biases:
        s += bias
    if masking.keeps:
        keep = masking.keeps[0]
        for other in masking.keeps[1:]:
            keep = keep & other
        s = xp.where(keep, s, s.dtype.type(-np.inf))
    row_max = xp.max(s, axis=-1, keepdims=True)
    if masking.active:
        row_max = xp.where(row_max == -np.inf, row_max.dtype.type(0), row_max)
    s -= row_max
    xp.exp(s, out=s)
    total = xp.sum(s, axis=-1, keepdims=True)
    if masking.active:
        total = xp.where(total == 0, total.dtype.type(1), total)
    s *= 1 / total
    return s


def _attend(xp, q_scaled, k, v, masking, rate, rng):
    """out = dropout(softmax(q_scaled k^T)) v; returns (out, p, dropout mask or None)."""
    p = _masked_softmax(xp, xp.matmul(q_scaled, _t(k)), masking)
    if rate == 0.0:
        return xp.matmul(p, v), p, None
    dropped, cache = apply_dropout(p, rate, rng)
    return xp.matmul(dropped, v), p, cache.saved


def _attend_backward(xp, dout, q_scaled, k, v, p, out, drop, scale):
    """(dq, dk, dv) of :func:`_attend` for the upstream gradient ``dout``."""
    dv = xp.matmul(_t(p if drop is None else p * drop), dout)
    ds = xp.matmul(dout, _t(v))
    if drop is not None:
        ds *= drop
    ds -= xp.sum(dout * out, axis=-1, keepdims=True)
    ds *= p
    dq = xp.matmul(ds, k)
    dq *= dq.dtype.type(scale)
    dk = xp.matmul(_t(ds), q_scaled)
    return dq, dk, dv


@dataclass(frozen=True)
class AttentionCache(Cache):
    """What :func:`scaled_dot_product_attention_backward` needs."""

    q_scaled: object
    k: object
    v: object
    p: object
    out: object
    drop: object
    scale: float


def scaled_dot_product_attention(q, k, v, mask=None, *, causal=False, dropout=0.0, rng=None,
                                 scale=None):
    """out = dropout(softmax(scale * q k^T + mask)) v.

    q (N, ..., Tq, E), k (N, ..., Tk, E), v (N, ..., Tk, Ev) -> out (N, ..., Tq, Ev).
    ``mask``: bool (True = attend, as torch's bool ``attn_mask``) or float (added to
    the scores), broadcastable to (N, ..., Tq, Tk). ``causal``: query i sees keys
    j <= i (torch's ``is_causal``; unlike torch it may be combined with ``mask``).
    ``dropout``: rate on the attention weights, with ``rng`` (Generator or int seed,
    required when dropout > 0). ``scale`` defaults to 1/sqrt(E). Rows with no visible
    key give zeros. Returns ``(out, cache)`` for
    :func:`scaled_dot_product_attention_backward`.
    """
    call = prepare_attention("scaled_dot_product_attention", q, k, v, mask, causal, dropout,
                             rng, scale)
    xp = array_module(call.q)
    q_scaled = call.q * call.q.dtype.type(call.scale)
    out, p, drop = _attend(xp, q_scaled, call.k, call.v, call.masking, call.rate, call.rng)
    return out, AttentionCache("scaled_dot_product_attention", q_scaled, call.k, call.v, p, out,
                               drop, call.scale)


def scaled_dot_product_attention_backward(dout, cache):
    """Gradients of :func:`scaled_dot_product_attention`: dout (N, ..., Tq, Ev) -> (dq, dk,
    dv); dq = scale * ds k, dk = scale * ds^T q, dv = p^T dout (see the module docstring)."""
    op = "scaled_dot_product_attention_backward"
    cache = check_cache(op, cache, "scaled_dot_product_attention", AttentionCache)
    dout = upstream_grad(op, dout, cache.out.shape, cache.out.dtype)
    return _attend_backward(array_module(dout), dout, cache.q_scaled, cache.k, cache.v,
                            cache.p, cache.out, cache.drop, cache.scale)


# ---------------------------------------------------------------- multi-head attention
def _split_heads(x, heads):
    """(N, T, E) -> (N, H, T, D), a view."""
    n, t, e = x.shape
    return x.reshape(n, t, heads, e // heads).transpose(0, 2, 1, 3)


def _merge_heads(x):
    """(N, H, T, D) -> (N, T, H*D)."""
    n, h, t, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(n, t, h * d)


def _rows(x):
    """(N, T, F) as (N*T, F): the projections are single 2-D matmuls."""
    return x.reshape(-1, x.shape[-1])


def _thirds(array, embed):
    """The q, k and v parts of a packed (E, 3E) weight or (3E,) bias."""
    if array is None:
        return None, None, None
    return tuple(array[..., i * embed:(i + 1) * embed] for i in range(3))


def _project(query, key, value, in_weight, in_bias, shapes: MHAShapes):
    """Q, K, V (N, T, E) and the projection caches."""
    if shapes.self_attention and shapes.packed:
        qkv, cache = linear(_rows(query), in_weight, in_bias)
        return _thirds(qkv.reshape(shapes.batch, shapes.tq, 3 * shapes.embed),
                       shapes.embed), (cache,)
    weights = in_weight if not shapes.packed else _thirds(in_weight, shapes.embed)
    biases = in_bias if not shapes.packed else _thirds(in_bias, shapes.embed)
    biases = biases if biases is not None else (None, None, None)
    inputs = (query, query, query) if shapes.self_attention else (query, key, value)
    results = [linear(_rows(x), w, b) for x, w, b in zip(inputs, weights, biases)]
    lengths = (shapes.tq, shapes.tk, shapes.tk)
    projected = tuple(r[0].reshape(shapes.batch, t, shapes.embed)
                      for r, t in zip(results, lengths))
    return projected, tuple(r[1] for r in results)


def _project_backward(xp, grads, caches, shapes: MHAShapes):
    """(dquery, dkey, dvalue, din_weight, din_bias) from dQ, dK, dV as (N, H, T, D)."""
    n, tq, e = shapes.batch, shapes.tq, shapes.embed
    if shapes.self_attention and shapes.packed:
        dqkv = xp.empty((n, tq, 3, shapes.heads, shapes.head_dim), dtype=grads[0].dtype)
        for i, grad in enumerate(grads):
            dqkv[:, :, i] = grad.transpose(0, 2, 1, 3)
        dx, dw, db = linear_backward(dqkv.reshape(n * tq, 3 * e), caches[0])
        return dx.reshape(n, tq, e), None, None, dw, db
    results = [linear_backward(_rows(_merge_heads(g)), c) for g, c in zip(grads, caches)]
    lengths = (tq, shapes.tk, shapes.tk)
    dxs = tuple(r[0].reshape(n, t, r[0].shape[-1]) for r, t in zip(results, lengths))
    dws, dbs = tuple(r[1] for r in results), tuple(r[2] for r in results)
    has_bias = dbs[0] is not None
    if shapes.packed:
        din_weight = xp.concatenate(dws, axis=1)
        din_bias = xp.concatenate(dbs) if has_bias else None
    else:
        din_weight, din_bias = tuple(dws), (tuple(dbs) if has_bias else None)
    if shapes.self_attention:
        return dxs[0] + dxs[1] + dxs[2], None, None, din_weight, din_bias
    return dxs[0], dxs[1], dxs[2], din_weight, din_bias


@dataclass(frozen=True)
class MHACache(Cache):
    """What :func:`multi_head_attention_backward` needs."""

    shapes: MHAShapes
    projections: tuple
    attention: AttentionCache
    output: object
    bias_kv: bool = False


def multi_head_attention(query, key, value, in_weight, in_bias, out_weight, out_bias,
                         bias_k=None, bias_v=None, *, num_heads, key_padding_mask=None,
                         attn_mask=None, causal=False, dropout=0.0, rng=None,
                         add_zero_attn=False):
    """Multi-head attention, batch-first, with torch ``nn.MultiheadAttention``'s semantics.

    query (N, Tq, E); key (N, Tk, kdim) and value (N, Tk, vdim), or both None for
    self-attention (key = value = query, one matmul when packed). ``in_weight`` is a
    packed (E, 3E) array (columns q | k | v; needs kdim = vdim = E) with ``in_bias``
    (3E,) or None, or a tuple (w_q (E, E), w_k (kdim, E), w_v (vdim, E)) with
    ``in_bias`` None or a tuple of three (E,). out_weight (E, E), out_bias (E,) or None.
    Masks follow torch's MHA: bool True = may NOT attend, float = added to the scores;
    ``key_padding_mask`` (N, Tk); ``attn_mask`` (Tq, Tk), (N*H, Tq, Tk) or broadcastable
    to (N, H, Tq, Tk). ``causal`` adds a j <= i mask. ``dropout`` acts on the attention
    weights with ``rng``. ``bias_k``/``bias_v`` (1, 1, E) (both or neither) append one
    learned key/value position after the projection, ``add_zero_attn`` then a zero one
    (torch's ``add_bias_kv``/``add_zero_attn``); the masks get those columns unmasked.
    Returns ``(y (N, Tq, E), cache)``.
    """
    op = "multi_head_attention"
    query, key, value, in_weight, in_bias, out_weight, out_bias, shapes = prepare_projections(
        op, query, key, value, in_weight, in_bias, out_weight, out_bias, num_heads)
    xp = array_module(query)
    extra = bias_kv_extra(op, xp, bias_k, bias_v, add_zero_attn, shapes, query.dtype)
    if extra.count:
        key_padding_mask, attn_mask, causal = extra.pad_masks(key_padding_mask, attn_mask,
                                                              causal)
    masking = mha_masking(op, xp, key_padding_mask, attn_mask, causal,
                          replace(shapes, tk=shapes.tk + extra.count), query.dtype)
    rate, generator = dropout_generator(op, dropout, rng)
    (q, k, v), projections = _project(query, key, value, in_weight, in_bias, shapes)
    scale = 1.0 / float(np.sqrt(shapes.head_dim))
    q_scaled = _split_heads(q, shapes.heads) * q.dtype.type(scale)
    k, v = extra.extend(_split_heads(k, shapes.heads), _split_heads(v, shapes.heads))
    out, p, drop = _attend(xp, q_scaled, k, v, masking, rate, generator)
    y, output = linear(_rows(_merge_heads(out)), out_weight, out_bias)
    y = y.reshape(shapes.batch, shapes.tq, shapes.embed)
    attention = AttentionCache("scaled_dot_product_attention", q_scaled, k, v, p, out, drop,
                               scale)
    return y, MHACache(op, shapes, projections, attention, output,
                       extra.bias is not None)


def multi_head_attention_backward(dy, cache):
    """Gradients of :func:`multi_head_attention`: dy (N, Tq, E) -> (dquery, dkey, dvalue,
    din_weight, din_bias, dout_weight, dout_bias).

    ``dkey``/``dvalue`` are None for self-attention (their share is in ``dquery``);
    ``din_weight``/``din_bias`` have the form the forward got (packed array or tuple);
    biases' gradients are None when the forward had none. With ``bias_k``/``bias_v``
    two more follow: (dbias_k, dbias_v) (1, 1, E), the appended column's gradients.
    """
    op = "multi_head_attention_backward"
    cache = check_cache(op, cache, "multi_head_attention", MHACache)
    shapes, att = cache.shapes, cache.attention
    expected = (shapes.batch, shapes.tq, shapes.embed)
    dy = upstream_grad(op, dy, expected, att.out.dtype)
    xp = array_module(dy)
    da, dout_weight, dout_bias = linear_backward(_rows(dy), cache.output)
    da = _split_heads(da.reshape(expected), shapes.heads)
    grads = _attend_backward(xp, da, att.q_scaled, att.k, att.v, att.p, att.out, att.drop,
                             att.scale)
    grads, dbias_kv = split_extra_grads(grads, shapes, cache.bias_kv)
    dquery, dkey, dvalue, din_weight, din_bias = _project_backward(xp, grads,
                                                                   cache.projections, shapes)
    results = (dquery, dkey, dvalue, din_weight, din_bias, dout_weight, dout_bias)
    return results + dbias_kv


# The declarations: kernels, torch counterpart, sample inputs (ops/samples/attention.py).
from .samples import attention as _s  # noqa: E402

declare(scaled_dot_product_attention, scaled_dot_product_attention_backward,
        torch=_s.torch_sdpa, samples=_s.SCALED_DOT_PRODUCT_ATTENTION)
declare(multi_head_attention, multi_head_attention_backward, torch=_s.torch_mha,
        samples=_s.MULTI_HEAD_ATTENTION)
__all__ = exports(__name__, globals())
