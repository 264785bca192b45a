"""``predict`` and ``evaluate``: inference over a data set, batch by batch.

With ``distributed=True`` (inside an MPI job, see :mod:`handgrad.distributed`) each
process takes a contiguous share of the data set; ``evaluate`` sums the losses and
metrics weighted by examples over the processes and ``predict`` gathers every share, so
every process gets the result for the whole data set.

Both also take a generator or any iterable of batches (:mod:`.streams`), ``steps=`` (the
number of batches to run, as Keras's) and ``verbose=`` (0: silent, the default; 1: the
progress bar of ``fit``; Keras's default is 1).
"""

from __future__ import annotations

import itertools
import time

from .._checks import array_module, describe, is_int, positive_int
from .._device import to_device, to_host
from .._hyper import flag
from ..data.batching import batches, leaves, num_batches
from . import hooks, parallel
from .checks import check_layout
from .data import count, model_data, weighted_batches
from .epochs import reset_metrics, streamed
from .progress import ProgressBar
from .streams import Stream, check_steps, is_stream
from .weights import example_weights


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

    def predict(self, x, batch_size=256, *, verbose=0, steps=None, callbacks=(),
                distributed=False):
        """Outputs in inference mode, computed batch by batch: an array, or a list in
        output order for a model with several outputs. ``x`` is an array, a list in input
        order or a dict keyed by input names, or an iterable of batches (:mod:`.streams`).
        Zero examples give empty ``(0, ...)`` arrays of the outputs' shapes and dtypes.
        ``steps``: predict only that many batches; ``verbose=1``: a progress bar.
        ``callbacks`` get the ``on_predict_*`` hooks. ``distributed=True``: each process
        predicts its share and every process gets all the outputs."""
        bar = self._bar("predict", verbose)
        steps = check_steps("predict", "steps", steps)
        if is_stream(x):
            x = self._stream("predict", "x", x, None, steps, "steps", None)
        else:
            x, _ = model_data("predict", self, x, need_y=False, allow_empty=True)
            check_layout("predict", self, x)
        batch_size = positive_int("predict", "batch_size", batch_size)
        callbacks = hooks.prepare("predict", callbacks, self)
        single = getattr(self, "single_output", True)
        if flag("predict", "distributed", distributed):
            self._arrays_only("predict", x, steps)
            outputs = parallel.run(parallel.predict, self, x, batch_size, callbacks)
            return outputs if single else self.named_outputs(outputs)
        hooks.notify(callbacks, "on_predict_begin", {})
        device = getattr(self, "device", "cpu")  # inputs moved there, outputs to the host
        if isinstance(x, Stream):
            pairs, xp = x.batches(), None
        else:
            arrays = [array for _, array in leaves("x", x)]
            xp = array_module(*arrays)
            pairs = ((xb, None, None) for xb in batches(x, None, batch_size, shuffle=False))
        if xp is not None and count(x) == 0:  # one all-zero example: the outputs' shapes
            zeros = [xp.zeros((1, *a.shape[1:]), dtype=a.dtype) for a in arrays]
            zeros = to_device(zeros if isinstance(x, list) else zeros[0], device)
            outputs = [to_host(out) for out in as_list(self.forward(zeros, training=False),
                                                       single)]
            outputs = [out[:0] for out in outputs]
        else:
            bar = ProgressBar(self._total(x, batch_size, steps), "predict", bar)
            parts, seen, start = [], 0, time.perf_counter()
            for index, (xb, *_) in enumerate(itertools.islice(pairs, steps)):
                hooks.notify(callbacks, "on_predict_batch_begin", index, {})
                outputs = self.forward(to_device(xb, device), training=False)
                parts.append([to_host(out) for out in as_list(outputs, single)])
                hooks.notify(callbacks, "on_predict_batch_end", index,
                             {"outputs": parts[-1][0] if single else parts[-1]})
                seen += count(xb)
                bar.update(index + 1, {}, seen / max(time.perf_counter() - start, 1e-9))
            bar.finish({}, len(parts))
            xp = xp or array_module(*(a for _, a in leaves("x", parts[0])))
            outputs = [xp.concatenate(column, axis=0) for column in zip(*parts)]
        hooks.notify(callbacks, "on_predict_end", {})
        return outputs[0] if single else self.named_outputs(outputs)

    def named_outputs(self, outputs):
        """A list of outputs as the model was made: a dict for a graph ``Model`` made with
        a dict of outputs (keyed by its names), else the list."""
        keys = getattr(self, "output_keys", None)
        return outputs if keys is None else dict(zip(keys, outputs))

    def _bar(self, op, verbose) -> bool:
        """Whether ``verbose`` (0 or 1, or a bool) asks for a progress bar."""
        if not (is_int(verbose) or isinstance(verbose, bool)) or verbose not in (0, 1, 2):
            raise ValueError(f"{op}: 'verbose' must be 0 (silent), 1 (a progress bar) or 2 "
                             f"(one line); received {describe(verbose)}")
        return bool(verbose)

    @staticmethod
    def _total(x, batch_size, steps):
        """The batches a run over ``x`` takes (None: unknown until a stream ends)."""
        if isinstance(x, Stream):
            return steps
        total = num_batches(count(x), batch_size)
        return total if steps is None else min(steps, total)

    def _stream(self, op, arg, source, y, steps, steps_name, step, class_weight=None):
        """A :class:`Stream` of ``source`` whose batches are checked as ``step``'s data
        (``step`` None: ``predict``'s inputs alone); a batch's ``sample_weight`` (and
        ``class_weight``, ``fit``'s) give its example weights (:mod:`.weights`)."""
        if isinstance(source, Stream):
            return source
        if y is not None:
            raise TypeError(f"{op}: 'y' must be None when '{arg}' is a generator or an "
                            f"iterable of (x, y) batches; received {describe(y)}")
        if step is None:
            def check(label, xb, _):
                return model_data(label, self, xb, need_y=False)[0], None
        else:
            def check(label, xb, yb):
                return self._data(label, xb, yb, step)
        pairs = step is not None and getattr(self, "takes_targets", True)

        def weigh(label, xb, yb, w):
            if w is None and class_weight is None:
                return None
            if self._custom(step):
                raise ValueError(f"{label}: a sample_weight weighs the built-in {step}'s "
                                 f"loss; a custom {step} weighs its examples itself (yield "
                                 f"(x, y))")
            return example_weights(label, self, yb, w, class_weight, count(xb))
        return Stream(op, arg, source, steps=check_steps(op, steps_name, steps),
                      steps_name=steps_name, check=check, pairs=pairs, weigh=weigh)

    @staticmethod
    def _arrays_only(op, x, steps):
        if isinstance(x, Stream) or steps is not None:
            raise ValueError(f"{op}: distributed=True takes arrays and no steps; received "
                             f"{'a generator' if isinstance(x, Stream) else f'steps={steps}'}")

    def evaluate(self, x, y=None, batch_size=256, *, verbose=0, steps=None, callbacks=(),
                 return_dict=False, distributed=False, sample_weight=None, class_weight=None):
        """Mean loss and metrics over the data set in inference mode, as Keras gives
        them: the loss (a float) when there are no metrics, else a list in the order of
        the logs (``loss, accuracy = model.evaluate(x, y)``); ``return_dict=True`` gives
        the dict ``{"loss": ..., "accuracy": ...}``. ``x`` and ``y`` as for :meth:`fit`
        (``x`` may be an iterable of ``(x, y)`` batches, ``y`` then None); ``steps``: only
        that many batches; ``verbose=1``: a progress bar. ``callbacks`` get the
        ``on_test_*`` hooks. ``distributed=True``: each process evaluates its share and
        the results are reduced (every process gets the means over the whole data set; a
        streaming metric, the figure of every process's counts summed). ``sample_weight``
        (N,) weighs each example's loss as Keras (:mod:`handgrad.training.weights`:
        sum w_i l_i / N); ``class_weight`` ``{class: weight}`` weighs each example by its
        class, as in ``fit`` (Keras's ``evaluate`` has only ``sample_weight``; handgrad
        takes both, multiplied, so the evaluation weighs as the training did)."""
        if not self._custom("test_step"):
            self._require_compiled("evaluate")
        distributed = flag("evaluate", "distributed", distributed)
        return_dict = flag("evaluate", "return_dict", return_dict)
        bar = self._bar("evaluate", verbose)
        steps = check_steps("evaluate", "steps", steps)
        if is_stream(x) or isinstance(x, Stream):
            x = self._stream("evaluate", "x", x, y, steps, "steps", "test_step", class_weight)
        else:
            x, y = self._data("evaluate", x, y, "test_step", allow_empty=distributed)
            if not self._custom("test_step"):
                check_layout("evaluate", self, x)
        batch_size = positive_int("evaluate", "batch_size", batch_size)
        if sample_weight is not None and isinstance(x, Stream):
            raise ValueError(f"evaluate: 'sample_weight' is for array data; received a "
                             f"generator 'x' and sample_weight={describe(sample_weight)} "
                             f"(a generator yields its weights: (x, y, sample_weight))")
        weights = None if isinstance(x, Stream) else example_weights(
            "evaluate", self, y, sample_weight, class_weight, count(x))
        if weights is not None and self._custom("test_step"):
            raise ValueError("evaluate: 'sample_weight' and 'class_weight' weigh the built-in "
                             "test_step's loss; a custom test_step weighs its examples itself")
        callbacks = hooks.prepare("evaluate", callbacks, self)
        if distributed:
            self._arrays_only("evaluate", x, steps)
            logs = parallel.run(self.evaluation_logs, x, y, batch_size, callbacks, distributed=True,
                                sample_weight=weights)
        else:
            bar = ProgressBar(self._total(x, batch_size, steps), "evaluate", bar)
            logs = self.evaluation_logs(x, y, batch_size, callbacks, steps=steps, bar=bar,
                                        sample_weight=weights)
        return keras_result(logs, return_dict)

    def evaluation_logs(self, x, y, batch_size, callbacks=(), distributed=False, *,
                        steps=None, bar=None, sample_weight=None):
        """The logs of ``evaluate`` (a dict) for checked ``x``, ``y``, between the
        ``on_test_begin`` and ``on_test_end`` hooks; ``distributed``: inside the MPI job,
        each process measuring its share."""
        hooks.notify(callbacks, "on_test_begin", {})
        if distributed:
            logs = parallel.evaluate(self, x, y, batch_size, callbacks, sample_weight)
        else:
            totals, seen = self.evaluation_totals(x, y, batch_size, callbacks, steps, bar,
                                                  sample_weight)
            logs = streamed(self, {key: value / seen for key, value in totals.items()})
        hooks.notify(callbacks, "on_test_end", logs)
        return logs

    def evaluation_totals(self, x, y, batch_size, callbacks=(), steps=None, bar=None,
                          sample_weight=None):
        """``({key: sum over examples of the logs}, examples)`` of ``test_step`` on
        ``x``, ``y`` (already checked; or a :class:`Stream`; ``sample_weight`` (N,) or
        None), batch by batch (the first ``steps``), each between the
        ``on_test_batch_begin`` and ``on_test_batch_end`` hooks; ``bar``: a
        :class:`ProgressBar` to update."""
        totals, seen, start = {}, 0, time.perf_counter()
        reset_metrics(self)
        triples = x.batches() if isinstance(x, Stream) else \
            weighted_batches(x, y, sample_weight, batch_size, shuffle=False)
        index = -1
        for index, (xb, yb, wb) in enumerate(itertools.islice(triples, steps)):
            hooks.notify(callbacks, "on_test_batch_begin", index, {})
            xb, yb, wb = to_device((xb, yb, wb), getattr(self, "device", "cpu"))  # once a batch
            logs = self.test_step(xb, yb) if wb is None else \
                self.test_step(xb, yb, sample_weight=wb)
            n = count(xb)
            for key, value in logs.items():
                totals[key] = totals.get(key, 0.0) + value * n
            seen += n
            hooks.notify(callbacks, "on_test_batch_end", index, logs)
            if bar is not None:
                bar.update(index + 1, {k: v / seen for k, v in totals.items()},
                           seen / max(time.perf_counter() - start, 1e-9))
        if bar is not None:
            bar.finish({k: v / max(seen, 1) for k, v in totals.items()}, index + 1)
        return totals, seen
