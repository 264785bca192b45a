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
from . import parallel
from .checks import check_layout
from .data import batch_pairs, count, model_data


def as_list(value, single):
    """``[value]`` for a model with one output, else ``list(value)``."""
    return [value] if single else list(value)


class EvaluationMixin:
    """Inference methods of a model with forward, ``test_step`` and the data checks of
    :class:`~handgrad.training.TrainingMixin`."""

    def predict(self, x, batch_size=256, distributed=False):
        """Outputs in inference mode, computed batch by batch: an array, or a list in
        output order for a model with several outputs. ``x`` is an array, a list in input
        order or a dict keyed by input names. Zero examples give empty ``(0, ...)``
        arrays of the outputs' shapes and dtypes. ``distributed=True``: each process
        predicts its share and every process gets all the outputs."""
        x, _ = model_data("predict", self, x, need_y=False, allow_empty=True)
        batch_size = positive_int("predict", "batch_size", batch_size)
        check_layout("predict", self, x)
        if flag("predict", "distributed", distributed):
            return parallel.run(parallel.predict, self, x, batch_size)
        single = getattr(self, "single_output", True)
        arrays = [array for _, array in leaves("x", x)]
        xp = array_module(*arrays)
        if count(x) == 0:  # one all-zero example gives the output's shape and dtype
            zeros = [xp.zeros((1, *a.shape[1:]), dtype=a.dtype) for a in arrays]
            outputs = as_list(self.forward(zeros if isinstance(x, list) else zeros[0],
                                           training=False), single)
            outputs = [out[:0] for out in outputs]
            return outputs[0] if single else outputs
        parts = [as_list(self.forward(xb, training=False), single)
                 for xb in batches(x, None, batch_size, shuffle=False)]
        outputs = [xp.concatenate(column, axis=0) for column in zip(*parts)]
        return outputs[0] if single else outputs

    def evaluate(self, x, y, batch_size=256, distributed=False):
        """Mean loss (and metrics) over the dataset in inference mode; ``x`` and ``y`` as
        for :meth:`fit`. ``distributed=True``: each process evaluates its share and the
        results are reduced (every process gets the means over the whole data set)."""
        if not self._custom("test_step"):
            self._require_compiled("evaluate")
        distributed = flag("evaluate", "distributed", distributed)
        x, y = self._data("evaluate", x, y, "test_step", allow_empty=distributed)
        batch_size = positive_int("evaluate", "batch_size", batch_size)
        if not self._custom("test_step"):
            check_layout("evaluate", self, x)
        if distributed:
            return parallel.run(parallel.evaluate, self, x, y, batch_size)
        totals, seen = self.evaluation_totals(x, y, batch_size)
        return {key: value / seen for key, value in totals.items()}

    def evaluation_totals(self, x, y, batch_size):
        """``({key: sum over examples of the logs}, examples)`` of ``test_step`` on
        ``x``, ``y`` (already checked), batch by batch."""
        totals, seen = {}, 0
        for xb, yb in batch_pairs(x, y, batch_size, shuffle=False):
            n = count(xb)
            for key, value in self.test_step(xb, yb).items():
                totals[key] = totals.get(key, 0.0) + value * n
            seen += n
        return totals, seen
