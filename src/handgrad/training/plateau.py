"""ReduceLROnPlateau: lower the learning rate when a logged quantity stops improving."""

from __future__ import annotations

import math

from .._checks import choice, is_int
from .._hyper import number
from .callbacks import _Monitor

__all__ = ["ReduceLROnPlateau"]


class ReduceLROnPlateau(_Monitor):
    """``torch.optim.lr_scheduler.ReduceLROnPlateau`` as a callback, at each epoch's end on
    the logged ``monitor`` (Keras's callback of the same name differs only in details:
    its ``min_delta`` is torch's ``threshold_mode="abs"``; torch's semantics are these).

    An epoch improves when ``value < best (1 - threshold)`` (``mode="min"``, rel),
    ``value < best - threshold`` (abs), or the mirror images for ``mode="max"``. After more
    than ``patience`` epochs in a row without improvement ``lr = max(lr factor, min_lr)``
    (no change when that moves it by ``eps`` or less), then ``cooldown`` epochs in which
    bad epochs are not counted. With parameter groups every group's rate scales with
    ``optimizer.lr`` (see :mod:`handgrad.optimizers.groups`)."""

    def __init__(self, monitor="val_loss", mode="min", factor=0.1, patience=10,
                 threshold=1e-4, threshold_mode="rel", cooldown=0, min_lr=0.0, eps=1e-8):
        op = "ReduceLROnPlateau"
        super().__init__(op, monitor, choice(op, "mode", mode, ("min", "max")))
        self.factor = number(op, "factor", factor, low=0.0, high=1.0, high_open=True)
        for name, value in (("patience", patience), ("cooldown", cooldown)):
            if not is_int(value) or value < 0:
                raise ValueError(f"{op}: '{name}' must be an int >= 0; received {value!r}")
        self.patience, self.cooldown = patience, cooldown
        self.threshold = number(op, "threshold", threshold, low=0.0)
        self.threshold_mode = choice(op, "threshold_mode", threshold_mode, ("rel", "abs"))
        self.min_lr = number(op, "min_lr", min_lr, low=0.0)
        self.eps = number(op, "eps", eps, low=0.0)
        self.on_train_begin()

    def on_train_begin(self, logs=None):
        self.best = math.inf if self.mode == "min" else -math.inf
        self.num_bad_epochs = self.cooldown_counter = 0

    def _improved(self, value):
        sign = 1.0 if self.mode == "min" else -1.0
        if self.threshold_mode == "rel":
            return sign * value < sign * self.best * (1.0 - sign * self.threshold)
        return sign * value < sign * self.best - self.threshold

    def on_epoch_end(self, epoch, logs=None):
        value = float(self._current(logs))
        if self._improved(value):
            self.best, self.num_bad_epochs = value, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            optimizer = self.model.optimizer
            new = max(float(optimizer.lr) * self.factor, self.min_lr)
            if float(optimizer.lr) - new > self.eps:
                optimizer.lr = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
