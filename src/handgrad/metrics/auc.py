"""Keras's ``AUC``: the area under the ROC or precision-recall curve, approximated from
confusion counts at fixed thresholds and accumulated over batches.

Thresholds (Keras's): with ``num_thresholds = T`` (200 by default) they are
``[-EPSILON, 1/(T-1), 2/(T-1), ..., (T-2)/(T-1), 1 + EPSILON]`` with ``EPSILON = 1e-7``,
so that the first counts every prediction as positive and the last none; given
``thresholds`` (each in [0, 1]) are sorted and framed the same way. An entry is a
predicted positive at threshold ``t`` when ``y_pred > t``; ``y_true != 0`` is a true
positive. The state is ``tp, fp, tn, fn`` at each threshold (``multi_label=False``: every
entry of every output is one binary decision).

Summation ``"interpolation"`` (Keras's default), over consecutive thresholds ``i, i+1``:

- ROC: the trapezoid rule on (fpr, tpr), ``sum_i (fpr_i - fpr_{i+1}) (tpr_i + tpr_{i+1}) / 2``
  with ``tpr = tp / (tp + fn)``, ``fpr = fp / (fp + tn)``.
- PR: Davis & Goadrich's interpolation. Between two thresholds ``tp`` is taken linear in
  the predicted positives ``p = tp + fp``: ``tp = s p + b`` with ``s = dtp / dp``
  (``dtp = tp_i - tp_{i+1}``, ``dp = p_i - p_{i+1}``, 0 where ``dp = 0``),
  ``b = tp_{i+1} - s p_{i+1}``; the area of precision ``tp / p`` over recall
  ``tp / (tp_{i+1} + fn_{i+1})`` on that piece is
  ``s (dtp + b log(p_i / p_{i+1})) / (tp_{i+1} + fn_{i+1})`` (the log is taken as 0
  unless both ``p`` are positive; a zero denominator gives 0).
"""

from __future__ import annotations

import numpy as np

from .._checks import describe
from .streaming import Metric, positive, probabilities, same_shape, threshold_value

EPSILON = 1e-7
CURVES = ("ROC", "PR")


def keras_thresholds(num_thresholds=200, thresholds=None) -> np.ndarray:
    """The thresholds of :class:`AUC` (see the module docstring), ascending."""
    if thresholds is None:
        inner = np.arange(1, num_thresholds - 1) / (num_thresholds - 1)
    else:
        inner = np.sort(np.asarray(thresholds, dtype=np.float64))
    return np.concatenate([[-EPSILON], inner, [1.0 + EPSILON]])


def _divide(num, den):
    """``num / den`` elementwise, 0 where ``den`` is 0."""
    out = np.zeros(np.broadcast(num, den).shape)
    np.divide(num, den, out=out, where=den != 0)
    return out


def roc_area(tp, fp, tn, fn) -> float:
    """The trapezoid area under (fpr, tpr), thresholds ascending."""
    tpr, fpr = _divide(tp, tp + fn), _divide(fp, fp + tn)
    return float(np.sum((fpr[:-1] - fpr[1:]) * (tpr[:-1] + tpr[1:]) / 2))


def pr_area(tp, fp, fn) -> float:
    """Davis & Goadrich's interpolated area under precision-recall, thresholds ascending."""
    p = tp + fp
    dtp, dp = tp[:-1] - tp[1:], p[:-1] - p[1:]
    slope = _divide(dtp, np.maximum(dp, 0))
    intercept = tp[1:] - slope * p[1:]
    both = (p[:-1] > 0) & (p[1:] > 0)
    log_ratio = np.log(np.where(both, _divide(p[:-1], np.maximum(p[1:], 0)), 1.0))
    return float(np.sum(_divide(slope * (dtp + intercept * log_ratio),
                                np.maximum(tp[1:] + fn[1:], 0))))


class AUC(Metric):
    """Keras's AUC (``summation_method="interpolation"``): ``curve`` "ROC" or "PR",
    ``num_thresholds`` (>= 2) or explicit ``thresholds`` in [0, 1]. State: the (4, T)
    counts tp, fp, tn, fn at each threshold."""

    name, reads = "auc", "probabilities"

    def __init__(self, num_thresholds=200, curve="ROC", summation_method="interpolation",
                 name=None, thresholds=None):
        op = "AUC"
        if curve not in CURVES:
            raise ValueError(f"{op}: 'curve' must be one of {CURVES}; received {curve!r}")
        if summation_method != "interpolation":
            raise ValueError(f"{op}: 'summation_method' must be 'interpolation' (Keras's "
                             f"default; the others are not implemented); received "
                             f"{summation_method!r}")
        if thresholds is None:
            num_thresholds = positive(op, "num_thresholds", num_thresholds, low=2)
        else:
            if not isinstance(thresholds, (list, tuple, np.ndarray)) or len(thresholds) == 0:
                raise TypeError(f"{op}: 'thresholds' must be a non-empty list of numbers in "
                                f"[0, 1]; received {describe(thresholds)}")
            thresholds = [threshold_value(op, f"thresholds[{i}]", t)
                          for i, t in enumerate(thresholds)]
            num_thresholds = len(thresholds) + 2
        self.curve, self.summation_method = curve, summation_method
        self.num_thresholds, self.given = num_thresholds, thresholds
        self.thresholds = keras_thresholds(num_thresholds, thresholds)
        super().__init__(name)

    def zeros(self):
        return [np.zeros((4, len(self.thresholds)))]

    def counts(self, y_true, y_pred):
        y_true, y_pred = same_shape(self.name, y_true, y_pred)
        y_pred = probabilities(self.name, y_pred).reshape(-1)
        truth = y_true.reshape(-1) != 0
        pos, neg = np.sort(y_pred[truth]), np.sort(y_pred[~truth])
        tp = len(pos) - np.searchsorted(pos, self.thresholds, side="right")  # pred > t
        fp = len(neg) - np.searchsorted(neg, self.thresholds, side="right")
        return [np.stack([tp, fp, len(neg) - fp, len(pos) - tp]).astype(np.float64)]

    def figure(self, state):
        tp, fp, tn, fn = state[0]
        return roc_area(tp, fp, tn, fn) if self.curve == "ROC" else pr_area(tp, fp, fn)

    def get_config(self):
        return {"num_thresholds": self.num_thresholds, "curve": self.curve,
                "summation_method": self.summation_method, "name": self.name,
                "thresholds": self.given}
