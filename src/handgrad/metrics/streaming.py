"""Streaming metrics, as Keras accumulates them: a state of counts added up batch by
batch (``update_state``), the figure computed once from the counts (``result``), the
state set to zeros at the start of every epoch and of every ``evaluate``.

``compile(metrics=[...])`` takes these objects, their Keras names (``"precision"``,
``"recall"``, ``"auc"``, ``"top_k_categorical_accuracy"``,
``"sparse_top_k_categorical_accuracy"``) and any callable ``metric(y_true, y_pred)``
(Keras's argument order), which :class:`MeanMetricWrapper` averages over the examples as
Keras does. The logs name each metric by its ``name`` (``precision``, ``val_auc``); the
batch logs hold the running figure since the epoch began.

**What the metrics read.** Keras's Precision, Recall, AUC and BinaryAccuracy threshold
*probabilities*. ``compile`` gives them probabilities: when the output's loss takes
logits it applies the sigmoid (binary cross-entropy with logits) or the softmax (the
softmax cross-entropies) first, so ``Precision()`` on a logits model means
``sigmoid(logit) > 0.5``. Targets are read as Keras reads them: ``y_true != 0`` is a
positive, and they must have the predictions' shape (one-hot for a softmax output).
The top-k accuracies rank the raw scores (a softmax keeps the order); MeanIoU takes the
arg-max of scores ``(N, ..., C)`` or labels of the targets' shape; a callable gets the
model's output as it is.

**Under MPI** (``distributed=True``) each process adds the counts of its share; the logs
come from the sum of every process's counts (:meth:`Metric.merged`), never from an
average of the processes' figures.
"""

from __future__ import annotations

import numpy as np

from .._checks import describe, is_int
from .confusion import confusion_counts


def _float_array(op, arg, value):
    array = np.asarray(value)
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{op}: '{arg}' must be a numeric array; received {describe(value)}")
    return array.astype(np.float64)


def same_shape(op, y_true, y_pred):
    """Both as float64 arrays of one shape (a ValueError naming both shapes otherwise)."""
    y_true, y_pred = _float_array(op, "y_true", y_true), _float_array(op, "y_pred", y_pred)
    if y_true.shape != y_pred.shape:
        raise ValueError(f"{op}: 'y_true' must have the shape of 'y_pred' {y_pred.shape} (one "
                         f"column per output, one-hot for a softmax output); received "
                         f"shape {y_true.shape}")
    return y_true, y_pred


def probabilities(op, y_pred):
    """``y_pred`` checked to lie in [0, 1] (Keras thresholds probabilities)."""
    if y_pred.size and (np.isnan(y_pred).any() or y_pred.min() < 0 or y_pred.max() > 1):
        raise ValueError(f"{op}: 'y_pred' must hold probabilities in [0, 1]; received values "
                         f"in [{y_pred.min()}, {y_pred.max()}]")
    return y_pred


def threshold_value(op, arg, value):
    """A float in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) or \
            not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{op}: '{arg}' must be a number in [0, 1]; received {value!r}")
    return float(value)


def positive(op, arg, value, low=1):
    if not is_int(value) or value < low:
        raise ValueError(f"{op}: '{arg}' must be an int >= {low}; received {value!r}")
    return int(value)


def ratio(num, den) -> float:
    """``num / den``, 0 where ``den`` is 0 (Keras's divide_no_nan)."""
    return float(num / den) if den else 0.0


class Metric:
    """A streaming metric: ``update_state(y_true, y_pred)`` adds a batch's counts,
    ``result()`` is the figure of every batch since ``reset_state()``. ``reads`` says
    what ``compile`` hands it: ``"probabilities"`` (the loss's sigmoid or softmax of
    logits) or ``"scores"`` (the output as it is)."""

    name = "metric"
    reads = "scores"

    def __init__(self, name=None):
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{type(self).__name__}: 'name' must be a str; received "
                            f"{describe(name)}")
        self.name = name or type(self).name
        self.reset_state()

    def zeros(self) -> list:
        """The empty state: a list of float64 arrays."""
        return [np.zeros(2)]

    def counts(self, y_true, y_pred) -> list:
        """The state of one batch (arrays shaped as :meth:`zeros`)."""
        raise NotImplementedError

    def figure(self, state) -> float:
        """The metric of a state."""
        raise NotImplementedError

    def reset_state(self):
        self.state = self.zeros()

    def update_state(self, y_true, y_pred):
        for total, part in zip(self.state, self.counts(y_true, y_pred)):
            total += part

    def result(self) -> float:
        return self.figure(self.state)

    @staticmethod
    def merged(states) -> list:
        """The elementwise sum of several states (one per process), in the given order."""
        return [sum(parts[1:], parts[0].copy()) for parts in zip(*states)]

    def get_config(self) -> dict:
        return {"name": self.name}

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({args})"


class MeanMetricWrapper(Metric):
    """Keras's MeanMetricWrapper: ``fn(y_true, y_pred)`` per batch (a number, or one value
    per example), averaged over every example since the reset. State: ``[sum, count]``."""

    def __init__(self, fn, name=None):
        if not callable(fn):
            raise TypeError(f"MeanMetricWrapper: 'fn' must be a callable (y_true, y_pred) -> "
                            f"value; received {describe(fn)}")
        self.fn = fn
        super().__init__(name or getattr(fn, "__name__", type(fn).__name__))

    def counts(self, y_true, y_pred):
        n = len(y_pred)
        value = np.asarray(self.fn(y_true, y_pred), dtype=np.float64)
        if value.ndim == 0:
            return [np.array([float(value) * n, n])]
        if value.shape[0] != n:
            raise ValueError(f"metric {self.name!r}: returns one number or one value per "
                             f"example ({n}); received shape {value.shape}")
        per_example = value.reshape(n, -1).mean(axis=1)
        return [np.array([per_example.sum(), n])]

    def figure(self, state):
        return ratio(state[0][0], state[0][1])

    def get_config(self):
        return {"fn": self.fn, "name": self.name}


class BinaryAccuracy(Metric):
    """Fraction of entries with ``(y_pred > threshold) == y_true`` (Keras: targets 0/1,
    per-example mean over the last axis, then the mean over examples)."""

    name, reads = "binary_accuracy", "probabilities"

    def __init__(self, name=None, threshold=0.5):
        self.threshold = threshold_value("BinaryAccuracy", "threshold", threshold)
        super().__init__(name)

    def counts(self, y_true, y_pred):
        y_true, y_pred = same_shape(self.name, y_true, y_pred)
        hits = (y_true == (y_pred > self.threshold)).reshape(len(y_pred), -1).mean(axis=1)
        return [np.array([hits.sum(), len(y_pred)])]

    def figure(self, state):
        return ratio(state[0][0], state[0][1])

    def get_config(self):
        return {"name": self.name, "threshold": self.threshold}


class _Thresholded(Metric):
    """Precision and Recall: ``y_pred > threshold`` is a predicted positive, ``y_true !=
    0`` a true one; ``class_id`` keeps one column of the last axis. State: ``[tp, fp,
    fn]``."""

    reads = "probabilities"

    def __init__(self, thresholds=0.5, class_id=None, name=None):
        op = type(self).__name__
        self.thresholds = threshold_value(op, "thresholds", thresholds)
        if class_id is not None:
            class_id = positive(op, "class_id", class_id, low=0)
        self.class_id = class_id
        super().__init__(name)

    def zeros(self):
        return [np.zeros(3)]

    def counts(self, y_true, y_pred):
        y_true, y_pred = same_shape(self.name, y_true, y_pred)
        if self.class_id is not None:
            if y_pred.ndim < 2 or self.class_id >= y_pred.shape[-1]:
                raise ValueError(f"{self.name}: 'class_id' {self.class_id} must index the last "
                                 f"axis of 'y_pred'; received shape {y_pred.shape}")
            y_true, y_pred = y_true[..., self.class_id], y_pred[..., self.class_id]
        truth = y_true != 0
        said = probabilities(self.name, y_pred) > self.thresholds
        return [np.array([np.sum(truth & said), np.sum(~truth & said),
                          np.sum(truth & ~said)], dtype=np.float64)]

    def get_config(self):
        return {"thresholds": self.thresholds, "class_id": self.class_id, "name": self.name}


class Precision(_Thresholded):
    """``tp / (tp + fp)`` over every batch since the reset (0 with no predicted positive)."""

    name = "precision"

    def figure(self, state):
        tp, fp, _ = state[0]
        return ratio(tp, tp + fp)


class Recall(_Thresholded):
    """``tp / (tp + fn)`` over every batch since the reset (0 with no true positive)."""

    name = "recall"

    def figure(self, state):
        tp, _, fn = state[0]
        return ratio(tp, tp + fn)


class TopKCategoricalAccuracy(Metric):
    """Fraction of examples whose true class (arg-max of one-hot ``y_true``) is among the
    ``k`` highest scores; ties with the k-th score count as in (TensorFlow's in_top_k)."""

    name, sparse = "top_k_categorical_accuracy", False

    def __init__(self, k=5, name=None):
        self.k = positive(type(self).__name__, "k", k)
        super().__init__(name)

    def _ids(self, y_true, y_pred):
        y_true, y_pred = same_shape(self.name, y_true, y_pred)
        return np.argmax(y_true, axis=-1)

    def counts(self, y_true, y_pred):
        y_pred = _float_array(self.name, "y_pred", y_pred)
        if y_pred.ndim < 2:
            raise ValueError(f"{self.name}: 'y_pred' must be scores (N, ..., C); received "
                             f"shape {y_pred.shape}")
        ids = self._ids(y_true, y_pred).astype(np.int64)
        own = np.take_along_axis(y_pred, ids[..., None], axis=-1)
        hits = (np.sum(y_pred > own, axis=-1) < self.k).reshape(len(y_pred), -1).mean(axis=1)
        return [np.array([hits.sum(), len(y_pred)])]

    def figure(self, state):
        return ratio(state[0][0], state[0][1])

    def get_config(self):
        return {"k": self.k, "name": self.name}


class SparseTopKCategoricalAccuracy(TopKCategoricalAccuracy):
    """:class:`TopKCategoricalAccuracy` with class ids ``(N, ...)`` or ``(N, ..., 1)``."""

    name, sparse = "sparse_top_k_categorical_accuracy", True

    def _ids(self, y_true, y_pred):
        ids = np.asarray(y_true)
        if ids.shape == (*y_pred.shape[:-1], 1):
            ids = ids[..., 0]
        if ids.shape != y_pred.shape[:-1] or ids.dtype.kind not in "iu":
            raise ValueError(f"{self.name}: 'y_true' must be integer class ids of shape "
                             f"{y_pred.shape[:-1]}; received {describe(y_true)}")
        if ids.size and (ids.min() < 0 or ids.max() >= y_pred.shape[-1]):
            raise ValueError(f"{self.name}: 'y_true' ids must lie in [0, {y_pred.shape[-1]}); "
                             f"received values in [{ids.min()}, {ids.max()}]")
        return ids


class MeanIoU(Metric):
    """Mean over classes of ``tp / (tp + fp + fn)`` from the confusion matrix of every
    batch since the reset; classes that appear in neither targets nor predictions are left
    out of the mean (Keras). ``y_true``: class ids; ``y_pred``: ids of the same shape, or
    scores ``(..., num_classes)`` whose arg-max is taken. State: the (C, C) counts."""

    name = "mean_io_u"

    def __init__(self, num_classes, name=None):
        self.num_classes = positive("MeanIoU", "num_classes", num_classes)
        super().__init__(name)

    def zeros(self):
        return [np.zeros((self.num_classes, self.num_classes))]

    def counts(self, y_true, y_pred):
        y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
        if y_pred.dtype.kind == "f" and y_pred.shape == (*y_true.shape, self.num_classes):
            y_pred = np.argmax(y_pred, axis=-1)
        if y_pred.shape != y_true.shape:
            raise ValueError(f"{self.name}: 'y_pred' must be labels of the shape of 'y_true' "
                             f"{y_true.shape} or scores {(*y_true.shape, self.num_classes)} "
                             f"(num_classes={self.num_classes}); received {describe(y_pred)}")
        return [confusion_counts(y_true.reshape(-1), y_pred.reshape(-1),
                                 self.num_classes).astype(np.float64)]

    def figure(self, state):
        matrix = state[0]
        tp = np.diag(matrix)
        union = matrix.sum(axis=0) + matrix.sum(axis=1) - tp
        valid = union > 0
        return float(np.sum(tp[valid] / union[valid]) / max(int(valid.sum()), 1))

    def get_config(self):
        return {"num_classes": self.num_classes, "name": self.name}
