"""What ``compile`` chose, in a file: the ``optimizer``, ``loss``, ``metrics`` and
``loss_weights`` fields of the ``handgrad`` document.

A model with one output stores its loss as a built-in name, a Keras loss object as
``{"class": "CategoricalCrossentropy", "config": {"from_logits": true, ...}}``, or
``{"custom": <name>}``,
its metrics as a list (names, a metric object of :mod:`handgrad.metrics` as
``{"class": "Precision", "config": {"thresholds": 0.3, ...}}``, or custom references)
and its loss weight as a number (the field is left out at 1).
A model with several outputs (a graph ``Model``) stores each of them as an object keyed
by the output names (``model.output_names``): ``{"logits": "cross_entropy", "score":
"mse"}``; its metrics may also be one list for every output that has a loss. Reading
checks every field against the rebuilt model's outputs; a bad one is a ValueError that
names the file and the field.
"""

from __future__ import annotations

import math

from .. import _custom, losses, optimizers
from .._checks import describe
from ..metrics import METRIC_CLASSES
from .config_checks import CONFIG_ERRORS, fail

#: The fields this module reads and writes, after ``optimizer``.
FIELDS = ("loss", "metrics", "loss_weights")


def output_names(model) -> list:
    """The model's output names; a model without them (``Sequential``) has one."""
    names = getattr(model, "output_names", None)
    return list(names) if names else ["output"]


# ------------------------------------------------------------------------ saving


def _loss_entry(spec, what):
    """A built-in loss name, or a custom reference, for a loss given to ``compile``."""
    if isinstance(spec, str):
        return spec
    if isinstance(spec, losses.KerasLoss):  # a Keras loss object: its class and options
        return {"class": type(spec).__name__, "config": spec.get_config()}
    own = getattr(spec, "__name__", None)  # a built-in function: by its own name first
    if losses.LOSSES.get(own) is spec:
        return own
    builtin = next((key for key, value in losses.LOSSES.items() if value is spec), None)
    return builtin if builtin is not None else _custom.reference(spec, what)


def _metric_entry(metric, what):
    if isinstance(metric, str):
        return metric
    if METRIC_CLASSES.get(type(metric).__name__) is type(metric):
        return {"class": type(metric).__name__, "config": metric.get_config()}
    return _custom.reference(metric, f"metric {metric!r}{what}")


def _metric_entries(values, what):
    return [_metric_entry(m, what) for m in values]


def compiled_fields(model) -> dict:
    """The ``loss``, ``metrics`` and ``loss_weights`` fields of ``model`` (null, [] and
    null when it is not compiled with a loss). Custom callables become references,
    so this runs inside :func:`handgrad._custom.saving`."""
    if getattr(model, "optimizer", None) is None or not hasattr(model, "compile_config"):
        return {"loss": None, "metrics": [], "loss_weights": None}
    config = model.compile_config()
    loss, metrics, weights = config["loss"], config["metrics"], config["loss_weights"]
    if loss is None:
        return {"loss": None, "metrics": [], "loss_weights": None}
    if not isinstance(loss, dict):
        return {"loss": _loss_entry(loss, "the loss"), "metrics": _metric_entries(metrics, ""),
                "loss_weights": None if weights in (None, 1.0) else float(weights)}
    names = output_names(model)  # every output, so that no object looks like a reference
    return {
        "loss": {name: None if loss.get(name) is None else
                 _loss_entry(loss[name], f"the loss of output {name!r}") for name in names},
        "metrics": {name: _metric_entries(metrics.get(name, ()), f" of output {name!r}")
                    for name in names},
        "loss_weights": None if weights is None or all(w == 1.0 for w in weights.values())
        else {name: float(w) for name, w in weights.items()},
    }


# ----------------------------------------------------------------------- loading


def optimizer(where, config):
    """The optimizer of the ``optimizer`` field (a built-in class), or None."""
    if config is None:
        return None
    if not isinstance(config, dict) or not isinstance(config.get("name"), str):
        raise fail(where, "optimizer", f"must be null or an object with a 'name'; received "
                                       f"{describe(config)}")
    try:
        return optimizers.from_config(config)
    except CONFIG_ERRORS as error:
        raise fail(where, "optimizer", f"is not a valid optimizer config: {error}") from None


def _is_class_entry(value):
    return isinstance(value, dict) and set(value) == {"class", "config"}


def _from_class_entry(where, field, value, classes, kind):
    """The object of an entry ``{"class": <one of classes>, "config": {...}}``."""
    cls = classes.get(value["class"])
    if cls is None or not isinstance(value["config"], dict):
        raise fail(where, field, f"must name a {kind} class of {sorted(classes)} with a "
                                 f"config object; received {value!r}")
    try:
        return cls(**value["config"])
    except (TypeError, ValueError) as error:
        raise fail(where, field, f"is not a valid {value['class']} config: {error}") from None


def _one_loss(where, field, value, custom_objects):
    if _custom.is_reference(value):
        return _custom.resolve(value, custom_objects, where, field)
    if _is_class_entry(value):
        return _from_class_entry(where, field, value, losses.LOSS_CLASSES, "loss")
    if not isinstance(value, str):
        raise fail(where, field, f"must be null, a loss name, {{'class': <loss class>, "
                                 f"'config': {{...}}}} or {{'custom': <name>}}; "
                                 f"received {describe(value)}")
    try:
        losses.get(value)
    except (TypeError, ValueError) as error:
        raise fail(where, field, f"names no built-in loss: {error}") from None
    return value


def _metric_list(where, field, values, custom_objects):
    if not isinstance(values, list):
        raise fail(where, field, f"must be a JSON array of metric names; received "
                                 f"{describe(values)}")
    out = []
    for i, value in enumerate(values):
        if _custom.is_reference(value):
            value = _custom.resolve(value, custom_objects, where, f"{field}[{i}]")
        elif _is_class_entry(value):
            value = _from_class_entry(where, f"{field}[{i}]", value, METRIC_CLASSES,
                                      "metric")
        elif not isinstance(value, str):
            raise fail(where, f"{field}[{i}]", f"must be a metric name, {{'class': <metric "
                                               f"class>, 'config': {{...}}}} or {{'custom': "
                                               f"<name>}}; received {describe(value)}")
        out.append(value)
    return out


def _weight(where, field, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value) or value < 0:
        raise fail(where, field, f"must be a finite number >= 0; received {describe(value)}")
    return float(value)


def _each(where, field, value, read, several):
    """``read`` applied to one value, or (``several`` outputs) to each value of an object
    keyed by output."""
    if several and isinstance(value, dict) and not _custom.is_reference(value):
        return {str(name): None if v is None else read(f"{field}.{name}", v)
                for name, v in value.items()}
    return read(field, value)


def read_fields(where, document, custom_objects, several) -> dict:
    """The ``loss``, ``metrics`` and ``loss_weights`` fields read (custom objects found,
    names and numbers checked), objects keyed by output for a model with ``several``
    outputs; :func:`compile_from` checks them against the outputs."""
    def loss(field, value):
        return _one_loss(where, field, value, custom_objects)

    def metrics(field, value):
        return _metric_list(where, field, value, custom_objects)

    def weight(field, value):
        return _weight(where, field, value)

    given = {key: document.get(key) for key in FIELDS}
    return {key: None if given[key] is None else _each(where, key, given[key], read, several)
            for key, read in (("loss", loss), ("metrics", metrics), ("loss_weights", weight))}


def compile_from(where, model, optimizer_, fields):
    """Compile ``model`` again as the file says (with its optimizer alone when the file
    names no loss, as ``compile(optimizer, loss=None)`` left it); an object keyed
    by output names is only for a model with several outputs, and must name them."""
    names = output_names(model)
    for key, value in fields.items():
        if isinstance(value, dict) and len(names) == 1:
            raise fail(where, key, f"must be null or one value (the model has one output); "
                                   f"received {describe(value)}")
        unknown = sorted(set(value) - set(names)) if isinstance(value, dict) else []
        if unknown:
            raise fail(where, key, f"names outputs {unknown}; the model's outputs are {names}")
    if fields["loss"] is None:  # no loss (a model with its own train_step): the optimizer
        if optimizer_ is not None and hasattr(model, "compile"):
            model.compile(optimizer_, None, [])
        elif optimizer_ is not None:  # a layer that steps its own optimizer (zoo.RBM)
            model.optimizer = optimizer_
        return
    if not hasattr(model, "compile"):
        return
    try:
        model.compile(optimizer_ or "adam", fields["loss"], fields["metrics"] or [],
                      loss_weights=fields["loss_weights"])
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where}: the model cannot be compiled with the stored fields "
                         f"'loss', 'metrics' and 'loss_weights': {error}") from None
