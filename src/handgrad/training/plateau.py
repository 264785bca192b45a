"""ReduceLROnPlateau: lower the learning rate when a logged quantity stops improving."""

from __future__ import annotations

import math

from .._checks import choice, is_int
from .._hyper import number
from .callbacks import _Monitor, _monitor_mode

__all__ = ["ReduceLROnPlateau"]

TORCH_ONLY = ("threshold", "threshold_mode", "eps")


class ReduceLROnPlateau(_Monitor):
    """Lower ``optimizer.lr`` (every parameter group scales with it, see
    :mod:`handgrad.optimizers.groups`) at an epoch's end when the logged ``monitor`` has
    stopped improving, by torch's rule or, when ``min_delta`` is given, by Keras's.

    **torch's rule** (``torch.optim.lr_scheduler.ReduceLROnPlateau``; ``mode`` "min" or
    "max"): an epoch improves when ``value < best (1 - threshold)`` (``mode="min"``,
    rel), ``value < best - threshold`` (abs), or the mirror images for ``"max"``. After
    *more than* ``patience`` epochs in a row without improvement ``lr = max(lr factor,
    min_lr)`` (no change when that moves it by ``eps`` or less), then ``cooldown``
    epochs in which bad epochs are not counted.

    **Keras's rule** (``min_delta=``, Keras's default is 1e-4; ``mode`` may be "auto":
    "max" for a monitor with "acc" in its name): an epoch improves when ``value < best -
    min_delta`` (mirror for "max"); a cooldown epoch resets the wait; after ``patience``
    epochs in a row without improvement (not counted in cooldown) and when ``lr >
    min_lr``, ``lr = max(lr factor, min_lr)`` and ``cooldown`` epochs start.
    ``threshold``, ``threshold_mode`` and ``eps`` are torch's and refused beside it."""

    def __init__(self, monitor="val_loss", mode="min", factor=0.1, patience=10,
                 threshold=1e-4, threshold_mode="rel", cooldown=0, min_lr=0.0, eps=1e-8,
                 min_delta=None):
        op = "ReduceLROnPlateau"
        self.keras = min_delta is not None
        if self.keras:
            given = {"threshold": threshold != 1e-4, "threshold_mode": threshold_mode != "rel",
                     "eps": eps != 1e-8}
            clash = [name for name in TORCH_ONLY if given[name]]
            if clash:
                raise ValueError(f"{op}: 'min_delta' chooses Keras's rule, which has no "
                                 f"{clash[0]!r} (torch's); give one of the two")
            mode = _monitor_mode(op, monitor, mode)
        super().__init__(op, monitor, choice(op, "mode", mode, ("min", "max")))
        self.min_delta = number(op, "min_delta", 0.0 if min_delta is None else min_delta,
                                low=0.0)
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
        if self.keras:
            return super()._improved(value)
        sign = 1.0 if self.mode == "min" else -1.0
        if self.threshold_mode == "rel":
            return sign * value < sign * self.best * (1.0 - sign * self.threshold)
        return sign * value < sign * self.best - self.threshold

    def _reduce(self, optimizer):
        new = max(float(optimizer.lr) * self.factor, self.min_lr)
        if self.keras or float(optimizer.lr) - new > self.eps:
            optimizer.lr = new
        self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0

    def on_epoch_end(self, epoch, logs=None):
        value = float(self._current(logs))
        if self.keras:
            self._keras_step(value)
            return
        if self._improved(value):
            self.best, self.num_bad_epochs = value, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            self._reduce(self.model.optimizer)

    def _keras_step(self, value):
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self._improved(value):
            self.best, self.num_bad_epochs = value, 0
        elif self.cooldown_counter == 0:
            self.num_bad_epochs += 1
            optimizer = self.model.optimizer
            if self.num_bad_epochs >= self.patience and float(optimizer.lr) > self.min_lr:
                self._reduce(optimizer)
