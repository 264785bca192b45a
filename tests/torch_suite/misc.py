"""Adapters of the remaining rows: similarities and distances, embedding, scaled
dot-product attention, dropout rows where torch draws no mask (p = 0 or eval)."""

from __future__ import annotations

import numpy as np

from .helpers import Unsupported, kernel, named, op_row


def _grads(back, dy, leaves, order):
    got = dict(zip(order, back(dy)))
    return [got.get(k) for k in leaves]


def cosine_similarity(sample, *arrays):
    names = ("x1", "x2", "dim", "eps")
    v, leaves = named(sample, names, arrays)
    if v["x1"].shape != v["x2"].shape:
        raise Unsupported("broadcast inputs")
    y, back = kernel("cosine_similarity", v["x1"], v["x2"], axis=v.get("dim", 1),
                     eps=v.get("eps", 1e-8))
    return y, lambda dy: _grads(back, dy, leaves, names)


def pairwise_distance(sample, *arrays):
    names = ("x1", "x2", "p", "eps", "keepdim")
    v, leaves = named(sample, names, arrays)
    if v["x1"].shape != v["x2"].shape:
        raise Unsupported("broadcast inputs")
    if v["x1"].ndim == 0:
        raise Unsupported("0-d input")
    keywords = {k: v[k] for k in names[2:] if k in v}
    y, back = kernel("pairwise_distance", v["x1"], v["x2"], **keywords)
    return y, lambda dy: _grads(back, dy, leaves, names)


def embedding(sample, weight):
    """op_db's row calls ``F.embedding(ids, weight, **kwargs)`` as ``op(weight, ids)``."""
    ids = np.asarray(sample.args[0])
    kwargs = dict(sample.kwargs)
    for key in ("max_norm", "scale_grad_by_freq"):
        if kwargs.pop(key, None):
            raise Unsupported(key)
    kwargs.pop("sparse", None)
    y, back = kernel("embedding", ids, weight, kwargs.pop("padding_idx", None))
    if kwargs:
        raise Unsupported(f"argument {sorted(kwargs)[0]}")
    return y, lambda dy: [back(dy)[-1]]


def attention(sample, *arrays):
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
             "enable_gqa")
    v, leaves = named(sample, names, arrays)
    if v.get("enable_gqa"):
        raise Unsupported("enable_gqa")
    if v.get("dropout_p", 0.0):
        raise Unsupported("random mask")
    if "attn_mask" in leaves:
        raise Unsupported("gradient of the mask")
    y, back = kernel("scaled_dot_product_attention", v["query"], v["key"], v["value"],
                     v.get("attn_mask"), causal=bool(v.get("is_causal")), scale=v.get("scale"))
    return y, lambda dy: _grads(back, dy, leaves, names)


def no_mask(sample, x):
    """A dropout row where torch draws nothing: the identity (p = 0 or not training)."""
    v, _ = named(sample, ("input", "p", "training"), (x,))
    if v.get("p", 0.5) and v.get("training", True):
        raise Unsupported("random mask")
    y, back = kernel("dropout", x, v.get("p", 0.5), np.random.default_rng(0),
                     training=bool(v.get("training", True)))
    return y, lambda dy: [back(dy)[0]]


OPS = {"cosine_similarity": op_row(cosine_similarity),
       "pairwise_distance": op_row(pairwise_distance),
       "embedding": op_row(embedding),
       "scaled_dot_product_attention": op_row(attention)}
OPS.update({row: op_row(no_mask) for row in (
    "dropout", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout.with_train",
    "feature_alpha_dropout.without_train")})


def _named_refusal(reason):
    """A row handgrad has no counterpart for: every sample counts under ``reason``."""

    def adapter(*_):
        raise Unsupported(reason)

    return adapter


OPS["pdist"] = _named_refusal("no pdist op (pairwise_distance pairs rows, not all pairs)")
OPS["multi_head_attention_forward"] = _named_refusal(
    "functional MHA with explicit weights (see the MultiheadAttention module row)")
# the row is for complex64/128 (its real samples are F.silu's); handgrad's silu is real
OPS["silu.complex"] = _named_refusal("complex dtype")
MODULES = {"LPPool3d": _named_refusal("no 3-D lp_pool kernel")}
