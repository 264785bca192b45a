"""Naive attention: plain loops over batch entries, queries and keys.

The readable specification of :mod:`handgrad.ops.attention`, with the same
signatures. Every mask is first written as one additive float array (0 where a
query may look at a key, -inf where it may not, plus any float mask); then each
score, softmax weight and output is one explicit sum. The dropout mask is drawn
with the same single ``rng.random(scores_shape)`` call as the fast op, so both
drop the same weights.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..._checks import upstream_grad
from .._args.attention import dropout_generator, mha_masking, prepare_attention, prepare_projections
from .._args.attention_extra import bias_kv_extra
from .._args.cache import Cache, check_cache
from ..declare import exports


@dataclass(frozen=True)
class LoopAttentionCache(Cache):
    """What the loop backward of scaled dot-product attention needs."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    p: np.ndarray
    keep: np.ndarray  # dropout multipliers, 1 without dropout
    scale: float
    out_shape: tuple


def _softmax_row(scores):
    """softmax of one row of scores; all zeros when every score is -inf."""
    finite = [s for s in scores if s != -np.inf]
    if not finite:
        return np.zeros_like(scores)
    top = max(finite)
    weights = np.array([np.exp(s - top) if s != -np.inf else 0.0 for s in scores],
                       dtype=scores.dtype)
    return weights / sum(weights)


def _dropout_multipliers(shape, dtype, rate, rng):
    if rate == 0.0:
        return np.ones(shape, dtype=dtype)
    u = rng.random(shape, dtype=dtype)
    return np.where(u >= rate, dtype.type(1.0 / (1.0 - rate)), dtype.type(0.0))


def _attention_loops(q, k, v, bias, scale, rate, rng):
    """out[b, i] = sum_j keep[b, i, j] p[b, i, j] v[b, j] with p the softmax over j of
    scale * q[b, i] . k[b, j] + bias[b, i, j]."""
    tq, tk, ev = q.shape[-2], k.shape[-2], v.shape[-1]
    p = np.zeros((*q.shape[:-1], tk), dtype=q.dtype)
    keep = _dropout_multipliers(p.shape, q.dtype, rate, rng)
    out = np.zeros((*q.shape[:-1], ev), dtype=q.dtype)
    for b in np.ndindex(*q.shape[:-2]):
        for i in range(tq):
            scores = np.zeros(tk, dtype=q.dtype)
            for j in range(tk):
                scores[j] = scale * np.dot(q[b][i], k[b][j]) + bias[b][i, j]
            p[b][i] = _softmax_row(scores)
            for j in range(tk):
                out[b][i] += keep[b][i, j] * p[b][i, j] * v[b][j]
    return out, LoopAttentionCache("scaled_dot_product_attention", q, k, v, p, keep, scale,
                                   out.shape)


def _attention_loops_backward(dout, cache):
    q, k, v, p, keep, scale = cache.q, cache.k, cache.v, cache.p, cache.keep, cache.scale
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    for b in np.ndindex(*q.shape[:-2]):
        for i in range(q.shape[-2]):
            dp = np.zeros(k.shape[-2], dtype=q.dtype)
            for j in range(k.shape[-2]):
                dv[b][j] += keep[b][i, j] * p[b][i, j] * dout[b][i]
                dp[j] = keep[b][i, j] * np.dot(dout[b][i], v[b][j])
            weighted = sum(dp[j] * p[b][i, j] for j in range(k.shape[-2]))
            for j in range(k.shape[-2]):
                ds = p[b][i, j] * (dp[j] - weighted)  # softmax Jacobian row
                dq[b][i] += scale * ds * k[b][j]
                dk[b][j] += scale * ds * q[b][i]
    return dq, dk, dv


def scaled_dot_product_attention(q, k, v, mask=None, *, causal=False, dropout=0.0, rng=None,
                                 scale=None):
    """Loop twin of :func:`handgrad.ops.scaled_dot_product_attention`."""
    call = prepare_attention("scaled_dot_product_attention", q, k, v, mask, causal, dropout,
                             rng, scale)
    shape = (*call.q.shape[:-1], call.k.shape[-2])
    bias = call.masking.combined_bias(shape, call.q.dtype)
    return _attention_loops(call.q, call.k, call.v, bias, call.scale, call.rate, call.rng)


def scaled_dot_product_attention_backward(dout, cache):
    """Loop twin of :func:`handgrad.ops.scaled_dot_product_attention_backward`."""
    op = "scaled_dot_product_attention_backward"
    cache = check_cache(op, cache, "scaled_dot_product_attention", LoopAttentionCache)
    dout = upstream_grad(op, dout, cache.out_shape, cache.q.dtype)
    return _attention_loops_backward(dout, cache)


# ---------------------------------------------------------------- multi-head attention
def _dense(x, w, b):
    """y[n, t] = x[n, t] @ w + b, one row at a time."""
    y = np.zeros((*x.shape[:-1], w.shape[1]), dtype=x.dtype)
    for n, t in np.ndindex(*x.shape[:-1]):
        y[n, t] = x[n, t] @ w + (0 if b is None else b)
    return y


def _dense_backward(dy, x, w, has_bias):
    dx, dw = np.zeros_like(x), np.zeros_like(w)
    for n, t in np.ndindex(*x.shape[:-1]):
        dx[n, t] = w @ dy[n, t]
        dw += np.outer(x[n, t], dy[n, t])
    db = dy.sum(axis=(0, 1)) if has_bias else None
    return dx, dw, db


def _heads(x, h):
    """(N, T, E) -> (N, H, T, D): head i owns features i*D ... (i+1)*D - 1."""
    d = x.shape[-1] // h
    return np.stack([x[:, :, i * d:(i + 1) * d] for i in range(h)], axis=1)


def _unheads(x):
    return np.concatenate([x[:, i] for i in range(x.shape[1])], axis=-1)


@dataclass(frozen=True)
class LoopMHACache(Cache):
    """What the loop backward of multi-head attention needs."""

    inputs: tuple
    weights: tuple
    biases: tuple
    out_weight: np.ndarray
    out_bias: object
    merged: np.ndarray
    attention: LoopAttentionCache
    self_attention: bool
    packed: bool
    heads: int
    tk: int  # the keys before the appended bias_k / zero positions
    bias_kv: bool


def _appended(k, v, bias_k, bias_v, zero):
    """K, V (N, H, Tk, D) with bias_k/bias_v (1, 1, E) appended as one more position
    (head h gets features h*D ... (h+1)*D - 1), then a zero one when ``zero``."""
    n, h, tk, d = k.shape
    count = int(bias_k is not None) + int(zero)
    k2 = np.zeros((n, h, tk + count, d), dtype=k.dtype)
    v2 = np.zeros_like(k2)
    for b in range(n):
        for head in range(h):
            for j in range(tk):
                k2[b, head, j], v2[b, head, j] = k[b, head, j], v[b, head, j]
            if bias_k is not None:  # (the zero position stays as allocated)
                k2[b, head, tk] = bias_k[0, 0, head * d:(head + 1) * d]
                v2[b, head, tk] = bias_v[0, 0, head * d:(head + 1) * d]
    return k2, v2


def _appended_backward(dk, dv, tk, bias_kv):
    """(dK, dV over the first Tk keys, (dbias_k, dbias_v) or ()): the bias position's
    gradient summed over the batch, head h into features h*D ... (h+1)*D - 1."""
    n, h, _, d = dk.shape
    if not bias_kv:
        return dk[:, :, :tk], dv[:, :, :tk], ()
    extras = []
    for grad in (dk, dv):
        total = np.zeros((1, 1, h * d), dtype=grad.dtype)
        for b in range(n):
            for head in range(h):
                total[0, 0, head * d:(head + 1) * d] += grad[b, head, tk]
        extras.append(total)
    return dk[:, :, :tk], dv[:, :, :tk], tuple(extras)


def multi_head_attention(query, key, value, in_weight, in_bias, out_weight, out_bias,
                         bias_k=None, bias_v=None, *, num_heads, key_padding_mask=None,
                         attn_mask=None, causal=False, dropout=0.0, rng=None,
                         add_zero_attn=False):
    """Loop twin of :func:`handgrad.ops.multi_head_attention`: the masks are written
    for the Tk given keys, then the appended bias_k and zero positions get 0 (visible)."""
    op = "multi_head_attention"
    query, key, value, in_weight, in_bias, out_weight, out_bias, shapes = prepare_projections(
        op, query, key, value, in_weight, in_bias, out_weight, out_bias, num_heads)
    extra = bias_kv_extra(op, np, bias_k, bias_v, add_zero_attn, shapes, query.dtype)
    masking = mha_masking(op, np, key_padding_mask, attn_mask, causal, shapes, query.dtype)
    rate, generator = dropout_generator(op, dropout, rng)
    e, h = shapes.embed, shapes.heads
    if shapes.packed:
        weights = tuple(in_weight[:, i * e:(i + 1) * e] for i in range(3))
        biases = (None,) * 3 if in_bias is None else tuple(in_bias[i * e:(i + 1) * e]
                                                            for i in range(3))
    else:
        weights, biases = in_weight, in_bias or (None,) * 3
    inputs = (query,) * 3 if shapes.self_attention else (query, key, value)
    q, k, v = (_heads(_dense(x, w, b), h) for x, w, b in zip(inputs, weights, biases))
    k, v = _appended(k, v, bias_k, bias_v, extra.zero)
    scores = (shapes.batch, h, shapes.tq, shapes.tk)
    bias = masking.combined_bias(scores, query.dtype)
    bias = np.concatenate([bias, np.zeros((*scores[:3], extra.count), query.dtype)], axis=3)
    out, attention = _attention_loops(q, k, v, bias, 1.0 / np.sqrt(e // h), rate, generator)
    merged = _unheads(out)
    y = _dense(merged, out_weight, out_bias)
    return y, LoopMHACache(op, inputs, weights, biases, out_weight, out_bias, merged, attention,
                           shapes.self_attention, shapes.packed, h, shapes.tk,
                           bias_k is not None)


def multi_head_attention_backward(dy, cache):
    """Loop twin of :func:`handgrad.ops.multi_head_attention_backward`."""
    op = "multi_head_attention_backward"
    cache = check_cache(op, cache, "multi_head_attention", LoopMHACache)
    dy = upstream_grad(op, dy, cache.merged.shape, cache.merged.dtype)
    dmerged, dout_weight, dout_bias = _dense_backward(dy, cache.merged, cache.out_weight,
                                                      cache.out_bias is not None)
    dq, dk, dv = _attention_loops_backward(_heads(dmerged, cache.heads), cache.attention)
    dk, dv, dbias_kv = _appended_backward(dk, dv, cache.tk, cache.bias_kv)
    has_bias = cache.biases[0] is not None
    dxs, dws, dbs = [], [], []
    for grad, x, w in zip((dq, dk, dv), cache.inputs, cache.weights):
        dx, dw, db = _dense_backward(_unheads(grad), x, w, has_bias)
        dxs.append(dx)
        dws.append(dw)
        dbs.append(db)
    if cache.packed:
        din_weight = np.concatenate(dws, axis=1)
        din_bias = np.concatenate(dbs) if has_bias else None
    else:
        din_weight, din_bias = tuple(dws), (tuple(dbs) if has_bias else None)
    dquery, dkey, dvalue = dxs if not cache.self_attention else (sum(dxs), None, None)
    return (dquery, dkey, dvalue, din_weight, din_bias, dout_weight, dout_bias) + dbias_kv


__all__ = exports(__name__, globals())
