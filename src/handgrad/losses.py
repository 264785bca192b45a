"""Loss functions: each returns ``(loss, dinput)`` with PyTorch's semantics.

``loss`` is a Python float for ``reduction="mean"`` or ``"sum"`` and an array of
per-element losses for ``"none"``; ``dinput`` is the gradient of the reduced loss
(for ``"none"``: of the sum of the per-element losses) with respect to the first
argument, in its dtype. ``"mean"`` divides by the number of loss elements.

Per element, with ``d = pred - target``, ``p = softmax(z)``, ``s = sigmoid(z)``::

    softmax_cross_entropy  -sum_c q_c log p_c          dz = p * sum_c q_c - q
        q = (1 - eps) * onehot(label) + eps / C   (class ids), or
        q = (1 - eps) * target + eps / C          (probability targets)
    binary_cross_entropy   softplus(z) - t z           dz = s - t
    mse                    d^2                         dpred = 2 d
    mae                    |d|                         dpred = sign(d)   (0 at d = 0)
    huber                  d^2 / 2 if |d| < delta      dpred = clip(d, -delta, delta)
                           else delta (|d| - delta / 2)

``log p`` and ``softplus`` are evaluated without ``exp`` of a large positive
number, so logits of any finite size (e.g. +-1000) give finite results.

The cross-entropy losses take logits (the model's raw outputs), never probabilities.
Keras's names are aliases of the ``from_logits=True`` versions:
``sparse_categorical_crossentropy`` (class ids), ``categorical_crossentropy`` (one-hot
targets), ``binary_crossentropy``; ``compile`` refuses them on a model that ends with a
``Softmax`` or ``Sigmoid`` layer. ``mean_squared_error``, ``mean_absolute_error`` and
``huber_loss`` are ``mse``, ``mae`` and ``huber``.
"""

from __future__ import annotations

from ._checks import array_module, choice, describe, float_array, same_dtype
from ._hyper import number
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


def binary_cross_entropy(logits, targets, *, reduction="mean"):
    """Binary cross-entropy from logits (PyTorch's ``binary_cross_entropy_with_logits``).

    logits and targets of one shape and dtype; loss = softplus(z) - t z per element,
    dlogits = sigmoid(z) - t.
    """
    op = "binary_cross_entropy"
    xp, z, t = _pair(op, logits, targets, "logits", "targets")
    values = special.softplus(xp, z) - t * z
    return _reduce(op, values, special.sigmoid(xp, z) - t, reduction)


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
                categorical_crossentropy, binary_cross_entropy)

LOSSES = {
    "cross_entropy": softmax_cross_entropy,
    "softmax_cross_entropy": softmax_cross_entropy,
    "sparse_categorical_crossentropy": sparse_categorical_crossentropy,
    "categorical_crossentropy": categorical_crossentropy,
    "binary_cross_entropy": binary_cross_entropy,
    "binary_crossentropy": binary_cross_entropy,
    "mse": mse,
    "mean_squared_error": mse,
    "mae": mae,
    "mean_absolute_error": mae,
    "huber": huber,
    "huber_loss": huber,
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

