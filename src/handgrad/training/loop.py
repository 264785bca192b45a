"""The training loop: compile, train_step, fit, evaluate, predict.

A NaN or infinite batch loss ends ``fit`` with a :class:`NonFiniteLossError` (a
``FloatingPointError``, like :class:`handgrad.inspect.AnomalyError`) that names the epoch
and the step; that step's update is not applied, so the weights are those from before it.
``fit(on_nonfinite=...)`` chooses: ``"raise"`` (the default), ``"stop"`` (end training
after that step, without its update, and say so on stderr) or ``"ignore"`` (train on, as
Keras does). Passing a :class:`~handgrad.training.TerminateOnNaN` callback leaves the
decision to it (the default becomes ``"ignore"``, Keras's behaviour).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass

from .. import losses, ops, optimizers
from .._checks import array_module, as_generator, choice, describe, is_int, positive_int
from ..data.batching import batches, num_batches
from ..layers.activations import Activation
from . import metrics as _metrics
from .callbacks import Callback, History, TerminateOnNaN
from .checks import check_data, check_layout, check_validation_data, edge_layer, split_validation
from .progress import ProgressBar

METRICS = tuple(_metrics.METRICS)
NONFINITE = ("raise", "stop", "ignore")
accuracy = _metrics.accuracy


class NonFiniteLossError(FloatingPointError):
    """A training step's loss is NaN or infinite (raised before its update). ``loss`` is
    the value, ``logs`` the step's logs, ``epoch`` and ``step`` (1-based) say where when
    ``fit`` raised it (None from a bare ``train_step``)."""

    def __init__(self, message, logs, epoch=None, step=None):
        super().__init__(message)
        self.logs, self.loss, self.epoch, self.step = logs, logs.get("loss"), epoch, step


HINT = ("to find the first layer that produces NaN or inf, run it inside "
        "`with handgrad.inspect.detect_anomaly():`")


@dataclass
class _Run:
    """What one ``fit`` call trains on."""

    x: object
    y: object
    epochs: int
    batch_size: int
    steps: int
    rng: object
    shuffle: bool
    callbacks: list
    verbose: int
    validation_data: object
    on_nonfinite: str


def _finite_inputs(xb) -> bool:
    kind = getattr(getattr(xb, "dtype", None), "kind", "")
    return kind != "f" or bool(array_module(xb).isfinite(xb).all())


class TrainingMixin:
    """Training methods for a model with forward/backward/named_parameters."""

    optimizer = None
    loss_fn = None
    metrics: tuple = ()
    stop_training = False
    _metric_fns = None  # {name: metric}, set by compile
    _on_nonfinite = "raise"

    def compile(self, optimizer="adam", loss="cross_entropy", metrics=("accuracy",)):
        """Choose the optimizer (name or instance), the loss (a name of
        :data:`handgrad.losses.LOSSES`, Keras's names included, or a callable
        ``(pred, y) -> (loss, dpred)``) and the metrics (names of
        :data:`handgrad.training.metrics.METRICS`; logged under the name given, e.g. ``"acc"``).
        The cross-entropy losses take logits: a model ending with Softmax or Sigmoid is
        refused."""
        metric_fns = _metrics.get("compile", () if metrics is None else metrics)
        loss_fn = losses.get(loss)
        last = edge_layer(self, -1)
        if loss_fn in losses.LOGIT_LOSSES and isinstance(last, Activation) \
                and last.forward_op in (ops.softmax, ops.sigmoid):
            raise ValueError(f"compile: loss {loss!r} takes logits, but the model ends with "
                             f"{last.label}, which outputs probabilities; remove that last "
                             f"layer (apply it to predict's outputs instead)")
        self.optimizer = optimizers.get(optimizer)
        self.loss_fn = loss_fn
        self.loss_name = loss if isinstance(loss, str) else getattr(loss, "__name__", "loss")
        self.metrics = tuple(metric_fns)
        self._metric_fns = metric_fns
        return self

    def _require_compiled(self, what):
        if self.optimizer is None or self.loss_fn is None:
            raise RuntimeError(f"{what}: call model.compile(optimizer, loss) first")

    def _logs(self, loss, pred, y):
        logs = {"loss": float(loss)}
        for name, metric in (self._metric_fns or {}).items():
            logs[name] = metric(pred, y)
        return logs

    def train_step(self, x, y):
        """One optimizer step on a batch: zero grads, forward, loss, backward, update.
        Returns the batch's logs ({"loss": ..., "accuracy": ...}).

        A NaN or infinite loss raises :class:`NonFiniteLossError` before the backward
        pass: the weights and the optimizer are left as they were."""
        self._require_compiled("train_step")
        self.zero_grad()
        pred = self.forward(x, training=True)
        loss, dpred = self.loss_fn(pred, y)
        logs = self._logs(loss, pred, y)
        if self._on_nonfinite != "ignore" and not math.isfinite(logs["loss"]):
            self.clear_caches()
            raise NonFiniteLossError(f"train_step: the loss is {logs['loss']}; the update was "
                                     f"not applied; {HINT}", logs)
        self.backward(dpred)
        self.optimizer.step(self.named_parameters(trainable_only=True),
                            self.named_gradients(trainable_only=True))
        return logs

    def predict(self, x, batch_size=256):
        """Outputs in inference mode, computed batch by batch; zero examples give an
        empty ``(0, ...)`` array of the output's shape and dtype."""
        x, _ = check_data("predict", x, need_y=False, allow_empty=True)
        batch_size = positive_int("predict", "batch_size", batch_size)
        check_layout("predict", self, x)
        xp = array_module(x)
        if x.shape[0] == 0:  # one all-zero example gives the output's shape and dtype
            return self.forward(xp.zeros((1, *x.shape[1:]), dtype=x.dtype), training=False)[:0]
        outputs = [self.forward(xb, training=False)
                   for xb in batches(x, None, batch_size, shuffle=False)]
        return xp.concatenate(outputs, axis=0)

    def evaluate(self, x, y, batch_size=256):
        """Mean loss (and metrics) over the dataset in inference mode."""
        self._require_compiled("evaluate")
        x, y = check_data("evaluate", x, y)
        batch_size = positive_int("evaluate", "batch_size", batch_size)
        check_layout("evaluate", self, x)
        totals, count = {}, 0
        for xb, yb in batches(x, y, batch_size, shuffle=False):
            pred = self.forward(xb, training=False)
            loss, _ = self.loss_fn(pred, yb)
            for key, value in self._logs(loss, pred, yb).items():
                totals[key] = totals.get(key, 0.0) + value * len(xb)
            count += len(xb)
        return {key: value / count for key, value in totals.items()}

    def fit(self, x, y, epochs=1, batch_size=32, validation_data=None, callbacks=(), rng=None,
            verbose=1, shuffle=True, initial_epoch=0, validation_split=None,
            on_nonfinite=None):
        """Train for ``epochs`` epochs; returns a :class:`History`.

        ``rng`` (Generator or seed) drives the shuffling; the same seed gives the same
        run. ``validation_data=(x_val, y_val)`` is evaluated after every epoch (logged as
        ``val_*``); ``validation_split=0.1`` holds out the last 10% of ``x``/``y``
        (taken before shuffling) for that instead. ``initial_epoch`` resumes the epoch
        count (e.g. from a checkpoint). ``on_nonfinite`` ("raise", "stop" or "ignore")
        says what a NaN or infinite loss does (see :mod:`handgrad.training`).
        """
        self._require_compiled("fit")
        for name, value, low in (("epochs", epochs, 0), ("batch_size", batch_size, 1),
                                 ("initial_epoch", initial_epoch, 0)):
            if not is_int(value) or value < low:
                raise ValueError(f"fit: '{name}' must be an int >= {low}; received {value!r}")
        x, y = check_data("fit", x, y)
        x, y, validation_data = split_validation("fit", x, y, validation_split,
                                                 validation_data)
        validation_data = check_validation_data("fit", validation_data, x)
        check_layout("fit", self, x)
        if validation_data is not None:
            check_layout("fit", self, validation_data[0], "x_val")
        callbacks = self._fit_callbacks(callbacks, validation_data is not None)
        if on_nonfinite is None:
            terminate = any(isinstance(c, TerminateOnNaN) for c in callbacks)
            on_nonfinite = "ignore" if terminate else "raise"
        on_nonfinite = choice("fit", "on_nonfinite", on_nonfinite, NONFINITE)
        run = _Run(x, y, epochs, batch_size, num_batches(len(x), batch_size),
                   as_generator("fit", "rng", rng), shuffle, callbacks, verbose,
                   validation_data, on_nonfinite)
        self.stop_training = False
        self._on_nonfinite = on_nonfinite
        try:
            self._notify(callbacks, "on_train_begin", {})
            for epoch in range(initial_epoch, epochs):
                self._notify(callbacks, "on_epoch_begin", epoch)
                logs = self._run_epoch(run, epoch)
                self._notify(callbacks, "on_epoch_end", epoch, logs)
                if self.stop_training:
                    break
            self._notify(callbacks, "on_train_end", {})
        finally:
            del self._on_nonfinite  # back to the class default
        return callbacks[0]

    def _fit_callbacks(self, callbacks, validating):
        """``[History(), *callbacks]``, each attached to the model and checked against
        the keys the epoch logs will have."""
        if not isinstance(callbacks, (list, tuple)):
            raise TypeError(f"fit: 'callbacks' must be a list of Callback objects; received "
                            f"{describe(callbacks)}")
        callbacks = [History(), *callbacks]
        names = ["loss", *self.metrics]
        keys = {*names, *(f"val_{name}" for name in names if validating), "lr", "seconds"}
        for callback in callbacks:
            if not isinstance(callback, Callback):
                raise TypeError(f"fit: 'callbacks' must hold Callback objects; received "
                                f"{describe(callback)}")
        for callback in callbacks:
            callback.set_model(self)
            callback.check_logs(keys)
        return callbacks

    def _run_epoch(self, run, epoch):
        bar = ProgressBar(run.steps, f"Epoch {epoch + 1}/{run.epochs}", enabled=run.verbose > 0)
        totals, seen, start = {}, 0, time.perf_counter()
        for step, (xb, yb) in enumerate(batches(run.x, run.y, run.batch_size,
                                                shuffle=run.shuffle, rng=run.rng)):
            logs = self._checked_step(run, epoch, step, xb, yb)
            for key, value in logs.items():
                totals[key] = totals.get(key, 0.0) + value * len(xb)
            seen += len(xb)
            self._notify(run.callbacks, "on_train_batch_end", step, logs)
            averages = {key: value / seen for key, value in totals.items()}
            bar.update(step + 1, averages, seen / max(time.perf_counter() - start, 1e-9))
            if self.stop_training:
                break
        logs = {key: value / max(seen, 1) for key, value in totals.items()}
        if run.validation_data is not None and not self.stop_training:
            val = self.evaluate(*run.validation_data, batch_size=max(run.batch_size, 256))
            logs.update({f"val_{key}": value for key, value in val.items()})
        logs["lr"] = float(self.optimizer.lr)
        logs["seconds"] = time.perf_counter() - start
        bar.finish(logs)
        return logs

    def _checked_step(self, run, epoch, step, xb, yb):
        """``train_step``, then the ``on_nonfinite`` policy for a NaN or infinite loss."""
        try:
            logs, applied = self.train_step(xb, yb), True
        except NonFiniteLossError as error:
            logs, applied = error.logs, False
        loss = logs.get("loss")
        if run.on_nonfinite == "ignore" or loss is None or math.isfinite(loss):
            return logs
        where = f"at epoch {epoch + 1}, step {step + 1} of {run.steps}"
        weights = ("its update was not applied, so the weights are those from before it"
                   if not applied else "a custom train_step already applied its update")
        inputs = ("the batch's inputs are finite" if _finite_inputs(xb)
                  else "the batch's inputs already hold NaN or inf")
        if run.on_nonfinite == "raise":
            raise NonFiniteLossError(
                f"fit: the loss is {loss} {where}; {weights}; {inputs}; {HINT}; pass "
                f"fit(on_nonfinite='stop') to end training without an error, or "
                f"on_nonfinite='ignore' to train on", logs, epoch + 1, step + 1)
        self.stop_training = True
        if run.verbose:
            print(f"fit: the loss is {loss} {where}; stopping training (on_nonfinite='stop'); "
                  f"{weights}", file=sys.stderr)
        return logs

    @staticmethod
    def _notify(callbacks, method, *args):
        for callback in callbacks:
            getattr(callback, method)(*args)
