"""The confusion matrix of class labels (``MeanIoU`` and the CLI's report use it)."""

from __future__ import annotations

import numpy as np

from .._checks import describe, is_int


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
