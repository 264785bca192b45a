"""Margin losses of pairs and triplets: margin ranking, hinge embedding, cosine embedding
and triplet margin. ``y`` holds +-1 labels (no gradient); several inputs get one gradient
each, ``(loss, (dfirst, dsecond, ...))``."""

from __future__ import annotations

from .._checks import array_module, describe, float_array, same_dtype
from .._hyper import flag, number
from ._common import nonempty, pair, reduce


def signs(op, y, shape, like, name="y"):
    """``y`` as a float array of ``like``'s dtype and of ``shape`` (one label per item)."""
    xp = array_module(like)
    y = y if hasattr(y, "dtype") and hasattr(y, "shape") else xp.asarray(y)
    if y.dtype.kind not in "biuf":
        raise TypeError(f"{op}: '{name}' must hold numbers (+1 or -1); received {describe(y)}")
    if tuple(y.shape) != tuple(shape):
        raise ValueError(f"{op}: '{name}' must have shape {tuple(shape)} (one label per item); "
                         f"received shape {tuple(y.shape)}")
    return y.astype(like.dtype)


def margin_ranking(x1, x2, y, *, margin=0.0, reduction="mean"):
    """max(0, -y (x1 - x2) + margin) (torch's ``margin_ranking_loss``); x1, x2, y of one
    shape. Returns ``(loss, (dx1, dx2))``: dx1 = -y, dx2 = y where the hinge is >= 0."""
    op = "margin_ranking"
    xp, x1, x2 = pair(op, x1, x2, "x1", "x2")
    margin = number(op, "margin", margin)
    y = signs(op, y, x1.shape, x1)
    h = -y * (x1 - x2) + margin
    active = (h >= 0).astype(x1.dtype)
    return reduce(op, xp.maximum(h, 0), (-y * active, y * active), reduction)


def hinge_embedding(x, y, *, margin=1.0, reduction="mean"):
    """Hinge embedding (torch's ``hinge_embedding_loss``): x where y = 1, max(0, margin - x)
    where y = -1 (both terms for other labels, as torch); dx = [y != -1] - [y != 1]
    [margin - x >= 0]."""
    op = "hinge_embedding"
    x = float_array(op, "x", x)
    nonempty(op, "x", x)
    xp = array_module(x)
    margin = number(op, "margin", margin)
    y = signs(op, y, x.shape, x)
    own, hinge = (y != -1).astype(x.dtype), (y != 1).astype(x.dtype)
    h = margin - x
    values = own * x + hinge * xp.maximum(h, 0)
    return reduce(op, values, own - hinge * (h >= 0), reduction)


def cosine_embedding(x1, x2, y, *, margin=0.0, reduction="mean"):
    """Cosine embedding (torch's ``cosine_embedding_loss``): x1, x2 (N, D), y (N,);
    cos = x1.x2 / sqrt((|x1|^2 + 1e-12)(|x2|^2 + 1e-12)); loss = 1 - cos where y = 1,
    max(0, cos - margin) where y = -1. Returns ``(loss, (dx1, dx2))`` with
    dcos/dx1 = x2 / denom - cos x1 / (|x1|^2 + 1e-12) (and symmetrically)."""
    op = "cosine_embedding"
    xp, x1, x2 = pair(op, x1, x2, "x1", "x2")
    if x1.ndim != 2:
        raise ValueError(f"{op}: 'x1' and 'x2' must have shape (N, D); received shape "
                         f"{tuple(x1.shape)}")
    margin = number(op, "margin", margin, low=-1.0, high=1.0)
    y = signs(op, y, x1.shape[:1], x1)
    tiny = x1.dtype.type(1e-12)
    m1 = xp.sum(x1 * x1, axis=-1) + tiny
    m2 = xp.sum(x2 * x2, axis=-1) + tiny
    denom = xp.sqrt(m1 * m2)
    cos = xp.sum(x1 * x2, axis=-1) / denom
    pos, neg = (y == 1).astype(x1.dtype), (y == -1).astype(x1.dtype)
    values = pos * (1 - cos) + neg * xp.maximum(cos - margin, 0)
    dcos = (neg * (cos - margin >= 0) - pos)[:, None]
    dx1 = dcos * (x2 / denom[:, None] - (cos / m1)[:, None] * x1)
    dx2 = dcos * (x1 / denom[:, None] - (cos / m2)[:, None] * x2)
    return reduce(op, values, (dx1, dx2), reduction)


def _distance(xp, a, b, p, eps):
    """(||a - b + eps||_p per row, its gradient with respect to a)."""
    v = a - b + eps
    if p == 2.0:
        norm = xp.sqrt(xp.sum(v * v, axis=-1))
        return norm, v / norm[:, None]
    absv = xp.abs(v)
    norm = xp.sum(absv ** p, axis=-1) ** (1.0 / p)
    return norm, xp.sign(v) * absv ** (p - 1) / (norm ** (p - 1))[:, None]


def triplet_margin(anchor, positive, negative, *, margin=1.0, p=2.0, eps=1e-6, swap=False,
                   reduction="mean"):
    """Triplet margin (torch's ``triplet_margin_loss``): rows of (N, D);
    d(u, v) = ||u - v + eps||_p, loss = max(d(a, pos) - d(a, neg) + margin, 0) (with
    ``swap``, d(a, neg) is min(d(a, neg), d(pos, neg))). Returns
    ``(loss, (danchor, dpositive, dnegative))``; dd(u, v)/du = sign(w)|w|^(p-1)/d^(p-1)
    with w = u - v + eps, and -that for v."""
    op = "triplet_margin"
    xp, a, pos = pair(op, anchor, positive, "anchor", "positive")
    neg = float_array(op, "negative", negative)
    same_dtype(op, anchor=a, negative=neg)
    if a.ndim != 2 or neg.shape != a.shape:
        raise ValueError(f"{op}: 'anchor', 'positive' and 'negative' must have one shape "
                         f"(N, D); received {tuple(a.shape)} and {tuple(neg.shape)}")
    margin = number(op, "margin", margin, low=0.0, low_open=True)
    p = number(op, "p", p, low=0.0, low_open=True)
    eps = number(op, "eps", eps, low=0.0)
    d_pos, g_pos = _distance(xp, a, pos, p, eps)
    d_neg, g_neg = _distance(xp, a, neg, p, eps)
    swapped = xp.zeros(d_neg.shape, bool)
    g_swap = xp.zeros_like(g_neg)
    if flag(op, "swap", swap):
        d_swap, g_swap = _distance(xp, pos, neg, p, eps)
        swapped = d_swap < d_neg
        d_neg = xp.where(swapped, d_swap, d_neg)
    h = d_pos - d_neg + margin
    active = (h >= 0)[:, None].astype(a.dtype)
    keep = (~swapped)[:, None].astype(a.dtype)
    da = active * (g_pos - keep * g_neg)
    dpos = active * (-g_pos - (1 - keep) * g_swap)
    dneg = active * (keep * g_neg + (1 - keep) * g_swap)
    return reduce(op, xp.maximum(h, 0), (da, dpos, dneg), reduction)
