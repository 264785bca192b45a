"""What ``compile`` chose for each output of a model: its loss, its weight, its metrics.

``loss``, ``loss_weights`` and ``metrics`` each come in three forms: one value for every
output, a list in output order, or a dict keyed by the output names (the names of the
layers that produce the outputs, ``model.output_names``). The total loss is
``sum_i w_i * L_i`` over the outputs that have a loss, so the gradient sent back into
output ``i`` is ``w_i * dL_i/dpred_i``; an output without a loss, or with weight 0, gets
``None`` (no gradient). A list of metrics applies to every output that has a loss; a dict
of metrics names the outputs it measures. ``"accuracy"`` is chosen from the output's loss
(see :mod:`handgrad.training.metrics`); ``metrics=None`` (compile's default) logs it for
each output whose loss is a cross-entropy, and nothing for the others.

Logs: a model with one output logs ``loss`` and its metrics under the names given
(``accuracy``). With several outputs the logs are ``loss`` (the weighted total), then
``<output>_loss`` (unweighted, as Keras does) and ``<output>_<metric>`` for each output.
"""

from __future__ import annotations

import copy

from .. import losses, ops
from .._checks import describe
from .._hyper import number
from ..io.objective import output_names
from ..layers.activations import Activation
from ..metrics.auc import AUC
from ..metrics.streaming import (
    MeanMetricWrapper,
    Metric,
    Precision,
    Recall,
    SparseTopKCategoricalAccuracy,
    TopKCategoricalAccuracy,
)
from . import metrics as _metrics
from .checks import edge_layer
from .weights import weighted_loss

#: Keras's names of the streaming metrics (``compile(metrics=["auc"])``).
STREAMING = {"precision": Precision, "recall": Recall, "auc": AUC,
             "top_k_categorical_accuracy": TopKCategoricalAccuracy,
             "sparse_top_k_categorical_accuracy": SparseTopKCategoricalAccuracy}


def _output_layers(model) -> list:
    """The last layer before each output (None for an output that is an Input)."""
    tensors = getattr(model, "outputs", None)
    if not tensors:
        return [edge_layer(model, -1)]
    return [None if t.node is None else edge_layer(t.node.layer, -1) for t in tensors]


def per_output(op, arg, value, names, *, check, listed=None):
    """``value`` (one for all, a list in output order, or a dict keyed by ``names``) as
    ``{name: check(name, value) or None}``; dict keys left out and None entries give None.
    ``listed(value)`` says whether a list is one entry per output (default: any list)."""
    if isinstance(value, dict):
        unknown = [key for key in value if key not in names]
        if unknown:
            raise ValueError(f"{op}: '{arg}' keys must be output names {names}; received "
                             f"unknown keys {unknown}")
        return {name: None if value.get(name) is None else check(name, value[name])
                for name in names}
    if isinstance(value, (list, tuple)) and (listed is None or listed(value)):
        if len(value) != len(names):
            raise ValueError(f"{op}: '{arg}' as a list must hold {len(names)} entries, one "
                             f"per output {names}; received {len(value)}: {value!r}")
        return {name: None if v is None else check(name, v) for name, v in zip(names, value)}
    return {name: check(name, value) for name in names}


def _per_output_metrics(value) -> bool:
    """A list of metric lists (one per output); a flat list of names is for every output."""
    return any(v is None or isinstance(v, (list, tuple)) for v in value)


def _metric_object(entry):
    """``(name, metric)`` for a streaming metric (an object, a copy of it being used, or a
    Keras name of :data:`STREAMING`) or a callable ``(y_true, y_pred)``; None for the
    names of :data:`handgrad.training.metrics.METRICS`."""
    if isinstance(entry, str):
        metric = STREAMING[entry.lower()]() if entry.lower() in STREAMING else None
        return None if metric is None else (entry, metric)
    if isinstance(entry, Metric):
        return entry.name, copy.deepcopy(entry)  # one state per output and per compile
    if callable(entry):
        return (metric := MeanMetricWrapper(entry)).name, metric
    return None


def keras_rank(pred, y):
    """``y`` with a trailing axis of 1 added where ``pred`` has it and ``y`` lacks it: Keras's
    targets (N,) for an output (N, 1) (its losses and metrics bring the two to one rank,
    ``squeeze_or_expand_to_same_rank``), never broadcast to (N, N); else ``y`` as given."""
    shape, pshape = getattr(y, "shape", None), getattr(pred, "shape", None)
    if shape is None or pshape is None or not pshape or pshape[-1] != 1 \
            or tuple(shape) != tuple(pshape[:-1]):
        return y
    return y[..., None]


def _probability_ending(layer):
    """``(op, what, how to drop it)`` where ``layer`` ends in a softmax or a sigmoid: an
    activation layer, or ``activation=`` fused into a Dense or a convolution; else None."""
    act = layer if isinstance(layer, Activation) else getattr(layer, "activation_layer", None)
    if not isinstance(act, Activation) or act.forward_op not in (ops.softmax, ops.sigmoid):
        return None
    if act is layer:
        return act.forward_op, layer.label, "remove that last layer"
    return (act.forward_op, f"{layer.label} with activation={layer.activation!r}",
            "drop that activation")


def _link(loss):
    """What turns the output into probabilities for the metrics that threshold them: the
    sigmoid for a binary logits loss, the softmax for a softmax cross-entropy, else the
    output as it is (a loss of probabilities, mse, no loss)."""
    if not losses.takes_logits(loss):
        return lambda pred: pred
    if _metrics.accuracy_for(loss) is _metrics.accuracy:
        return lambda pred: ops.softmax(pred)[0]
    return lambda pred: ops.sigmoid(pred)[0]


class Objective:
    """The per-output losses, weights and metrics of a compiled model (see the module
    docstring). Call it on the predictions and the targets (lists in output order) to
    get ``(logs, gradients)``."""

    def __init__(self, model, loss, loss_weights=None, metrics=None):
        op = "compile"
        self.names = output_names(model)
        self.multi = len(self.names) > 1
        specs = per_output(op, "loss", loss, self.names, check=lambda name, spec: spec)
        self.losses = {name: None if spec is None else losses.get(spec)
                       for name, spec in specs.items()}
        if all(fn is None for fn in self.losses.values()):
            raise ValueError(f"{op}: 'loss' gives no output a loss; received {loss!r} for "
                             f"outputs {self.names}")
        self.loss_specs = {name: spec for name, spec in specs.items() if spec is not None}
        weights = per_output(op, "loss_weights", 1.0 if loss_weights is None else loss_weights,
                             self.names, check=self._weight_check(loss_weights))
        self.weights = {name: 1.0 if w is None else w for name, w in weights.items()}
        if metrics is None:  # the default: accuracy where the loss says which one
            metrics = {name: ("accuracy",) if _metrics.accuracy_for(fn) else ()
                       for name, fn in self.losses.items()}
        if not isinstance(metrics, (list, tuple, dict)):
            raise TypeError(f"{op}: 'metrics' must be a list of metric names, e.g. "
                            f"['accuracy'], or a dict of them keyed by output name; received "
                            f"{describe(metrics)}")
        self.metrics = per_output(op, "metrics", metrics, self.names,
                                  check=self._metric_names, listed=_per_output_metrics)
        if isinstance(metrics, (list, tuple)) and not _per_output_metrics(metrics):
            # one list for all outputs: it measures the outputs that have a loss
            self.metrics = {name: names if self.losses[name] else ()
                            for name, names in self.metrics.items()}
        self.metric_fns = {name: _metrics.get(op, names or (), self.losses[name],
                                              loss_name=self._loss_name(name),
                                              objects=_metric_object)
                           for name, names in self.metrics.items()}
        self.links = {name: _link(fn) for name, fn in self.losses.items()}
        for name, layer in zip(self.names, _output_layers(model)):
            self._check_logits(op, name, layer)
            if _probability_ending(layer) is not None:  # Keras's threshold 0.5 on them
                self.metric_fns[name] = {
                    key: _metrics.probability_accuracy if fn is _metrics.binary_accuracy
                    else fn for key, fn in self.metric_fns[name].items()}

    def _loss_name(self, name):
        spec = self.loss_specs.get(name)
        return spec if spec is None or isinstance(spec, str) else \
            getattr(spec, "__name__", repr(spec))

    def _weight_check(self, given):
        def check(name, value):
            arg = f"loss_weights[{name!r}]" if isinstance(given, (dict, list, tuple)) \
                else "loss_weights"
            return number("compile", arg, value, low=0.0)
        return check

    @staticmethod
    def _metric_names(name, value):
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, (list, tuple)):
            raise TypeError(f"compile: 'metrics' must be a list of metric names, e.g. "
                            f"['accuracy'], or a dict of them keyed by output name; received "
                            f"{describe(value)}")
        return tuple(names)

    def _check_logits(self, op, name, layer):
        spec = self.loss_specs.get(name)
        ending = _probability_ending(layer)
        if ending is None:
            return
        op_, what, drop = ending
        where = f"output {name!r} comes from" if self.multi else "the model ends with"
        if losses.takes_logits(self.losses[name]):
            other = (" or use 'binary_cross_entropy', which takes probabilities"
                     if op_ is ops.sigmoid else "")
            raise ValueError(f"{op}: loss {spec!r} takes logits, but {where} {what}, "
                             f"which outputs probabilities; {drop} (apply it to predict's "
                             f"outputs instead){other}")
        if losses.takes_log_probabilities(self.losses[name]):
            raise ValueError(f"{op}: loss {spec!r} takes log-probabilities, but {where} "
                             f"{what}, which outputs probabilities; {drop} and use "
                             f"'cross_entropy', which applies the log-softmax itself")

    # ----------------------------------------------------------------- use
    def needs_target(self, name) -> bool:
        """Whether output ``name`` needs targets: it has a loss or metrics."""
        return self.losses[name] is not None or bool(self.metric_fns[name])

    def keys(self) -> list:
        """The keys of the logs, in order."""
        if not self.multi:
            return ["loss", *self.metric_fns[self.names[0]]]
        return (["loss"] + [f"{name}_loss" for name in self.names if self.losses[name]]
                + [f"{name}_{metric}" for name in self.names for metric in self.metric_fns[name]])

    def __call__(self, preds, ys, *, gradients=True, sample_weight=None):
        """``(logs, dpreds)`` for lists (in output order) of predictions and targets
        (targets (N,) for an output (N, 1) read as (N, 1), as Keras's);
        ``dpreds[i]`` is None for an output without a loss or with weight 0.
        ``sample_weight`` (B,) weighs each example of every loss
        (:func:`handgrad.training.weights.weighted_loss`)."""
        logs, dpreds, total = {}, [], 0.0
        ys = [keras_rank(pred, y) for pred, y in zip(preds, ys)]
        for name, pred, y in zip(self.names, preds, ys):
            fn, weight, grad = self.losses[name], self.weights[name], None
            if fn is not None:
                value, dpred = fn(pred, y) if sample_weight is None else \
                    weighted_loss(fn, pred, y, sample_weight, name)
                total += weight * float(value)
                if self.multi:
                    logs[f"{name}_loss"] = float(value)
                if gradients and weight != 0.0:
                    grad = dpred if weight == 1.0 else dpred * dpred.dtype.type(weight)
            dpreds.append(grad)
        metrics = {}
        for name, pred, y in zip(self.names, preds, ys):
            for metric, fn in self.metric_fns[name].items():
                key = f"{name}_{metric}" if self.multi else metric
                if isinstance(fn, Metric):  # streaming: the running figure
                    read = self.links[name](pred) if fn.reads == "probabilities" else pred
                    fn.update_state(y, read)
                    metrics[key] = fn.result()
                else:
                    metrics[key] = fn(pred, y)
        return {"loss": total, **logs, **metrics}, dpreds

    def streams(self) -> dict:
        """``{log key: Metric}`` of the streaming metrics."""
        return {f"{name}_{metric}" if self.multi else metric: fn
                for name in self.names for metric, fn in self.metric_fns[name].items()
                if isinstance(fn, Metric)}

    def reset_metrics(self):
        """Zero the streaming metrics' counts (at each epoch and each ``evaluate``)."""
        for metric in self.streams().values():
            metric.reset_state()

    def merged_results(self, gather=None) -> dict:
        """``{log key: figure}`` of the streaming metrics; ``gather(states) -> list`` (an
        MPI allgather) sums the counts of every process first."""
        streams = self.streams()
        states = {key: metric.state for key, metric in streams.items()}
        if gather is not None:
            states = {key: Metric.merged(parts)
                      for key, parts in zip(states, zip(*gather(list(states.values()))))}
        return {key: metric.figure(states[key]) for key, metric in streams.items()}

    def config(self) -> dict:
        """The arguments of ``compile`` that rebuild this objective (dicts keyed by output
        name when the model has several outputs; losses as given: names or callables)."""
        if not self.multi:
            name = self.names[0]
            weight = self.weights[name]
            return {"loss": self.loss_specs[name], "metrics": self.metrics[name],
                    "loss_weights": None if weight == 1.0 else weight}
        return {"loss": dict(self.loss_specs), "metrics": {k: v for k, v in self.metrics.items()
                                                           if v},
                "loss_weights": dict(self.weights)}
