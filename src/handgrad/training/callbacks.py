"""Callbacks for ``fit``: History, EarlyStopping, ModelCheckpoint, GradientNormLogger,
LearningRateScheduler and TerminateOnNaN."""

from __future__ import annotations

import math
import sys

from .._checks import choice, describe, is_int


class Callback:
    """Hooks called by ``fit``; ``self.model`` is set before training starts.

    ``rank_zero_only``: in data-parallel training (``fit(distributed=True)``) only rank 0
    runs the callback (one that writes files); the others run on every process and see
    the same logs."""

    model = None
    rank_zero_only = False

    def set_model(self, model):
        self.model = model

    def check_logs(self, keys):
        """Called by ``fit`` before training with the keys its epoch logs will have
        ("loss", the metrics, "val_*" with validation data, "lr", "seconds"); raise a
        ValueError for a need that cannot be met. Callbacks may add keys of their own."""

    def on_train_begin(self, logs):
        pass

    def on_epoch_begin(self, epoch):
        pass

    def on_train_batch_end(self, step, logs):
        pass

    def on_epoch_end(self, epoch, logs):
        pass

    def on_train_end(self, logs):
        pass


class History(Callback):
    """Per-epoch logs: ``history["loss"]``, ``history["val_accuracy"]``, ... and ``epoch``."""

    def __init__(self):
        self.history: dict[str, list] = {}
        self.epoch: list[int] = []

    def on_epoch_end(self, epoch, logs):
        self.epoch.append(epoch)
        for key, value in logs.items():
            self.history.setdefault(key, []).append(value)

    def __getitem__(self, key):
        return self.history[key]


def _monitor_mode(owner, monitor, mode):
    if not isinstance(monitor, str):
        raise TypeError(f"{owner}: 'monitor' must be a string; received {describe(monitor)}")
    mode = choice(owner, "mode", mode, ("auto", "min", "max"))
    if mode == "auto":
        mode = "max" if "acc" in monitor else "min"
    return mode


class _Monitor(Callback):
    """Tracks the best value of a logged quantity."""

    def __init__(self, owner, monitor, mode, min_delta=0.0):
        self.monitor = monitor
        self.mode = _monitor_mode(owner, monitor, mode)
        self.min_delta = abs(float(min_delta))
        self.best = math.inf if self.mode == "min" else -math.inf

    def check_logs(self, keys):
        """A ``val_*`` monitor needs validation data and a logged quantity (other names
        may come from another callback, so they are checked at the end of an epoch)."""
        owner, monitor = type(self).__name__, self.monitor
        if not monitor.startswith("val_") or monitor in keys:
            return
        if not any(key.startswith("val_") for key in keys):
            raise ValueError(f"{owner}: monitor {monitor!r} needs validation data, but fit "
                             f"has none; pass validation_data=(x_val, y_val) or "
                             f"validation_split=0.2 to fit, or monitor {monitor[4:]!r}")
        raise ValueError(f"{owner}: monitor {monitor!r} will not be in the epoch logs; fit "
                         f"logs {sorted(keys)}")

    def _current(self, logs):
        if self.monitor not in logs:
            raise ValueError(f"{type(self).__name__}: monitor {self.monitor!r} is not in the "
                             f"epoch logs {sorted(logs)}")
        return logs[self.monitor]

    def _improved(self, value):
        if self.mode == "min":
            return value < self.best - self.min_delta
        return value > self.best + self.min_delta


class EarlyStopping(_Monitor):
    """Stop when ``monitor`` has not improved by ``min_delta`` for ``patience`` epochs;
    optionally restore the best weights seen."""

    def __init__(self, monitor="val_loss", patience=3, min_delta=0.0, mode="auto",
                 restore_best_weights=False):
        super().__init__("EarlyStopping", monitor, mode, min_delta)
        if not is_int(patience) or patience < 0:
            raise ValueError(f"EarlyStopping: 'patience' must be an int >= 0; received "
                             f"{patience!r}")
        self.patience = patience
        self.restore_best_weights = restore_best_weights
        self.wait = 0
        self.best_weights = None
        self.stopped_epoch = None

    def on_train_begin(self, logs):
        self.wait = 0
        self.best = math.inf if self.mode == "min" else -math.inf
        self.best_weights = None
        self.stopped_epoch = None

    def on_epoch_end(self, epoch, logs):
        value = self._current(logs)
        if self._improved(value):
            self.best, self.wait = value, 0
            if self.restore_best_weights:
                self.best_weights = {k: v.copy() for k, v in
                                     self.model.named_parameters().items()}
            return
        self.wait += 1
        if self.wait > self.patience:
            self.stopped_epoch = epoch
            self.model.stop_training = True
            if self.best_weights is not None:
                for key, value in self.model.named_parameters().items():
                    value[...] = self.best_weights[key]


class ModelCheckpoint(_Monitor):
    """Save a checkpoint (model, optimizer state) after each epoch, or only when
    ``monitor`` improves with ``save_best_only``. ``path`` may contain ``{epoch}``. In
    data-parallel training only rank 0 writes."""

    rank_zero_only = True

    def __init__(self, path, monitor="val_loss", save_best_only=False, mode="auto"):
        super().__init__("ModelCheckpoint", monitor, mode)
        self.path = str(path)
        self.save_best_only = save_best_only

    def check_logs(self, keys):
        if self.save_best_only:  # otherwise the monitor is not used
            super().check_logs(keys)

    def on_epoch_end(self, epoch, logs):
        from ..io.checkpoint import save_checkpoint

        if self.save_best_only:
            value = self._current(logs)
            if not self._improved(value):
                return
            self.best = value
        save_checkpoint(self.path.format(epoch=epoch + 1), self.model,
                        optimizer=self.model.optimizer, epoch=epoch + 1)


class LearningRateScheduler(Callback):
    """Set the optimizer's learning rate from ``schedule(step) -> lr`` before each
    step (``per="step"``, counting optimizer steps) or epoch (``per="epoch"``)."""

    def __init__(self, schedule, per="step"):
        if not callable(schedule):
            raise TypeError(f"LearningRateScheduler: 'schedule' must be callable; received "
                            f"{describe(schedule)}")
        self.schedule = schedule
        self.per = choice("LearningRateScheduler", "per", per, ("step", "epoch"))

    def on_train_begin(self, logs):
        if self.per == "step":
            self.model.optimizer.lr = float(self.schedule(self.model.optimizer.iterations))

    def on_epoch_begin(self, epoch):
        if self.per == "epoch":
            self.model.optimizer.lr = float(self.schedule(epoch))

    def on_train_batch_end(self, step, logs):
        if self.per == "step":
            self.model.optimizer.lr = float(self.schedule(self.model.optimizer.iterations))


class TerminateOnNaN(Callback):
    """Stop training as soon as a batch loss is NaN or infinite, naming the step.

    Keras's behaviour: the step's update is applied. Without this callback ``fit``
    raises before that update (``on_nonfinite="raise"``, see :mod:`handgrad.training`);
    with it, ``fit``'s default becomes ``"ignore"`` and this callback decides.
    """

    def __init__(self, stream=None):
        self.stream = stream
        self.epoch = 0
        self.message = None

    def on_epoch_begin(self, epoch):
        self.epoch = epoch

    def on_train_batch_end(self, step, logs):
        loss = logs.get("loss")
        if loss is not None and not math.isfinite(loss):
            self.message = (f"TerminateOnNaN: loss is {loss} at epoch {self.epoch + 1}, "
                            f"step {step + 1} (optimizer step "
                            f"{self.model.optimizer.iterations}); stopping training")
            print(self.message, file=self.stream or sys.stderr)
            self.model.stop_training = True


def layer_gradient_norms(model) -> dict:
    """{layer path: sqrt(sum of g ** 2 over the layer's trainable gradients)}; the path
    is the gradient name without its last part ("block.conv.W" -> "block.conv")."""
    squares: dict[str, float] = {}
    for key, grad in model.named_gradients(trainable_only=True).items():
        layer = key.rpartition(".")[0] or key
        squares[layer] = squares.get(layer, 0.0) + float((grad * grad).sum())
    return {layer: math.sqrt(value) for layer, value in squares.items()}


class GradientNormLogger(Callback):
    """Per-layer global L2 norm of the gradients (:func:`layer_gradient_norms`) after
    every train step (``per="step"``) or averaged over each epoch (``per="epoch"``).

    ``norms[layer]`` lists the values and ``steps`` the matching step numbers (1-based,
    counted across epochs) or epoch numbers; each ``fit`` starts a new record. Plot it
    with :func:`handgrad.inspect.plots.gradient_norms` to spot vanishing or exploding gradients.
    """

    def __init__(self, per="step"):
        self.per = choice("GradientNormLogger", "per", per, ("step", "epoch"))
        self.norms: dict[str, list] = {}
        self.steps: list[int] = []
        self._count, self._epoch = 0, {}

    def on_train_begin(self, logs):
        self.norms, self.steps, self._count = {}, [], 0

    def on_epoch_begin(self, epoch):
        self._epoch = {}

    def _record(self, x, norms):
        self.steps.append(x)
        for layer, value in norms.items():
            self.norms.setdefault(layer, []).append(value)

    def on_train_batch_end(self, step, logs):
        self._count += 1
        norms = layer_gradient_norms(self.model)
        if self.per == "step":
            self._record(self._count, norms)
        for layer, value in norms.items():
            self._epoch.setdefault(layer, []).append(value)

    def on_epoch_end(self, epoch, logs):
        if self.per == "epoch" and self._epoch:
            self._record(epoch + 1, {k: sum(v) / len(v) for k, v in self._epoch.items()})
