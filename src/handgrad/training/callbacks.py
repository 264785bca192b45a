"""Callbacks for ``fit``: History, EarlyStopping, ModelCheckpoint, GradientNormLogger,
LearningRateScheduler and TerminateOnNaN."""

from __future__ import annotations

import inspect
import math
import os
import sys

from .._checks import choice, describe, is_int
from .._hyper import number
from ..schedulers import Schedule
from .hooks import Callback

__all__ = ["Callback", "EarlyStopping", "GradientNormLogger", "History",
           "LearningRateScheduler", "ModelCheckpoint", "TerminateOnNaN",
           "layer_gradient_norms"]


class History(Callback):
    """Per-epoch logs: ``history["loss"]``, ``history["val_accuracy"]``, ... and ``epoch``."""

    def __init__(self):
        self.history: dict[str, list] = {}
        self.epoch: list[int] = []

    def on_epoch_end(self, epoch, logs=None):
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

    def _improved(self, value, reference=None):
        """Whether ``value`` beats ``reference`` (default: the best so far) by min_delta."""
        reference = self.best if reference is None else reference
        if self.mode == "min":
            return value < reference - self.min_delta
        return value > reference + self.min_delta


def _model_arrays(model) -> dict:
    """The model's parameters and buffers (BatchNorm's running statistics), its own arrays."""
    return {**{f"param/{k}": v for k, v in model.named_parameters().items()},
            **{f"buffer/{k}": v for k, v in model.named_buffers().items()}}


class EarlyStopping(_Monitor):
    """Keras's EarlyStopping: stop once ``monitor`` has gone ``patience`` epochs in a row
    without improving by more than ``min_delta`` (``patience`` 0 and 1 both stop at the
    first such epoch; val_loss 1.0, 0.5, 0.6, 0.7 with ``patience=2`` stops after the
    fourth epoch).

    ``restore_best_weights=True``: when training ends, stopped here or not, a model whose
    best epoch was not the last gets that epoch's parameters and buffers (BatchNorm's
    running statistics) back. ``best``, ``best_epoch`` and ``stopped_epoch`` (0-based,
    None when it did not stop training) say what happened.

    Keras's other options: ``baseline`` (an epoch that improves on the best but not on the
    baseline does not reset the wait, so training stops unless the baseline is beaten),
    ``start_from_epoch`` (epochs before it are neither watched nor counted) and
    ``verbose=1`` (a line when it stops and when it restores)."""

    def __init__(self, monitor="val_loss", patience=3, min_delta=0.0, mode="auto",
                 restore_best_weights=False, *, baseline=None, start_from_epoch=0,
                 verbose=0):
        super().__init__("EarlyStopping", monitor, mode, min_delta)
        for name, value in (("patience", patience), ("start_from_epoch", start_from_epoch)):
            if not is_int(value) or value < 0:
                raise ValueError(f"EarlyStopping: {name!r} must be an int >= 0; received "
                                 f"{value!r}")
        if baseline is not None and not (isinstance(baseline, (int, float))
                                         and math.isfinite(baseline)):
            raise ValueError(f"EarlyStopping: 'baseline' must be None or a finite number; "
                             f"received {describe(baseline)}")
        if verbose not in (0, 1, False, True):
            raise ValueError(f"EarlyStopping: 'verbose' must be 0 or 1; received "
                             f"{describe(verbose)}")
        self.patience, self.start_from_epoch = patience, start_from_epoch
        self.baseline, self.verbose = baseline, int(verbose)
        self.restore_best_weights = restore_best_weights
        self.on_train_begin()

    def on_train_begin(self, logs=None):
        self.wait = 0
        self.best = math.inf if self.mode == "min" else -math.inf
        self.best_weights = self.best_epoch = self.stopped_epoch = self._last = None

    def on_epoch_end(self, epoch, logs=None):
        if epoch < self.start_from_epoch:
            return
        value = self._current(logs)
        self._last = epoch
        self.wait += 1
        if self._improved(value):
            self.best, self.best_epoch = value, epoch
            if self.restore_best_weights:
                self.best_weights = {k: v.copy() for k, v in _model_arrays(self.model).items()}
            if self.baseline is None or self._improved(value, self.baseline):
                self.wait = 0
            return
        if self.wait >= max(self.patience, 1):
            self.stopped_epoch = epoch
            self.model.stop_training = True
            if self.verbose:
                print(f"Epoch {epoch + 1}: early stopping")

    def on_train_end(self, logs=None):
        if self.best_weights is not None and self.best_epoch != self._last:
            if self.verbose:
                print(f"Restoring model weights from the end of the best epoch: "
                      f"{self.best_epoch + 1}.")
            for key, value in _model_arrays(self.model).items():
                value[...] = self.best_weights[key]


CHECKPOINT_EXTENSIONS = (".safetensors",)


class ModelCheckpoint(_Monitor):
    """Save a checkpoint (model, optimizer state) after each epoch, or only when
    ``monitor`` improves with ``save_best_only``. ``path`` ends in ``.safetensors`` (the
    format written; Keras's ``.keras`` and ``.h5`` are refused) and may contain fields
    that Keras fills in: ``{epoch}`` (1-based) and the epoch's logs, e.g.
    ``"ckpt-{epoch:02d}-{val_loss:.2f}.safetensors"``. ``save_weights_only=True`` writes
    only the parameters and buffers (``model.save_weights``), for ``model.load_weights``.
    In data-parallel training only rank 0 writes."""

    rank_zero_only = True

    def __init__(self, path, monitor="val_loss", save_best_only=False, mode="auto",
                 save_weights_only=False):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"ModelCheckpoint: 'path' must be a str or path; received "
                            f"{describe(path)}")
        self.path = os.fspath(path)
        if not self.path.endswith(CHECKPOINT_EXTENSIONS):
            raise ValueError(f"ModelCheckpoint: 'path' must end in "
                             f"{' or '.join(CHECKPOINT_EXTENSIONS)} (a checkpoint is a "
                             f"safetensors file); received {self.path!r}")
        super().__init__("ModelCheckpoint", monitor, mode)
        for name, value in (("save_best_only", save_best_only),
                            ("save_weights_only", save_weights_only)):
            if not isinstance(value, bool):
                raise TypeError(f"ModelCheckpoint: {name!r} must be a bool; received "
                                f"{describe(value)}")
        self.save_best_only, self.save_weights_only = save_best_only, save_weights_only

    def check_logs(self, keys):
        if self.save_best_only:  # otherwise the monitor is not used
            super().check_logs(keys)

    def on_epoch_end(self, epoch, logs=None):
        from ..io.checkpoint import save_checkpoint, save_weights

        if self.save_best_only:
            value = self._current(logs)
            if not self._improved(value):
                return
            self.best = value
        try:
            path = self.path.format(**{**logs, "epoch": epoch + 1})
        except (KeyError, IndexError, ValueError) as error:
            raise ValueError(f"ModelCheckpoint: cannot fill in 'path' {self.path!r} from "
                             f"epoch={epoch + 1} and the epoch logs {sorted(logs)}: "
                             f"{error!r}") from None
        if self.save_weights_only:
            save_weights(self.model, path)
        else:
            save_checkpoint(path, self.model, optimizer=self.model.optimizer, epoch=epoch + 1)


def _arity(schedule) -> int:
    """2 when ``schedule`` takes (index, lr), as Keras's ``schedule(epoch, lr)``, else 1."""
    try:
        parameters = inspect.signature(schedule).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature: one argument
        return 1
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY,
                                                      p.POSITIONAL_OR_KEYWORD)]
    varargs = any(p.kind == p.VAR_POSITIONAL for p in parameters)
    return 2 if varargs or len(positional) >= 2 else 1


class LearningRateScheduler(Callback):
    """Keras's LearningRateScheduler: before each epoch, the optimizer's learning rate
    becomes ``schedule(epoch)``, or ``schedule(epoch, lr)`` for a function of two
    arguments (``lr``: the current rate); ``epoch`` is 0-based.

    ``per="step"`` asks for per-step scheduling instead: before each optimizer step, the
    rate is ``schedule(step)`` (or ``schedule(step, lr)``), ``step`` counting the
    optimizer's completed steps across ``fit`` calls. A :mod:`handgrad.schedulers`
    schedule counts optimizer steps, so it needs ``per`` to be named."""

    def __init__(self, schedule, per=None):
        if not callable(schedule):
            raise TypeError(f"LearningRateScheduler: 'schedule' must be callable; received "
                            f"{describe(schedule)}")
        if per is None and isinstance(schedule, Schedule):
            raise ValueError(f"LearningRateScheduler: {schedule!r} counts optimizer steps; "
                             f"pass per='step' to use it so, or per='epoch' to give it the "
                             f"epoch index")
        self.schedule = schedule
        self.per = choice("LearningRateScheduler", "per", "epoch" if per is None else per,
                          ("step", "epoch"))
        self._two = _arity(schedule) == 2

    def _set(self, index=None):
        """The rate for epoch ``index``, or (None) for the optimizer's next step."""
        optimizer = self.model.optimizer
        if optimizer is None:
            raise RuntimeError("LearningRateScheduler: the model has no optimizer; compile "
                               "it first")
        index = optimizer.iterations if index is None else index
        lr = self.schedule(index, float(optimizer.lr)) if self._two else self.schedule(index)
        optimizer.lr = number("LearningRateScheduler", f"schedule({index})", lr, low=0.0)

    def on_epoch_begin(self, epoch, logs=None):
        if self.per == "epoch":
            self._set(epoch)

    def on_train_begin(self, logs=None):
        if self.per == "step":
            self._set()

    def on_train_batch_end(self, batch, logs=None):
        if self.per == "step":  # the rate of the next step: an optimizer saved now has it
            self._set()


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

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, step, logs=None):
        loss = logs.get("loss")
        if loss is not None and not math.isfinite(loss):
            self.message = (f"TerminateOnNaN: loss is {loss} at epoch {self.epoch + 1}, "
                            f"step {step + 1} (optimizer step "
                            f"{self.model.optimizer.iterations}); stopping training")
            print(self.message, file=self.stream or sys.stderr)
            self.model.stop_training = True


def layer_gradient_norms(model, gradients=None) -> dict:
    """{layer path: sqrt(sum of g ** 2 over the layer's trainable gradients)}; the path
    is the gradient name without its last part ("block.conv.W" -> "block.conv").
    ``gradients``: ``{name: array}`` to use instead of the model's (e.g. a copy kept)."""
    if gradients is None:
        gradients = model.named_gradients(trainable_only=True)
    squares: dict[str, float] = {}
    for key, grad in gradients.items():
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

    def on_train_begin(self, logs=None):
        self.norms, self.steps, self._count = {}, [], 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = {}

    def _record(self, x, norms):
        self.steps.append(x)
        for layer, value in norms.items():
            self.norms.setdefault(layer, []).append(value)

    def on_train_batch_end(self, step, logs=None):
        self._count += 1
        norms = layer_gradient_norms(self.model)
        if self.per == "step":
            self._record(self._count, norms)
        for layer, value in norms.items():
            self._epoch.setdefault(layer, []).append(value)

    def on_epoch_end(self, epoch, logs=None):
        if self.per == "epoch" and self._epoch:
            self._record(epoch + 1, {k: sum(v) / len(v) for k, v in self._epoch.items()})
