"""``predict`` and ``evaluate``: inference over a data set, batch by batch.

With ``distributed=True`` (inside an MPI job, see :mod:`handgrad.distributed`) each
process takes a contiguous share of the data set; ``evaluate`` sums the losses and
metrics weighted by examples over the processes and ``predict`` gathers every share, so
every process gets the result for the whole data set.
"""

from __future__ import annotations

from .._checks import array_module, positive_int
from .._hyper import flag
from ..data.batching import batches, leaves
from . import hooks, parallel
from .checks import check_layout
from .data import batch_pairs, count, model_data
from .epochs import reset_metrics, streamed


def as_list(value, single):
    """``[value]`` for a model with one output, else ``list(value)``."""
    return [value] if single else list(value)


def keras_result(logs: dict, return_dict: bool):
    """What Keras's ``evaluate`` returns: ``logs`` with ``return_dict``, else the scalar
    loss when it is the only entry, else the values in the logs' order."""
    if return_dict:
        return logs
    values = list(logs.values())
    return values[0] if len(values) == 1 else values


class EvaluationMixin:
    """Inference methods of a model with forward, ``test_step`` and the data checks of
    :class:`~handgrad.training.TrainingMixin`."""

    def predict(self, x, batch_size=256, *, callbacks=(), distributed=False):
        """Outputs in inference mode, computed batch by batch: an array, or a list in
        output order for a model with several outputs. ``x`` is an array, a list in input
        order or a dict keyed by input names. Zero examples give empty ``(0, ...)``
        arrays of the outputs' shapes and dtypes. ``callbacks`` get the ``on_predict_*``
        hooks. ``distributed=True``: each process predicts its share and every process
        gets all the outputs."""
        x, _ = model_data("predict", self, x, need_y=False, allow_empty=True)
        batch_size = positive_int("predict", "batch_size", batch_size)
        check_layout("predict", self, x)
        callbacks = hooks.prepare("predict", callbacks, self)
        if flag("predict", "distributed", distributed):
            return parallel.run(parallel.predict, self, x, batch_size, callbacks)
        hooks.notify(callbacks, "on_predict_begin", {})
        single = getattr(self, "single_output", True)
        arrays = [array for _, array in leaves("x", x)]
        xp = array_module(*arrays)
        if count(x) == 0:  # one all-zero example gives the output's shape and dtype
            zeros = [xp.zeros((1, *a.shape[1:]), dtype=a.dtype) for a in arrays]
            outputs = as_list(self.forward(zeros if isinstance(x, list) else zeros[0],
                                           training=False), single)
            outputs = [out[:0] for out in outputs]
        else:
            parts = []
            for index, xb in enumerate(batches(x, None, batch_size, shuffle=False)):
                hooks.notify(callbacks, "on_predict_batch_begin", index, {})
                parts.append(as_list(self.forward(xb, training=False), single))
                hooks.notify(callbacks, "on_predict_batch_end", index,
                             {"outputs": parts[-1][0] if single else parts[-1]})
            outputs = [xp.concatenate(column, axis=0) for column in zip(*parts)]
        hooks.notify(callbacks, "on_predict_end", {})
        return outputs[0] if single else outputs

    def evaluate(self, x, y, batch_size=256, *, callbacks=(), return_dict=False,
                 distributed=False):
        """Mean loss and metrics over the data set in inference mode, as Keras gives
        them: the loss (a float) when there are no metrics, else a list in the order of
        the logs (``loss, accuracy = model.evaluate(x, y)``); ``return_dict=True`` gives
        the dict ``{"loss": ..., "accuracy": ...}``. ``x`` and ``y`` as for :meth:`fit`;
        ``callbacks`` get the ``on_test_*`` hooks. ``distributed=True``: each process
        evaluates its share and the results are reduced (every process gets the means
        over the whole data set; a streaming metric, the figure of every process's counts
        summed)."""
        if not self._custom("test_step"):
            self._require_compiled("evaluate")
        distributed = flag("evaluate", "distributed", distributed)
        return_dict = flag("evaluate", "return_dict", return_dict)
        x, y = self._data("evaluate", x, y, "test_step", allow_empty=distributed)
        batch_size = positive_int("evaluate", "batch_size", batch_size)
        if not self._custom("test_step"):
            check_layout("evaluate", self, x)
        callbacks = hooks.prepare("evaluate", callbacks, self)
        if distributed:
            logs = parallel.run(self.evaluation_logs, x, y, batch_size, callbacks, distributed=True)
        else:
            logs = self.evaluation_logs(x, y, batch_size, callbacks)
        return keras_result(logs, return_dict)

    def evaluation_logs(self, x, y, batch_size, callbacks=(), distributed=False):
        """The logs of ``evaluate`` (a dict) for checked ``x``, ``y``, between the
        ``on_test_begin`` and ``on_test_end`` hooks; ``distributed``: inside the MPI job,
        each process measuring its share."""
        hooks.notify(callbacks, "on_test_begin", {})
        if distributed:
            logs = parallel.evaluate(self, x, y, batch_size, callbacks)
        else:
            totals, seen = self.evaluation_totals(x, y, batch_size, callbacks)
            logs = streamed(self, {key: value / seen for key, value in totals.items()})
        hooks.notify(callbacks, "on_test_end", logs)
        return logs

    def evaluation_totals(self, x, y, batch_size, callbacks=()):
        """``({key: sum over examples of the logs}, examples)`` of ``test_step`` on
        ``x``, ``y`` (already checked), batch by batch, each between the
        ``on_test_batch_begin`` and ``on_test_batch_end`` hooks."""
        totals, seen = {}, 0
        reset_metrics(self)
        for index, (xb, yb) in enumerate(batch_pairs(x, y, batch_size, shuffle=False)):
            hooks.notify(callbacks, "on_test_batch_begin", index, {})
            n, logs = count(xb), self.test_step(xb, yb)
            for key, value in logs.items():
                totals[key] = totals.get(key, 0.0) + value * n
            seen += n
            hooks.notify(callbacks, "on_test_batch_end", index, logs)
        return totals, seen
