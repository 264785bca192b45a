"""Class labels as one-hot rows: Keras's ``keras.utils.to_categorical``."""

from __future__ import annotations

import numpy as np

from .._checks import describe, is_int


def to_categorical(y, num_classes=None, dtype="float32"):
    """Integer labels of shape S (a trailing axis of 1 is dropped, as Keras) as one-hot
    rows of shape S + (num_classes,); ``num_classes`` defaults to ``max(y) + 1``."""
    op = "to_categorical"
    labels = np.asarray(y)
    whole = labels.dtype.kind == "f" and bool(np.all(labels == np.round(labels)))
    if labels.dtype.kind not in "iu" and not whole:
        raise TypeError(f"{op}: 'y' must hold integer class labels; received {describe(y)}")
    labels = labels.astype(np.int64)
    if labels.ndim > 1 and labels.shape[-1] == 1:
        labels = labels[..., 0]
    if labels.size and labels.min() < 0:
        raise ValueError(f"{op}: 'y' labels must be >= 0; received {labels.min()}")
    largest = int(labels.max()) if labels.size else -1
    if num_classes is None:
        num_classes = largest + 1
    if not is_int(num_classes) or num_classes < 1 or largest >= num_classes:
        raise ValueError(f"{op}: 'num_classes' must be an int > every label (the largest is "
                         f"{largest}); received {describe(num_classes)}")
    return np.eye(num_classes, dtype=dtype)[labels]
