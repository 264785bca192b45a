"""The training loop: compile, train_step, fit, evaluate, predict."""

from __future__ import annotations

import time

import numpy as np

from . import losses, optimizers
from ._checks import as_generator, describe, is_int
from .callbacks import Callback, History
from .data.batching import batches, num_batches
from .progress import ProgressBar

METRICS = ("accuracy",)


def accuracy(pred, y):
    """Fraction of rows whose arg-max matches the integer label (or one-hot arg-max)."""
    if pred.shape[-1] == 1:  # one logit: class 1 when the logit is > 0
        return float(np.mean((pred[..., 0] > 0) == (y.reshape(pred.shape[:-1]) > 0.5)))
    labels = y if y.ndim == pred.ndim - 1 else np.argmax(y, axis=-1)
    return float(np.mean(np.argmax(pred, axis=-1) == labels))


def _check_validation_data(validation_data):
    if validation_data is None:
        return
    if not isinstance(validation_data, (tuple, list)) or len(validation_data) != 2:
        raise ValueError("fit: 'validation_data' must be a pair (x_val, y_val); received "
                         f"{describe(validation_data)}")
    x_val, y_val = validation_data
    if not (hasattr(x_val, "shape") and hasattr(y_val, "shape")) or len(x_val) != len(y_val):
        raise ValueError("fit: 'validation_data' must be two arrays of the same length; "
                         f"received {describe(x_val)} and {describe(y_val)}")


class TrainingMixin:
    """Training methods for a model with forward/backward/named_parameters."""

    optimizer = None
    loss_fn = None
    metrics: tuple = ()
    stop_training = False

    def compile(self, optimizer="adam", loss="cross_entropy", metrics=("accuracy",)):
        """Choose the optimizer (name or instance), the loss (name or callable
        ``(pred, y) -> (loss, dpred)``) and metrics (``"accuracy"``)."""
        self.optimizer = optimizers.get(optimizer)
        self.loss_fn = losses.get(loss)
        self.loss_name = loss if isinstance(loss, str) else getattr(loss, "__name__", "loss")
        metrics = tuple(metrics or ())
        for metric in metrics:
            if metric not in METRICS:
                raise ValueError(f"compile: 'metrics' entries must be one of {METRICS}; "
                                 f"received {metric!r}")
        self.metrics = metrics
        return self

    def _require_compiled(self, what):
        if self.optimizer is None or self.loss_fn is None:
            raise RuntimeError(f"{what}: call model.compile(optimizer, loss) first")

    def _logs(self, loss, pred, y):
        logs = {"loss": float(loss)}
        if "accuracy" in self.metrics:
            logs["accuracy"] = accuracy(pred, y)
        return logs

    def train_step(self, x, y):
        """One optimizer step on a batch: zero grads, forward, loss, backward, update.
        Returns the batch's logs ({"loss": ..., "accuracy": ...})."""
        self._require_compiled("train_step")
        self.zero_grad()
        pred = self.forward(x, training=True)
        loss, dpred = self.loss_fn(pred, y)
        self.backward(dpred)
        self.optimizer.step(self.named_parameters(trainable_only=True),
                            self.named_gradients(trainable_only=True))
        return self._logs(loss, pred, y)

    def predict(self, x, batch_size=256):
        """Outputs in inference mode, computed batch by batch."""
        outputs = [self.forward(xb, training=False)
                   for xb in batches(x, None, batch_size, shuffle=False)]
        return np.concatenate(outputs, axis=0)

    def evaluate(self, x, y, batch_size=256):
        """Mean loss (and metrics) over the dataset in inference mode."""
        self._require_compiled("evaluate")
        totals, count = {}, 0
        for xb, yb in batches(x, y, batch_size, shuffle=False):
            pred = self.forward(xb, training=False)
            loss, _ = self.loss_fn(pred, yb)
            for key, value in self._logs(loss, pred, yb).items():
                totals[key] = totals.get(key, 0.0) + value * len(xb)
            count += len(xb)
        return {key: value / count for key, value in totals.items()}

    def fit(self, x, y, epochs=1, batch_size=32, validation_data=None, callbacks=(), rng=None,
            verbose=1, shuffle=True, initial_epoch=0):
        """Train for ``epochs`` epochs; returns a :class:`History`.

        ``rng`` (Generator or seed) drives the shuffling; the same seed gives the same
        run. ``validation_data=(x_val, y_val)`` is evaluated after every epoch.
        ``initial_epoch`` resumes the epoch count (e.g. from a checkpoint).
        """
        self._require_compiled("fit")
        for name, value, low in (("epochs", epochs, 0), ("batch_size", batch_size, 1),
                                 ("initial_epoch", initial_epoch, 0)):
            if not is_int(value) or value < low:
                raise ValueError(f"fit: '{name}' must be an int >= {low}; received {value!r}")
        _check_validation_data(validation_data)
        if not isinstance(callbacks, (list, tuple)):
            raise TypeError(f"fit: 'callbacks' must be a list of Callback objects; received "
                            f"{describe(callbacks)}")
        rng = as_generator("fit", "rng", rng)
        history = History()
        callbacks = [history, *callbacks]
        for callback in callbacks:
            if not isinstance(callback, Callback):
                raise TypeError(f"fit: 'callbacks' must hold Callback objects; received "
                                f"{describe(callback)}")
            callback.set_model(self)
        self.stop_training = False
        steps = num_batches(len(x), batch_size)
        self._notify(callbacks, "on_train_begin", {})
        for epoch in range(initial_epoch, epochs):
            self._notify(callbacks, "on_epoch_begin", epoch)
            logs = self._run_epoch(x, y, epoch, epochs, batch_size, steps, rng, shuffle,
                                   callbacks, verbose, validation_data)
            self._notify(callbacks, "on_epoch_end", epoch, logs)
            if self.stop_training:
                break
        self._notify(callbacks, "on_train_end", {})
        return history

    def _run_epoch(self, x, y, epoch, epochs, batch_size, steps, rng, shuffle, callbacks,
                   verbose, validation_data):
        bar = ProgressBar(steps, f"Epoch {epoch + 1}/{epochs}", enabled=verbose > 0)
        totals, seen, start = {}, 0, time.perf_counter()
        for step, (xb, yb) in enumerate(batches(x, y, batch_size, shuffle=shuffle, rng=rng)):
            logs = self.train_step(xb, yb)
            for key, value in logs.items():
                totals[key] = totals.get(key, 0.0) + value * len(xb)
            seen += len(xb)
            self._notify(callbacks, "on_train_batch_end", step, logs)
            averages = {key: value / seen for key, value in totals.items()}
            bar.update(step + 1, averages, seen / max(time.perf_counter() - start, 1e-9))
            if self.stop_training:
                break
        logs = {key: value / max(seen, 1) for key, value in totals.items()}
        if validation_data is not None and not self.stop_training:
            val = self.evaluate(*validation_data, batch_size=max(batch_size, 256))
            logs.update({f"val_{key}": value for key, value in val.items()})
        logs["lr"] = float(self.optimizer.lr)
        logs["seconds"] = time.perf_counter() - start
        bar.finish(logs)
        return logs

    @staticmethod
    def _notify(callbacks, method, *args):
        for callback in callbacks:
            getattr(callback, method)(*args)
