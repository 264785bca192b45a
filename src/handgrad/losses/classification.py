"""Softmax cross-entropy, negative log-likelihood and the fused linear cross-entropy
(classes on the last axis: torch's (N, C, ...) is (N, ..., C) here)."""

from __future__ import annotations

from .._checks import array_module, describe, float_array, is_int, same_dtype
from .._hyper import number
from ..ops import special
from ._common import class_weight, first_index, labels_array, nonempty, reduce


def _ignore_index(op, value):
    if not is_int(value):
        raise TypeError(f"{op}: 'ignore_index' must be an integer class id; "
                        f"received {describe(value)}")
    return int(value)


def _scores(op, name, scores):
    scores = float_array(op, name, scores)
    if scores.ndim < 2:
        raise ValueError(f"{op}: '{name}' must be an array of shape (N, C) or (N, ..., C); "
                         f"received shape {tuple(scores.shape)}")
    nonempty(op, name, scores)
    return scores


def _class_targets(op, xp, labels, scores, ignore_index, name):
    """(one-hot targets in ``scores``' dtype, zero rows where ignored; the kept mask)."""
    classes = scores.shape[-1]
    if tuple(labels.shape) != tuple(scores.shape[:-1]):
        raise ValueError(
            f"{op}: integer 'labels' must have shape {tuple(scores.shape[:-1])} (the {name}' "
            f"shape without the class axis); received shape {tuple(labels.shape)}")
    kept = labels != ignore_index
    index = first_index(xp, kept & ((labels < 0) | (labels >= classes)))
    if index is not None:
        raise ValueError(
            f"{op}: 'labels' must be class ids in [0, {classes}); received label "
            f"{int(labels[index])} at index {index} (labels equal to ignore_index="
            f"{ignore_index} are skipped)")
    onehot = (labels[..., None] == xp.arange(classes)) & kept[..., None]
    return onehot.astype(scores.dtype), kept


def _targets(op, xp, labels, scores, weight, ignore_index, eps, name="logits"):
    """Per-class target weights q (N, ..., C) and the divisor of ``"mean"``.

    Class ids: q = w_c ((1 - eps) onehot + eps / C) on kept rows, 0 on ignored ones; the
    mean divides by sum of w[label] over kept rows (their count without weight).
    Probabilities t: q = w_c ((1 - eps) t + eps / C); the mean divides by N * ...
    """
    labels = labels_array(scores, labels)
    classes = scores.shape[-1]
    if labels.dtype.kind in "iu":
        onehot, kept = _class_targets(op, xp, labels, scores, ignore_index, name)
        q = onehot * (1.0 - eps) + kept[..., None].astype(scores.dtype) * (eps / classes) \
            if eps > 0.0 else onehot
        if weight is None:
            return q, xp.sum(kept)
        return q * weight, xp.sum(onehot * weight)
    if labels.dtype.kind != "f":
        raise TypeError(f"{op}: 'labels' must be integer class ids or float probability "
                        f"targets; received {describe(labels)}")
    if ignore_index >= 0:
        raise ValueError(f"{op}: 'ignore_index' does not apply to probability targets (a "
                         f"class id {ignore_index} was given); pass integer class ids")
    same_dtype(op, **{name: scores, "labels": labels})
    if labels.shape != scores.shape:
        raise ValueError(f"{op}: probability 'labels' must have the {name}' shape "
                         f"{tuple(scores.shape)}; received shape {tuple(labels.shape)}")
    q = labels * (1.0 - eps) + eps / classes if eps > 0.0 else labels
    return (q if weight is None else q * weight), None


def softmax_cross_entropy(logits, labels, *, weight=None, ignore_index=-100,
                          label_smoothing=0.0, reduction="mean"):
    """Cross-entropy of softmax(logits) (PyTorch's ``F.cross_entropy``, classes last).

    logits (N, ..., C); labels integer class ids (N, ...) or probability targets
    (N, ..., C) in logits' dtype; ``weight`` (C,) scales each class; labels equal to
    ``ignore_index`` add nothing; label_smoothing eps in [0, 1] mixes the targets with the
    uniform distribution. With q the weighted targets (see ``_targets``):
    loss = -sum_c q_c log p_c, dlogits = p sum_c q_c - q; ``"mean"`` divides by the total
    weight of the kept labels (class ids) or by N * ... (probabilities), as torch.
    """
    op = "softmax_cross_entropy"
    logits = _scores(op, "logits", logits)
    eps = number(op, "label_smoothing", label_smoothing, low=0.0, high=1.0)
    weight = class_weight(op, weight, logits)
    ignore_index = _ignore_index(op, ignore_index)
    xp = array_module(logits)
    q, divisor = _targets(op, xp, labels, logits, weight, ignore_index, eps)
    log_p = special.log_softmax(xp, logits, -1)
    values = -xp.sum(q * log_p, axis=-1)
    grad = xp.exp(log_p) * xp.sum(q, axis=-1, keepdims=True) - q
    return reduce(op, values, grad, reduction, divisor)


def nll_loss(log_probs, labels, weight=None, ignore_index=-100, *, reduction="mean"):
    """Negative log-likelihood (PyTorch's ``F.nll_loss``, classes last).

    log_probs (N, ..., C) (e.g. a LogSoftmax's output), labels class ids (N, ...);
    loss = -w[y] log_probs[y], dlog_probs = -w[y] at the label's class (0 elsewhere and on
    rows whose label is ``ignore_index``); ``"mean"`` divides by the sum of w[y] over the
    kept rows.
    """
    op = "nll_loss"
    log_probs = _scores(op, "log_probs", log_probs)
    weight = class_weight(op, weight, log_probs)
    ignore_index = _ignore_index(op, ignore_index)
    xp = array_module(log_probs)
    labels = labels_array(log_probs, labels)
    if labels.dtype.kind not in "iu":
        raise TypeError(f"{op}: 'labels' must be integer class ids; received {describe(labels)}")
    q, divisor = _targets(op, xp, labels, log_probs, weight, ignore_index, 0.0,
                           "log_probs")
    return reduce(op, -xp.sum(q * log_probs, axis=-1), -q, reduction, divisor)


def linear_cross_entropy(inputs, linear_weight, labels, *, linear_bias=None, weight=None,
                         ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    """Cross-entropy of a linear layer's logits (PyTorch's ``F.linear_cross_entropy``).

    inputs x (N, ..., D), linear_weight W (C, D) or, with K class axes' positions,
    (C, d1, ..., dK, D) (torch's K-dimensional loss), linear_bias b of W's shape without
    D, or None. The logits z = x W^T + b, with W read as (C d1...dK, D), are
    (N, ..., d1, ..., dK, C) with classes last (torch's (N, C, d1, ..., dK) after a move
    of the class axis) and go to :func:`softmax_cross_entropy`: labels are class ids
    (N, ..., d1, ..., dK) or probabilities of the logits' shape. Returns
    ``(loss, (dx, dW, db))`` with dz the cross-entropy's gradient read back as
    (M, C d1...dK): dx = dz W, dW = dz^T x (summed over N, ...), db = sum dz (None
    without a bias), in W's and b's shapes.
    """
    op = "linear_cross_entropy"
    x = _scores(op, "inputs", inputs)
    w = float_array(op, "linear_weight", linear_weight)
    same_dtype(op, inputs=x, linear_weight=w)
    if w.ndim < 2 or w.shape[-1] != x.shape[-1]:
        raise ValueError(f"{op}: 'linear_weight' must have shape (C, {x.shape[-1]}) or "
                         f"(C, d1, ..., dK, {x.shape[-1]}) (one row per class and position, "
                         f"the inputs' features); received shape {tuple(w.shape)}")
    xp, classes, lead = array_module(x), w.shape[:-1], x.shape[:-1]
    w_flat = w.reshape(-1, w.shape[-1])
    logits = x @ w_flat.T
    if linear_bias is not None:
        b = float_array(op, "linear_bias", linear_bias)
        same_dtype(op, inputs=x, linear_bias=b)
        if b.shape != classes:
            raise ValueError(f"{op}: 'linear_bias' must have shape {classes} (linear_weight's "
                             f"without the features); received shape {tuple(b.shape)}")
        logits = logits + b.reshape(-1)
    logits = logits.reshape(lead + classes)
    logits = xp.moveaxis(logits, len(lead), -1)
    loss, dz = softmax_cross_entropy(logits, labels, weight=weight, ignore_index=ignore_index,
                                     label_smoothing=label_smoothing, reduction=reduction)
    dz = xp.moveaxis(dz, -1, len(lead)).reshape(lead + (-1,))
    dz_flat, x_flat = dz.reshape(-1, dz.shape[-1]), x.reshape(-1, x.shape[-1])
    dw = (dz_flat.T @ x_flat).reshape(w.shape)
    db = None if linear_bias is None else dz_flat.sum(axis=0).reshape(classes)
    return loss, (dz @ w_flat, dw, db)
