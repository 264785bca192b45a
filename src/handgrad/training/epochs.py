"""One epoch of ``fit``: batches, steps, the NaN policy, the epoch's logs.

``fit`` describes a call in a :class:`Run`; :func:`run_epoch` walks the epoch's batches
through ``run.step`` (the model's ``train_step``, or the data-parallel step of
:mod:`.parallel`, which takes this process's share of each batch) and averages the
logs weighted by batch size; a streaming metric (:mod:`handgrad.metrics.streaming`) logs
the figure of its counts, reset when the epoch begins.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from dataclasses import dataclass

from .._checks import array_module
from .._device import to_device
from ..data.batching import leaves
from .data import count, weighted_batches
from .hooks import notify
from .progress import epoch_bar
from .streams import Stream

HINT = ("to find the first layer that produces NaN or inf, run it inside "
        "`with handgrad.inspect.detect_anomaly(model):`")


class NonFiniteLossError(FloatingPointError):
    """A training step's loss is NaN or infinite (raised before its update). ``loss`` is
    the value, ``logs`` the step's logs, ``epoch`` and ``step`` (1-based) say where when
    ``fit`` raised it (None from a bare ``train_step``)."""

    def __init__(self, message, logs, epoch=None, step=None):
        super().__init__(message)
        self.logs, self.loss, self.epoch, self.step = logs, logs.get("loss"), epoch, step


@dataclass(frozen=True)
class Run:
    """One ``fit`` call: its options as given (``fit`` makes the Run and hands it, through
    :func:`handgrad.training.parallel.run` under MPI, to the epoch loop), then checked
    once by ``fit`` into the run the epochs walk: ``steps`` per epoch, ``step(xb, yb) ->
    logs`` (the model's ``train_step``, or the data-parallel one), ``evaluate(x, y,
    batch_size, callbacks) -> logs`` for the validation data (calling the ``on_test_*``
    hooks). Frozen: nothing rewires a run once it is made."""

    x: object
    y: object = None
    epochs: int = 1
    batch_size: int = 32
    validation_data: object = None
    callbacks: object = ()
    rng: object = None
    verbose: int = 1
    shuffle: bool = True
    initial_epoch: int = 0
    validation_split: object = None
    on_nonfinite: object = None
    augment: object = None
    distributed: bool = False
    steps_per_epoch: object = None
    validation_steps: object = None
    sample_weight: object = None  # checked: the (N,) weights of sample and class weights
    class_weight: object = None
    steps: object = 0  # None: unknown (an iterable without steps_per_epoch)
    step: object = None
    evaluate: object = None


def finite_inputs(xb) -> bool:
    """Whether every float array of the batch ``xb`` is finite."""
    return all(getattr(a.dtype, "kind", "") != "f" or bool(array_module(a).isfinite(a).all())
               for _, a in leaves("x", xb))


def epoch_batches(run):
    """The ``(xb, yb, wb)`` of one epoch (``wb`` the batch's (B,) sample weights or None):
    the next batches of a :class:`Stream`, else the first ``run.steps`` batches of the
    arrays (shuffled each epoch)."""
    if isinstance(run.x, Stream):
        return run.x.batches()
    return itertools.islice(weighted_batches(run.x, run.y, run.sample_weight, run.batch_size,
                                             shuffle=run.shuffle, rng=run.rng), run.steps)


def run_epoch(model, run, epoch):
    """Train ``model`` for one epoch of ``run``; returns the epoch's logs."""
    examples = None if isinstance(run.x, Stream) else count(run.x)
    bar = epoch_bar(run.callbacks, f"Epoch {epoch + 1}/{run.epochs}", run.steps,
                    run.batch_size, examples, run.verbose)
    totals, seen, start = {}, 0, time.perf_counter()
    streams = reset_metrics(model)
    logs = {}
    step = -1
    for step, (xb, yb, wb) in enumerate(epoch_batches(run)):
        xb = xb if run.augment is None else run.augment(xb, run.rng)  # not validation
        xb, yb, wb = to_device((xb, yb, wb), getattr(model, "device", "cpu"))  # once a batch
        notify(run.callbacks, "on_train_batch_begin", step, {})
        logs = checked_step(model, run, epoch, step, xb, yb, wb)
        n = count(xb)
        for key, value in logs.items():
            totals[key] = totals.get(key, 0.0) + value * n
        seen += n
        notify(run.callbacks, "on_train_batch_end", step, logs)
        averages = {key: value / seen for key, value in totals.items()}
        averages.update({key: logs[key] for key in (*streams, *bar.stateful) if key in logs})
        bar.update(seen if bar.samples else step + 1, averages,
                   seen / max(time.perf_counter() - start, 1e-9))
        if model.stop_training:
            break
    # a streaming metric's figure is that of its counts so far: the last step's, not a mean
    logs = {**{key: value / max(seen, 1) for key, value in totals.items()},
            **{key: logs[key] for key in streams if key in logs}}
    notify(run.callbacks, "set_epoch_examples", seen, time.perf_counter() - start)
    if run.validation_data is not None and not model.stop_training:
        x_val, y_val, w_val = run.validation_data
        val = run.evaluate(x_val, y_val, max(run.batch_size, 256), run.callbacks, w_val)
        logs.update({f"val_{key}": value for key, value in val.items()})
    if model.optimizer is not None:
        logs["lr"] = float(model.optimizer.lr)
    logs["seconds"] = time.perf_counter() - start
    bar.finish(logs, seen if bar.samples else step + 1)
    return logs


def reset_metrics(model) -> tuple:
    """Zero the compiled streaming metrics' counts (:mod:`handgrad.metrics.streaming`);
    their log keys."""
    objective = getattr(model, "_objective", None)
    if objective is None:
        return ()
    objective.reset_metrics()
    return tuple(objective.streams())


def streamed(model, logs: dict, gather=None) -> dict:
    """``logs`` with each streaming metric's figure computed from its counts (summed over
    the MPI processes by ``gather``, an allgather) in place of the mean of its batch logs."""
    objective = getattr(model, "_objective", None)
    if objective is None or not objective.streams():
        return logs
    return {**logs, **{key: value for key, value in objective.merged_results(gather).items()
                       if key in logs}}


def checked_step(model, run, epoch, step, xb, yb, wb=None):
    """``run.step`` (with ``sample_weight=wb`` when weighted), then the ``on_nonfinite``
    policy for a NaN or infinite loss."""
    try:
        logs = run.step(xb, yb) if wb is None else run.step(xb, yb, sample_weight=wb)
        applied = True
    except NonFiniteLossError as error:
        logs, applied = error.logs, False
    loss = logs.get("loss")
    if run.on_nonfinite == "ignore" or loss is None or math.isfinite(loss):
        return logs
    where = f"at epoch {epoch + 1}, step {step + 1} of {run.steps or '?'}"
    weights = ("its update was not applied, so the weights are those from before it"
               if not applied else "a custom train_step already applied its update")
    inputs = ("the batch's inputs are finite" if finite_inputs(xb)
              else "the batch's inputs already hold NaN or inf")
    if run.on_nonfinite == "raise":
        raise NonFiniteLossError(
            f"fit: the loss is {loss} {where}; {weights}; {inputs}; {HINT}; pass "
            f"fit(on_nonfinite='stop') to end training without an error, or "
            f"on_nonfinite='ignore' to train on", logs, epoch + 1, step + 1)
    model.stop_training = True
    if run.verbose:
        print(f"fit: the loss is {loss} {where}; stopping training (on_nonfinite='stop'); "
              f"{weights}", file=sys.stderr)
    return logs
