"""Loss functions: each returns ``(loss, dinput)`` with PyTorch's semantics.

``loss`` is a Python float for ``reduction="mean"`` or ``"sum"`` and an array of
per-element losses for ``"none"``; ``dinput`` is the gradient of the reduced loss
(for ``"none"``: of the sum of the per-element losses) with respect to the first
argument, in its dtype. ``"mean"`` divides by the number of loss elements.

Per element, with ``d = pred - target``, ``p = softmax(z)``, ``s = sigmoid(z)``::

    softmax_cross_entropy  -sum_c q_c log p_c          dz = p * sum_c q_c - q
        q = (1 - eps) * onehot(label) + eps / C   (class ids), or
        q = (1 - eps) * target + eps / C          (probability targets)
    binary_cross_entropy   -t log p - (1-t) log(1-p)   dp = (p - t) / (p (1 - p))
        (p probabilities; each log clamped at -100, the denominator at 1e-12, as torch)
    binary_cross_entropy_with_logits
                           softplus(z) - t z           dz = s - t
    mse                    d^2                         dpred = 2 d
    mae                    |d|                         dpred = sign(d)   (0 at d = 0)
    huber                  d^2 / 2 if |d| < delta      dpred = clip(d, -delta, delta)
                           else delta (|d| - delta / 2)
    smooth_l1              d^2 / (2 beta) if |d| < beta   dpred = clip(d / beta, -1, 1)
                           else |d| - beta / 2

``log p`` and ``softplus`` are evaluated without ``exp`` of a large positive
number, so logits of any finite size (e.g. +-1000) give finite results.

The names follow torch's: ``binary_cross_entropy`` takes probabilities in [0, 1] (it
refuses other values) and ``binary_cross_entropy_with_logits`` logits; the softmax
cross-entropies take logits. Keras's ``sparse_categorical_crossentropy`` (class ids) and
``categorical_crossentropy`` (one-hot targets) are the ``from_logits=True`` versions;
``binary_crossentropy`` takes probabilities unless ``from_logits=True`` (Keras's default).
``compile`` refuses a loss that takes logits on a model that ends with a ``Softmax`` or
``Sigmoid`` layer (:func:`takes_logits`). ``mean_squared_error``, ``mean_absolute_error``
and ``huber_loss`` are ``mse``, ``mae`` and ``huber`` (torch's ``HuberLoss``);
``smooth_l1`` is torch's ``SmoothL1Loss``, ``huber`` divided by ``beta = delta``.
"""

from __future__ import annotations

import numpy as np

from ._checks import array_module, choice, describe, float_array, same_dtype
from ._hyper import flag, number
from .ops import special

REDUCTIONS = ("mean", "sum", "none")


def _reduce(op, values, grad, reduction):
    """Apply ``reduction`` to per-element ``values``; ``grad`` is the gradient of their sum."""
    reduction = choice(op, "reduction", reduction, REDUCTIONS)
    if reduction == "none":
        return values, grad
    total = array_module(values).sum(values)
    if reduction == "sum":
        return float(total), grad
    count = values.size
    return float(total) / count, grad / count


def _nonempty(op, name, array):
    if array.size == 0:
        raise ValueError(f"{op}: '{name}' must not be empty; received shape {tuple(array.shape)}")


def _class_targets(op, xp, labels, logits):
    """One-hot targets (in ``logits``' dtype) from integer class ids of shape logits.shape[:-1]."""
    classes = logits.shape[-1]
    if tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise ValueError(
            f"{op}: integer 'labels' must have shape {tuple(logits.shape[:-1])} (the logits' "
            f"shape without the class axis); received shape {tuple(labels.shape)}"
        )
    bad = (labels < 0) | (labels >= classes)
    if bool(xp.any(bad)):
        index = tuple(int(i) for i in xp.argwhere(bad)[0])
        raise ValueError(
            f"{op}: 'labels' must be class ids in [0, {classes}); received label "
            f"{int(labels[index])} at index {index}"
        )
    return (labels[..., None] == xp.arange(classes)).astype(logits.dtype)


def _prob_targets(op, labels, logits):
    """Probability targets: a float array of ``logits``' shape and dtype."""
    same_dtype(op, logits=logits, labels=labels)
    if labels.shape != logits.shape:
        raise ValueError(
            f"{op}: probability 'labels' must have the logits' shape {tuple(logits.shape)}; "
            f"received shape {tuple(labels.shape)}"
        )
    return labels


def softmax_cross_entropy(logits, labels, *, label_smoothing=0.0, reduction="mean"):
    """Cross-entropy of softmax(logits) (PyTorch's ``F.cross_entropy``, classes last).

    logits (N, ..., C); labels integer class ids of shape (N, ...) or probability
    targets of shape (N, ..., C) in logits' dtype; label_smoothing in [0, 1] mixes the
    targets with the uniform distribution. Returns ``(loss, dlogits)`` with
    dlogits = softmax(logits) * sum(q) - q (divided by N * ... for ``"mean"``).
    """
    op = "softmax_cross_entropy"
    logits = float_array(op, "logits", logits)
    if logits.ndim < 2:
        raise ValueError(
            f"{op}: 'logits' must be an array of shape (N, C) or (N, ..., C); "
            f"received shape {tuple(logits.shape)}"
        )
    _nonempty(op, "logits", logits)
    eps = number(op, "label_smoothing", label_smoothing, low=0.0, high=1.0)
    xp = array_module(logits)
    if not (hasattr(labels, "dtype") and hasattr(labels, "shape")):
        labels = xp.asarray(labels)
    if labels.dtype.kind in "iu":
        targets = _class_targets(op, xp, labels, logits)
    elif labels.dtype.kind == "f":
        targets = _prob_targets(op, labels, logits)
    else:
        raise TypeError(
            f"{op}: 'labels' must be integer class ids or float probability targets; "
            f"received {describe(labels)}"
        )
    if eps > 0.0:
        targets = targets * (1.0 - eps) + eps / logits.shape[-1]
    log_p = special.log_softmax(xp, logits, -1)
    values = -xp.sum(targets * log_p, axis=-1)
    grad = xp.exp(log_p) * xp.sum(targets, axis=-1, keepdims=True) - targets
    return _reduce(op, values, grad, reduction)


def _pair(op, first, second, first_name, second_name):
    """Two float arrays of one shape and one dtype."""
    first = float_array(op, first_name, first)
    second = float_array(op, second_name, second)
    same_dtype(op, **{first_name: first, second_name: second})
    if first.shape != second.shape:
        raise ValueError(
            f"{op}: '{second_name}' must have the shape of '{first_name}' "
            f"{tuple(first.shape)}; received shape {tuple(second.shape)}"
        )
    _nonempty(op, first_name, first)
    return array_module(first, second), first, second


def _weights(op, name, value, like):
    """None, or a float array of ``like``'s dtype that broadcasts to ``like``'s shape."""
    if value is None:
        return None
    value = float_array(op, name, value)
    same_dtype(op, **{"input": like, name: value})
    try:
        shape = array_module(like).broadcast_shapes(value.shape, like.shape)
    except ValueError:
        shape = None
    if shape != like.shape:
        raise ValueError(f"{op}: '{name}' must broadcast to the input's shape "
                         f"{tuple(like.shape)}; received shape {tuple(value.shape)}")
    return value


def _weighted(op, values, grad, weight, reduction):
    """``_reduce`` of ``weight * values`` (gradient ``weight * grad``); no weight: as is."""
    if weight is not None:
        values, grad = values * weight, grad * weight
    return _reduce(op, values, grad, reduction)


#: torch's ``BCELoss`` clamps each log at -100 and its gradient's denominator at 1e-12
#: (a float32 constant, also in float64).
LOG_FLOOR = -100.0
BCE_GRAD_EPS = float(np.float32(1e-12))


def binary_cross_entropy(probabilities, targets, weight=None, *, reduction="mean"):
    """Binary cross-entropy of probabilities (PyTorch's ``F.binary_cross_entropy``).

    probabilities p in [0, 1] and targets t of one shape and dtype; ``weight`` (broadcast
    to that shape) scales each element. loss = -w (t max(log p, -100) + (1 - t)
    max(log(1 - p), -100)), dp = w (p - t) / max(p (1 - p), 1e-12) (torch's rule; the
    exact derivative away from 0 and 1). Logits belong to
    :func:`binary_cross_entropy_with_logits`.
    """
    op = "binary_cross_entropy"
    xp, p, t = _pair(op, probabilities, targets, "probabilities", "targets")
    outside = ~((p >= 0) & (p <= 1))
    if bool(xp.any(outside)):
        index = tuple(int(i) for i in xp.argwhere(outside)[0])
        raise ValueError(
            f"{op}: 'probabilities' must lie in [0, 1]; received {float(p[index])!r} at "
            f"index {index} (for logits, the model's raw outputs, use "
            f"'binary_cross_entropy_with_logits')")
    weight = _weights(op, "weight", weight, p)
    with xp.errstate(divide="ignore"):  # log(0) = -inf, clamped at -100 as torch does
        log_p = xp.maximum(xp.log(p), LOG_FLOOR)
        log_q = xp.maximum(xp.log1p(-p), LOG_FLOOR)
    values = -(t * log_p + (1 - t) * log_q)
    grad = (p - t) / xp.maximum(p * (1 - p), p.dtype.type(BCE_GRAD_EPS))
    return _weighted(op, values, grad, weight, reduction)


def binary_cross_entropy_with_logits(logits, targets, weight=None, pos_weight=None, *,
                                     reduction="mean"):
    """Binary cross-entropy from logits (PyTorch's ``binary_cross_entropy_with_logits``).

    logits z and targets t of one shape and dtype; ``weight`` w and ``pos_weight`` r (each
    broadcast to that shape; r is typically one value per class, the last axis) give
    loss = w (r t softplus(-z) + (1 - t) softplus(z)) = w ((1 - t) z + l softplus(-z))
    with l = 1 + (r - 1) t, and dz = w (l sigmoid(z) - r t); without r: softplus(z) - t z
    and sigmoid(z) - t.
    """
    op = "binary_cross_entropy_with_logits"
    xp, z, t = _pair(op, logits, targets, "logits", "targets")
    weight = _weights(op, "weight", weight, z)
    pos_weight = _weights(op, "pos_weight", pos_weight, z)
    if pos_weight is None:
        values = special.softplus(xp, z) - t * z
        grad = special.sigmoid(xp, z) - t
    else:
        scale = 1 + (pos_weight - 1) * t
        values = (1 - t) * z + scale * special.softplus(xp, -z)
        grad = scale * special.sigmoid(xp, z) - pos_weight * t
    return _weighted(op, values, grad, weight, reduction)


def binary_crossentropy(pred, targets, *, from_logits=False, reduction="mean"):
    """Keras's name: :func:`binary_cross_entropy` of probabilities, or with
    ``from_logits=True`` :func:`binary_cross_entropy_with_logits` (Keras's default is
    probabilities, as here)."""
    if flag("binary_crossentropy", "from_logits", from_logits):
        return binary_cross_entropy_with_logits(pred, targets, reduction=reduction)
    return binary_cross_entropy(pred, targets, reduction=reduction)


def mse(pred, target, *, reduction="mean"):
    """Squared error (pred - target)^2; dpred = 2 (pred - target)."""
    op = "mse"
    _, pred, target = _pair(op, pred, target, "pred", "target")
    d = pred - target
    return _reduce(op, d * d, 2.0 * d, reduction)


def mae(pred, target, *, reduction="mean"):
    """Absolute error |pred - target| (L1); dpred = sign(pred - target), 0 where equal."""
    op = "mae"
    xp, pred, target = _pair(op, pred, target, "pred", "target")
    d = pred - target
    return _reduce(op, xp.abs(d), xp.sign(d), reduction)


def huber(pred, target, *, delta=1.0, reduction="mean"):
    """Huber loss: d^2 / 2 where |d| < delta, else delta (|d| - delta / 2);
    dpred = clip(d, -delta, delta). delta > 0."""
    op = "huber"
    delta = number(op, "delta", delta, low=0.0, low_open=True)
    xp, pred, target = _pair(op, pred, target, "pred", "target")
    d = pred - target
    ad = xp.abs(d)
    values = xp.where(ad < delta, 0.5 * d * d, delta * (ad - 0.5 * delta))
    return _reduce(op, values, xp.clip(d, -delta, delta), reduction)


def smooth_l1(pred, target, *, beta=1.0, reduction="mean"):
    """Smooth L1 (PyTorch's ``SmoothL1Loss``): d^2 / (2 beta) where |d| < beta, else
    |d| - beta / 2; dpred = d / beta where |d| < beta, else sign(d). beta >= 0 (0 is
    L1); for beta > 0 it is huber(delta=beta) / beta."""
    op = "smooth_l1"
    beta = number(op, "beta", beta, low=0.0)
    xp, pred, target = _pair(op, pred, target, "pred", "target")
    d = pred - target
    if beta == 0.0:
        return _reduce(op, xp.abs(d), xp.sign(d), reduction)
    ad = xp.abs(d)
    inside = ad < beta
    values = xp.where(inside, 0.5 * d * d / beta, ad - 0.5 * beta)
    return _reduce(op, values, xp.where(inside, d / beta, xp.sign(d)), reduction)


def _labels_array(logits, labels):
    xp = array_module(logits)
    return labels if hasattr(labels, "dtype") and hasattr(labels, "shape") else xp.asarray(labels)


def sparse_categorical_crossentropy(logits, labels, *, label_smoothing=0.0, reduction="mean"):
    """Keras's name: :func:`softmax_cross_entropy` from logits with integer class ids of
    shape (N, ...) or (N, ..., 1)."""
    op = "sparse_categorical_crossentropy"
    logits = float_array(op, "logits", logits)
    labels = _labels_array(logits, labels)
    if labels.dtype.kind not in "iu":
        raise TypeError(f"{op}: 'labels' must be integer class ids; received {describe(labels)}"
                        f" (for one-hot targets use 'categorical_crossentropy')")
    if logits.ndim >= 1 and tuple(labels.shape) == (*logits.shape[:-1], 1):
        labels = labels[..., 0]
    return softmax_cross_entropy(logits, labels, label_smoothing=label_smoothing,
                                 reduction=reduction)


def categorical_crossentropy(logits, labels, *, label_smoothing=0.0, reduction="mean"):
    """Keras's name: :func:`softmax_cross_entropy` from logits with one-hot (or probability)
    targets of the logits' shape; integer or bool one-hot targets are exact in any dtype
    and are taken in the logits' dtype."""
    op = "categorical_crossentropy"
    logits = float_array(op, "logits", logits)
    labels = _labels_array(logits, labels)
    if tuple(labels.shape) != tuple(logits.shape):
        raise ValueError(f"{op}: 'labels' must be one-hot targets of the logits' shape "
                         f"{tuple(logits.shape)}; received {describe(labels)} (for class ids "
                         f"use 'sparse_categorical_crossentropy')")
    if labels.dtype.kind in "biu":
        labels = labels.astype(logits.dtype)
    return softmax_cross_entropy(logits, labels, label_smoothing=label_smoothing,
                                 reduction=reduction)


#: Losses that take logits: a model that ends with a softmax or sigmoid is refused.
LOGIT_LOSSES = (softmax_cross_entropy, sparse_categorical_crossentropy,
                categorical_crossentropy, binary_cross_entropy_with_logits)


def takes_logits(loss) -> bool:
    """Whether ``loss`` (a function from :data:`LOSSES` or a ``functools.partial`` of
    one) takes logits: one of :data:`LOGIT_LOSSES`, or ``binary_crossentropy`` with
    ``from_logits=True``."""
    keywords = getattr(loss, "keywords", None) or {}
    loss = getattr(loss, "func", loss)
    return loss in LOGIT_LOSSES or (loss is binary_crossentropy
                                    and keywords.get("from_logits") is True)

LOSSES = {
    "cross_entropy": softmax_cross_entropy,
    "softmax_cross_entropy": softmax_cross_entropy,
    "sparse_categorical_crossentropy": sparse_categorical_crossentropy,
    "categorical_crossentropy": categorical_crossentropy,
    "binary_cross_entropy": binary_cross_entropy,
    "binary_cross_entropy_with_logits": binary_cross_entropy_with_logits,
    "binary_crossentropy": binary_crossentropy,
    "mse": mse,
    "mean_squared_error": mse,
    "mae": mae,
    "mean_absolute_error": mae,
    "huber": huber,
    "huber_loss": huber,
    "smooth_l1": smooth_l1,
    "smooth_l1_loss": smooth_l1,
}


def get(name_or_callable):
    """The loss function for a name in ``LOSSES`` (case-insensitive), or a callable as is."""
    if callable(name_or_callable):
        return name_or_callable
    if not isinstance(name_or_callable, str):
        raise TypeError(
            f"get: 'name_or_callable' must be a loss name or a callable; "
            f"received {describe(name_or_callable)}"
        )
    loss = LOSSES.get(name_or_callable.lower())
    if loss is None:
        valid = ", ".join(repr(name) for name in LOSSES)
        raise ValueError(f"get: unknown loss {name_or_callable!r}; valid names are {valid}")
    return loss

