"""``fit``, ``evaluate`` and ``predict`` with ``distributed=True``: the glue between the
training loop and :mod:`handgrad.distributed` (MPI).

Every process runs ``fit`` on the whole data set with the same arguments. They check
that (an allgather of the data sizes and settings), take rank 0's weights, buffers and
random generators (the shuffling ``rng`` included, so ``rng=None`` works too), then walk
the same global batches: the augmentation, if any, runs on the global batch, and
:class:`ShardedStep` trains on this process's share of it (see
:class:`handgrad.distributed.GradientReducer`). The logs of each step are the
example-weighted means over the global batch, so callbacks decide alike everywhere.
Only rank 0 prints progress and runs the callbacks that write files
(``Callback.rank_zero_only``). An exception on one process ends the whole job
(``MPI_Abort``) with its message, except those every process raises at the same point
(a NaN loss, mismatched data), which propagate as in one process.
"""

from __future__ import annotations

import numpy as np

from .. import distributed as dist
from .._checks import array_module, describe
from ..data.batching import take
from . import regularization
from .data import count
from .epochs import NonFiniteLossError, streamed

COLLECTIVE_ERRORS = (NonFiniteLossError, dist.RankMismatchError)


def run(function, *args, **kwargs):
    """``function(*args, **kwargs)`` inside the MPI job: MPI started, and an exception
    other than :data:`COLLECTIVE_ERRORS` ends every process (see
    :func:`handgrad.distributed.comm.run_or_abort`)."""
    dist.init()
    return dist.comm.run_or_abort(function, *args, passthrough=COLLECTIVE_ERRORS, **kwargs)


def prepare(model, run_):
    """Check that every process trains alike on ``run_`` (an
    :class:`~handgrad.training.epochs.Run` with checked data and rng) and give every
    process rank 0's weights, buffers and shuffling state; returns the
    :class:`~handgrad.distributed.GradientReducer` to close when ``fit`` ends."""
    if model._custom("train_step"):
        raise ValueError("fit: distributed=True trains with the built-in train_step; a custom "
                         "train_step must sum its gradients itself (handgrad.distributed."
                         "GradientReducer, see its docstring)")
    if regularization.has_activity(model):
        raise ValueError("fit: distributed=True does not take layers with an "
                         "activity_regularizer (its gradient is per process batch); use "
                         "kernel_regularizer/bias_regularizer, or train in one process")
    validation = run_.validation_data
    dist.check_same("fit (each process takes its share of every global batch itself)", {
        "examples": count(run_.x), "batch_size": run_.batch_size, "epochs": run_.epochs,
        "initial_epoch": run_.initial_epoch, "shuffle": run_.shuffle,
        "validation examples": None if validation is None else count(validation[0])})
    run_.rng.bit_generator.state = dist.broadcast(run_.rng.bit_generator.state)
    dist.broadcast_parameters(model)
    return dist.GradientReducer(model)


def wiring(model, reducer, callbacks, verbose) -> dict:
    """The data-parallel parts of a run: the sharded ``step``, the gathered ``evaluate``,
    and, on ranks other than 0, no progress (``verbose`` 0) and no callbacks that write
    files (``Callback.rank_zero_only``)."""
    lead = dist.rank() == 0
    return {"step": ShardedStep(model, reducer),
            "evaluate": lambda x, y, batch_size, hooked, w: model.evaluation_logs(
                x, y, batch_size, hooked, distributed=True, sample_weight=w),
            "verbose": verbose if lead else 0,
            "callbacks": callbacks if lead else [
                c for c in callbacks if not getattr(c, "rank_zero_only", False)]}


def _scaled(gradient, weight):
    if gradient is None:
        return None
    return gradient * gradient.dtype.type(weight)


class ShardedStep:
    """The built-in ``train_step`` on this process's share of a global batch: forward,
    the logs' means over the global batch (a NaN or infinite loss raises
    :class:`NonFiniteLossError` on every process before backward), backward of the loss
    gradient times ``share / batch``, the gradients' allreduce, the optimizer step."""

    def __init__(self, model, reducer):
        self.model, self.reducer = model, reducer

    def _local(self, x, y, w):
        """``(logs, output gradients)`` of the share (zeros for an empty share, which
        still runs forward and backward: BatchNorm and Dropout take part everywhere).
        Sample weights ``w`` give sum w l / share; the allreduce's ``share / batch`` makes
        it sum w l / batch, Keras's weighted mean of the global batch."""
        model = self.model
        if count(x):
            return model._step_logs(x, y, training=True, sample_weight=w)
        single = getattr(model, "single_output", True)
        preds = model.forward(x, training=True)
        preds = [preds] if single else list(preds)
        objective = model._objective
        grads = [None if objective.losses[name] is None or objective.weights[name] == 0.0
                 else array_module(pred).zeros_like(pred)
                 for name, pred in zip(objective.names, preds)]
        return dict.fromkeys(objective.keys(), 0.0), grads[0] if single else grads

    def __call__(self, x, y, sample_weight=None):
        model, reducer = self.model, self.reducer
        part = reducer.batch(count(x))
        model.zero_grad()
        logs, dpred = self._local(take(x, part), take(y, part), take(sample_weight, part))
        logs = reducer.mean(logs)  # the same on every rank: so is the decision below
        logs = streamed(model, logs, dist.allgather)  # streaming metrics: summed counts
        if not model._backward_needed(logs, dpred):
            return logs
        weight = reducer.weight
        dpred = [_scaled(g, weight) for g in dpred] if isinstance(dpred, list) else \
            _scaled(dpred, weight)
        model.backward(dpred, input_grad=False)
        reducer.reduce()
        model._apply_gradients()
        return logs


def evaluate(model, x, y, batch_size, callbacks=(), sample_weight=None):
    """``model.evaluate``'s logs of the whole data set, each process measuring its share
    (``callbacks`` see its batches); the example-weighted sums are gathered and added in
    rank order, so every process gets the same means."""
    part = dist.shard(count(x))
    gathered = dist.allgather(model.evaluation_totals(
        take(x, part), take(y, part), batch_size, callbacks,
        sample_weight=take(sample_weight, part)))
    totals, seen = {}, 0
    for rank_totals, rank_seen in gathered:
        for key, value in rank_totals.items():
            totals[key] = totals.get(key, 0.0) + value
        seen += rank_seen
    if seen == 0:
        raise ValueError(f"evaluate: 'x' has no examples (received {describe(x)}); evaluate "
                         f"needs at least one")
    return streamed(model, {key: value / seen for key, value in totals.items()}, dist.allgather)


def predict(model, x, batch_size, callbacks=()):
    """``model.predict`` of the whole data set: each process predicts its share (its
    ``callbacks`` see those batches), and the shares are gathered in rank order on every
    process."""
    outputs = model.predict(take(x, dist.shard(count(x))), batch_size=batch_size,
                            callbacks=callbacks)
    single = not isinstance(outputs, list)
    gathered = dist.allgather([outputs] if single else outputs)
    columns = [np.concatenate(column, axis=0) for column in zip(*gathered)]
    return columns[0] if single else columns
