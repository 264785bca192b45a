"""What ``fit``, ``evaluate`` and ``predict`` take: arrays, lists or dicts of arrays.

``x`` is one array for a model with one input, else a list in input order or a dict keyed
by the Input names (``model.input_names``). ``y`` is one array for a model with one
output, else a list in output order or a dict keyed by the output names
(``model.output_names``); an output that has neither a loss nor metrics needs no targets
(``None`` in a list, or left out of a dict). A model without these names (``Sequential``)
has one input and one output. Every array must hold the same number of examples.

The model's own form comes back: an array for a one-input (one-output) model, else a
list in input (output) order, with ``None`` for targets not given.
"""

from __future__ import annotations

import numpy as np

from .._checks import describe, is_int
from .._hyper import number
from ..data.batching import as_data, batches, example_count, is_structure, leaves, take
from .objective import output_names
from .weights import check_sample_weight


def _brief(value) -> str:
    if isinstance(value, dict):
        return f"a dict with keys {list(value)}"
    if isinstance(value, (list, tuple)) and any(hasattr(v, "shape") for v in value):
        return f"a {type(value).__name__} of {len(value)}: " + ", ".join(
            "None" if v is None else describe(v) for v in value)
    text = describe(value)
    return text if len(text) <= 120 else f"{text[:100]}... ({type(value).__name__})"


def as_examples(op, label, value, what="inputs"):
    """``value`` as a numeric array with a leading example axis; ``label`` is how the
    message names it (``"'x'"``, ``"input 'meta'"``)."""
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        if not isinstance(value, (list, tuple)) and not hasattr(value, "__array__"):
            raise TypeError(f"{op}: {label} must be an array of {what}; received "
                            f"{_brief(value)}")
        try:
            value = np.asarray(value)
        except ValueError as error:
            raise ValueError(f"{op}: {label} is not a rectangular array: {error}") from None
    if value.dtype.kind not in "biuf":
        raise TypeError(f"{op}: {label} must be a numeric array; received {_brief(value)}")
    if value.ndim < 1:
        raise ValueError(f"{op}: {label} must have a leading example axis (ndim >= 1); "
                         f"received {_brief(value)}")
    return value


def _entries(op, arg, value, names, single, kind, needed=None):
    """``[(label, value or None)]`` in ``names`` order from an array, a list or a dict;
    ``names`` is None for a model that does not name its inputs (outputs)."""
    if names is None or (single and not isinstance(value, dict)
                         and not (is_structure(value) and len(value) == 1)):
        return [(f"'{arg}'", value)]
    if isinstance(value, dict):
        unknown = [key for key in value if key not in names]
        if unknown:
            raise ValueError(f"{op}: '{arg}' keys must be the {kind} names {names}; received "
                             f"unknown keys {unknown}")
        values = [value.get(name) for name in names]
    elif isinstance(value, (list, tuple)):
        if len(value) != len(names):
            raise ValueError(f"{op}: '{arg}' must hold {len(names)} arrays, one per {kind} "
                             f"{names}; received a {type(value).__name__} of {len(value)}")
        values = list(value)
    elif len(names) == 1:
        values = [value]
    else:
        raise ValueError(f"{op}: '{arg}' must be a list or a dict of {len(names)} arrays, one "
                         f"per {kind} {names}; received {_brief(value)}")
    for name, entry, need in zip(names, values, needed or [True] * len(names)):
        if entry is None and need:
            raise ValueError(f"{op}: '{arg}' has no array for {kind} {name!r}, which "
                             f"{'the model needs' if kind == 'input' else 'has a loss or metrics'}"
                             f"; received {_brief(value)}")
    return [(f"{kind} {name!r}", entry) for name, entry in zip(names, values)]


def _form(single, entries):
    values = [value for _, value in entries]
    return values[0] if single else values


def model_data(op, model, x, y=None, *, objective=None, need_y=True, allow_empty=False):
    """``(x, y)`` in the model's form (see the module docstring), every array checked;
    ``y`` is None when not needed and not given. ``objective`` says which outputs need
    targets (all of them when None)."""
    in_names = getattr(model, "input_names", None)
    single_in = getattr(model, "single_input", True)
    xs = _entries(op, "x", x, in_names, single_in, "input")
    xs = [(label, as_examples(op, label, value)) for label, value in xs]
    ys = []
    if y is not None or need_y:
        names = output_names(model)
        needed = [objective is None or objective.needs_target(n) for n in names]
        if y is None and any(needed):
            as_examples(op, "'y'", y, "targets, one per example of 'x'")
        single_out = getattr(model, "single_output", True)
        given = names if getattr(model, "output_names", None) else None
        ys = _entries(op, "y", y, given, single_out, "output", needed)
        ys = [(label, None if value is None else
               as_examples(op, label, value, "targets, one per example of 'x'"))
              for label, value in ys]
    n = example_count(op, xs + [entry for entry in ys if entry[1] is not None])
    if n == 0 and not allow_empty:
        label, first = xs[0]
        where = f" ({label} of shape {tuple(first.shape)})" if len(xs) > 1 else \
            f" (shape {tuple(first.shape)})"
        raise ValueError(f"{op}: 'x' has no examples{where}; {op} needs at least one")
    x = _form(single_in, xs)
    y = _form(getattr(model, "single_output", True), ys) if ys else None
    return x, y


def given_data(op, x, y, *, allow_empty=False):
    """``(x, y)`` as given, for a custom step: arrays, or lists or dicts of arrays (``y``
    may be None), all with the same number of examples."""
    x = as_data(op, "x", x)
    y = None if y is None else as_data(op, "y", y)
    n = example_count(op, leaves("x", x) + ([] if y is None else leaves("y", y)))
    if n == 0 and not allow_empty:
        raise ValueError(f"{op}: 'x' has no examples; {op} needs at least one")
    return x, y


def batch_pairs(x, y, batch_size, **kwargs):
    """:func:`handgrad.data.batches` as ``(xb, yb)`` pairs; ``yb`` is None when ``y`` is."""
    if y is not None:
        return batches(x, y, batch_size, **kwargs)
    return ((xb, None) for xb in batches(x, None, batch_size, **kwargs))


def weighted_batches(x, y, weights, batch_size, **kwargs):
    """``(xb, yb, wb)``: :func:`batch_pairs` with the weights (N,) of each batch's
    examples (``wb`` None without weights): the same batches in the same order."""
    if weights is None:
        for xb, yb in batch_pairs(x, y, batch_size, **kwargs):
            yield xb, yb, None
        return
    for index in batches(np.arange(count(x)), None, batch_size, **kwargs):
        yield take(x, index), take(y, index), weights[index]


def count(x) -> int:
    """The number of examples of ``x``: an array, or a list or dict of arrays."""
    return int(leaves("x", x)[0][1].shape[0])


def check_validation_data(op, validation_data, check, x):
    """``(x_val, y_val, w_val)`` of ``(x_val, y_val)`` or, as Keras, ``(x_val, y_val,
    sample_weight_val)`` (``w_val`` None when not given), checked by ``check(op, x_val,
    y_val)`` (None stays None); one input array must have the rank of the training
    inputs ``x``."""
    if validation_data is None:
        return None
    if not isinstance(validation_data, (tuple, list)) or len(validation_data) not in (2, 3):
        raise ValueError(f"{op}: 'validation_data' must be a pair (x_val, y_val) or a triple "
                         f"(x_val, y_val, sample_weight_val); received "
                         f"{_brief(validation_data)}")
    x_val, y_val = check(f"{op}: 'validation_data'", *validation_data[:2])
    w_val = None if len(validation_data) == 2 else check_sample_weight(
        op, validation_data[2], count(x_val), "validation_data[2]")
    if count(x_val) == 0:
        shapes = [tuple(v.shape) for _, v in leaves("x", x_val)]
        raise ValueError(f"{op}: 'validation_data' has no examples (x_val of shape "
                         f"{shapes[0] if len(shapes) == 1 else shapes})")
    if hasattr(x_val, "ndim") and hasattr(x, "ndim") and x_val.ndim != x.ndim:
        raise ValueError(f"{op}: 'validation_data' inputs of shape {tuple(x_val.shape)} must "
                         f"have the rank of 'x' {tuple(x.shape)}")
    return x_val, y_val, w_val


def split_validation(op, x, y, validation_split, validation_data):
    """Keras's ``validation_split``: the last ``N - floor(N * (1 - split))`` examples,
    taken before any shuffling, become ``validation_data``. Returns
    ``(x_train, y_train, validation_data)``; 0 or None means no split. ``x`` and ``y``
    may be arrays or lists of arrays (sliced alike)."""
    if validation_split is None or (is_int(validation_split) and validation_split == 0):
        return x, y, validation_data
    split = number(op, "validation_split", validation_split, low=0.0, high=1.0,
                   high_open=True)
    if split == 0.0:
        return x, y, validation_data
    if validation_data is not None:
        raise ValueError(f"{op}: pass either 'validation_data' or 'validation_split', not "
                         f"both (received validation_split={validation_split!r})")
    n = count(x)
    cut = int(np.floor(n * (1.0 - split)))
    if cut < 1 or cut >= n:
        raise ValueError(f"{op}: validation_split={validation_split!r} of {n} examples leaves "
                         f"{cut} for training and {n - cut} for validation; both need at "
                         f"least one")
    head, tail = slice(None, cut), slice(cut, None)
    return (take(x, head), take(y, head),
            (take(x, tail), take(y, tail)))
