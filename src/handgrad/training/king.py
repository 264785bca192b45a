"""KingScheduler: lower the learning rate when the loss history stops going down (Davis
King's rule from dlib, as numpy-ml's ``KingScheduler``)."""

from __future__ import annotations

import math

import numpy as np

from .._checks import choice, positive_int
from .._hyper import number
from .hooks import Callback

__all__ = ["KingScheduler", "probability_of_decrease"]


def probability_of_decrease(values) -> float:
    """``P(slope < 0)`` of the least-squares line through ``values`` (1-D, ``n >= 3``)
    against ``0..n-1``: the slope is Gaussian with mean the fitted slope and variance
    ``sum(residual^2) / (n - 2) / sum((x - mean x)^2)``."""
    y = np.asarray(values, dtype=np.float64)
    x = np.arange(y.size, dtype=np.float64) - (y.size - 1) / 2.0
    sxx = float(x @ x)
    slope = float(x @ (y - y.mean())) / sxx
    residual = y - y.mean() - slope * x
    std = math.sqrt(float(residual @ residual) / (y.size - 2) / sxx)
    if std == 0.0:
        return 1.0 if slope < 0 else 0.0
    return 0.5 * (1.0 + math.erf(-slope / std / math.sqrt(2.0)))


class KingScheduler(Callback):
    """Multiply the learning rate by ``decay`` when the last ``patience`` values of the
    logged ``monitor`` (per training step, or per epoch with ``per="epoch"``) show no
    decrease: ``probability_of_decrease`` below ``threshold`` (0.51) both for all of them
    and with the largest ``discard`` fraction left out (dlib's robust test, blind to
    spikes), then start a new history. Never below ``min_lr``."""

    def __init__(self, monitor="loss", patience=1000, decay=0.99, per="step",
                 threshold=0.51, discard=0.1, min_lr=0.0):
        op = "KingScheduler"
        if not isinstance(monitor, str):
            raise TypeError(f"{op}: 'monitor' must be a string; received {monitor!r}")
        self.monitor = monitor
        self.patience = positive_int(op, "patience", patience)
        if self.patience < 3:
            raise ValueError(f"{op}: 'patience' must be >= 3 (a slope and its spread); "
                             f"received {patience!r}")
        self.decay = number(op, "decay", decay, low=0.0, low_open=True, high=1.0,
                            high_open=True)
        self.per = choice(op, "per", per, ("step", "epoch"))
        self.threshold = number(op, "threshold", threshold, low=0.0, high=1.0)
        self.discard = number(op, "discard", discard, low=0.0, high=0.5, high_open=True)
        self.min_lr = number(op, "min_lr", min_lr, low=0.0)
        self.history: list[float] = []

    def on_train_begin(self, logs=None):
        self.history = []

    def _record(self, logs):
        if not logs or self.monitor not in logs:
            raise ValueError(f"KingScheduler: monitor {self.monitor!r} is not in the logs "
                             f"{sorted(logs or {})}")
        self.history = [*self.history, float(logs[self.monitor])][-self.patience:]
        if len(self.history) < self.patience:
            return
        values = np.asarray(self.history)
        kept = max(3, round(values.size * (1.0 - self.discard)))
        robust = values[np.sort(np.argsort(values, kind="stable")[:kept])]  # in time order
        if max(probability_of_decrease(self.history),
               probability_of_decrease(robust)) < self.threshold:
            optimizer = self.model.optimizer
            optimizer.lr = max(float(optimizer.lr) * self.decay, self.min_lr)
            self.history = []

    def on_train_batch_end(self, batch, logs=None):
        if self.per == "step":
            self._record(logs)

    def on_epoch_end(self, epoch, logs=None):
        if self.per == "epoch":
            self._record(logs)
