"""Metrics for ``compile(metrics=[...])``: ``metric(pred, y) -> float`` on one batch.

``pred`` is the model's output: logits (handgrad models end without a softmax or a
sigmoid, see :mod:`handgrad.losses`). Keras's names are accepted and the logs keep the
name the user gave (``metrics=["acc"]`` logs ``acc`` and ``val_acc``):

    accuracy, acc                chosen from the output's loss, as Keras does: binary
        accuracy (per output) for ``binary_cross_entropy``, categorical accuracy (arg-max)
        for the softmax cross-entropies; refused for any other loss (mse, a callable, no
        loss), where it would be a guess: name the metric
    sparse_categorical_accuracy, categorical_accuracy
        arg-max of the logits == the class id (targets: ids ``(N, ...)`` or
        ``(N, ..., 1)``, or one-hot ``(N, ..., C)``); with one logit (C == 1):
        ``logit > 0`` == ``target > 0.5``
    binary_accuracy              elementwise ``logit > 0`` == ``target > 0.5`` (with a loss
                                 of probabilities or an output ending in a sigmoid or a
                                 softmax: ``probability > 0.5``)
    mae, mean_absolute_error     mean |pred - y|
    mse, mean_squared_error      mean (pred - y)^2

:func:`confusion_counts` tabulates true against predicted classes for reports.
"""

from __future__ import annotations

import functools

from .. import losses
from .._checks import array_module, describe


def _shape(value):
    return tuple(getattr(value, "shape", ()))


def _targets(op, pred, y, shapes, expected):
    if not hasattr(y, "shape") or _shape(y) not in shapes:
        raise ValueError(f"{op}: 'y' must have shape {expected} for outputs of shape "
                         f"{_shape(pred)}; received {describe(y)}")
    return y.reshape(shapes[0])


def accuracy(pred, y):
    """Fraction of rows whose arg-max matches the class id (or the one-hot arg-max);
    with a single logit, whose ``logit > 0`` matches ``y > 0.5``."""
    xp, shape = array_module(pred), _shape(pred)
    if shape[-1] == 1:
        y = _targets("accuracy", pred, y, (shape, shape[:-1]), f"{shape} or {shape[:-1]}")
        return float(xp.mean((pred > 0) == (y > 0.5)))
    ids, one_hot, column = shape[:-1], shape, (*shape[:-1], 1)
    if _shape(y) == one_hot:
        y = xp.argmax(y, axis=-1)
    else:
        y = _targets("accuracy", pred, y, (ids, column),
                     f"{ids} or {column} (class ids) or {one_hot} (one-hot)")
    return float(xp.mean(xp.argmax(pred, axis=-1) == y))


def binary_accuracy(pred, y, threshold=0.0):
    """Fraction of entries whose ``pred > threshold`` matches ``y > 0.5`` (multi-label):
    ``threshold`` 0 for logits, 0.5 for probabilities."""
    y = _targets("binary_accuracy", pred, y, (_shape(pred),), str(_shape(pred)))
    return float(array_module(pred).mean((pred > threshold) == (y > 0.5)))


#: binary accuracy of probabilities (a Sigmoid-ended model, a probability loss)
probability_accuracy = functools.partial(binary_accuracy, threshold=0.5)


def mean_absolute_error(pred, y):
    """mean |pred - y|."""
    y = _targets("mean_absolute_error", pred, y, (_shape(pred),), str(_shape(pred)))
    return float(array_module(pred).mean(abs(pred - y)))


def mean_squared_error(pred, y):
    """mean (pred - y)^2."""
    y = _targets("mean_squared_error", pred, y, (_shape(pred),), str(_shape(pred)))
    d = pred - y
    return float(array_module(pred).mean(d * d))


METRICS = {
    "accuracy": accuracy,
    "acc": accuracy,
    "sparse_categorical_accuracy": accuracy,
    "categorical_accuracy": accuracy,
    "binary_accuracy": binary_accuracy,
    "mae": mean_absolute_error,
    "mean_absolute_error": mean_absolute_error,
    "mse": mean_squared_error,
    "mean_squared_error": mean_squared_error,
}


#: The names whose meaning depends on the loss (see :func:`accuracy_for`).
ACCURACY_NAMES = ("accuracy", "acc")
_ARGMAX_LOSSES = (losses.softmax_cross_entropy, losses.sparse_categorical_crossentropy,
                  losses.categorical_crossentropy, losses.nll_loss, losses.multi_margin)
_BINARY_LOSSES = (losses.binary_cross_entropy, losses.binary_cross_entropy_with_logits,
                  losses.binary_crossentropy, losses.multilabel_soft_margin)


def accuracy_for(loss):
    """The accuracy that ``"accuracy"`` means for ``loss`` (a loss function or None):
    :func:`binary_accuracy` for binary cross-entropy (one decision per output, multi-label;
    ``logit > 0`` for a logits loss, ``probability > 0.5`` for a probability loss),
    :func:`accuracy` (arg-max) for the softmax cross-entropies and ``nll_loss``, None where
    it is ambiguous.
    A ``functools.partial`` of a loss (e.g. with ``label_smoothing``) counts as that loss."""
    base = loss
    while isinstance(base, functools.partial):
        base = base.func
    if base in _BINARY_LOSSES:
        return binary_accuracy if losses.takes_logits(loss) else probability_accuracy
    return accuracy if base in _ARGMAX_LOSSES else None


def get(op, metrics, loss=None, *, loss_name=None, objects=None):
    """``{name: metric}`` for a list of metric names (the names are kept as given);
    ``"accuracy"``/``"acc"`` are chosen from ``loss`` (:func:`accuracy_for`) and refused
    where it leaves them ambiguous (``loss_name`` names the loss in that message).
    ``objects(entry) -> (name, metric) or None`` resolves the entries that are not names
    of :data:`METRICS` (streaming metrics, callables; see :mod:`handgrad.metrics.streaming`)."""
    if isinstance(metrics, str) or not isinstance(metrics, (list, tuple)):
        raise TypeError(f"{op}: 'metrics' must be a list of metric names, e.g. "
                        f"['accuracy']; received {describe(metrics)}")
    resolved = {}
    for name in metrics:
        found = None if objects is None else objects(name)
        if found is not None:
            key, metric = found
            if key in resolved:
                raise ValueError(f"{op}: two metrics are named {key!r}; give one another "
                                 f"name (name=...)")
            resolved[key] = metric
            continue
        if not isinstance(name, str) or name.lower() not in METRICS:
            raise ValueError(f"{op}: 'metrics' entries must be one of {sorted(METRICS)}, a "
                             f"metric object (handgrad.metrics) or a callable (y_true, "
                             f"y_pred); received {name!r}")
        resolved[name] = METRICS[name.lower()]
        if name.lower() == "binary_accuracy" and accuracy_for(loss) is probability_accuracy:
            resolved[name] = probability_accuracy  # the loss takes probabilities
        if name.lower() in ACCURACY_NAMES:
            resolved[name] = accuracy_for(loss)
            if resolved[name] is None:
                given = "no loss" if loss is None else f"loss {loss_name!r}"
                raise ValueError(
                    f"{op}: metric {name!r} is ambiguous with {given} (it is chosen from a "
                    f"cross-entropy loss); name the metric: 'binary_accuracy' (logit > 0 "
                    f"== target > 0.5, per output), 'categorical_accuracy' (arg-max), or "
                    f"'mae'/'mse' for a regression")
    return resolved
