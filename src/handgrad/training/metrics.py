"""Metrics for ``compile(metrics=[...])``: ``metric(pred, y) -> float`` on one batch.

``pred`` is the model's output: logits (handgrad models end without a softmax or a
sigmoid, see :mod:`handgrad.losses`). Keras's names are accepted and the logs keep the
name the user gave (``metrics=["acc"]`` logs ``acc`` and ``val_acc``):

    accuracy, acc, sparse_categorical_accuracy, categorical_accuracy
        arg-max of the logits == the class id (targets: ids ``(N, ...)`` or
        ``(N, ..., 1)``, or one-hot ``(N, ..., C)``); with one logit (C == 1):
        ``logit > 0`` == ``target > 0.5``
    binary_accuracy              elementwise ``logit > 0`` == ``target > 0.5``
    mae, mean_absolute_error     mean |pred - y|
    mse, mean_squared_error      mean (pred - y)^2

:func:`confusion_counts` tabulates true against predicted classes for reports.
"""

from __future__ import annotations

import numpy as np

from .._checks import array_module, describe, is_int


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


def binary_accuracy(pred, y):
    """Fraction of entries whose ``logit > 0`` matches ``y > 0.5`` (multi-label)."""
    y = _targets("binary_accuracy", pred, y, (_shape(pred),), str(_shape(pred)))
    return float(array_module(pred).mean((pred > 0) == (y > 0.5)))


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


def get(op, metrics):
    """``{name: metric}`` for a list of metric names (the names are kept as given)."""
    if isinstance(metrics, str) or not isinstance(metrics, (list, tuple)):
        raise TypeError(f"{op}: 'metrics' must be a list of metric names, e.g. "
                        f"['accuracy']; received {describe(metrics)}")
    resolved = {}
    for name in metrics:
        if not isinstance(name, str) or name.lower() not in METRICS:
            raise ValueError(f"{op}: 'metrics' entries must be one of {sorted(METRICS)}; "
                             f"received {name!r}")
        resolved[name] = METRICS[name.lower()]
    return resolved


def confusion_counts(y_true, y_pred, num_classes) -> np.ndarray:
    """(num_classes, num_classes) int64 counts, rows = true class, columns = predicted.

    ``y_pred`` holds labels (N,) or scores (N, num_classes), whose arg-max is taken."""
    op = "confusion_counts"
    if not is_int(num_classes) or num_classes < 1:
        raise ValueError(f"{op}: 'num_classes' must be an int >= 1; received "
                         f"{describe(num_classes)}")
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    if y_pred.ndim == 2:
        y_pred = np.argmax(y_pred, axis=-1)
    for name, labels in (("y_true", y_true), ("y_pred", y_pred)):
        if labels.ndim != 1 or labels.dtype.kind not in "iu":
            raise TypeError(f"{op}: '{name}' must be a 1-D array of integer labels; received "
                            f"{describe(labels)}")
        if labels.size and (labels.min() < 0 or labels.max() >= num_classes):
            raise ValueError(f"{op}: '{name}' labels must lie in [0, {num_classes}); "
                             f"received values in [{labels.min()}, {labels.max()}]")
    if len(y_true) != len(y_pred):
        raise ValueError(f"{op}: 'y_true' and 'y_pred' must have the same length; received "
                         f"{len(y_true)} and {len(y_pred)}")
    flat = y_true.astype(np.int64) * num_classes + y_pred
    return np.bincount(flat, minlength=num_classes ** 2).reshape(num_classes, num_classes)
