"""``fit``'s data checked: arrays (:mod:`.data`) or iterables of batches
(:mod:`.streams`), the validation data, and the steps of an epoch."""

from __future__ import annotations

from .._checks import describe
from ..data.batching import num_batches
from .checks import check_layout
from .data import check_validation_data, count, split_validation
from .streams import check_steps, is_stream
from .weights import check_sample_weight, example_weights


def fit_data(model, run):
    """``(x, y, validation_data, steps per epoch, weights)`` of ``run`` checked: arrays in
    the step's form, or :class:`~.streams.Stream` of batches (``y`` None);
    ``validation_data`` ``(x_val, y_val, w_val)``; ``weights`` the (N,) example weights of
    ``sample_weight`` and ``class_weight`` (:mod:`.weights`), or None (a generator's
    batches carry their own weights: :mod:`.streams`)."""
    steps = check_steps("fit", "steps_per_epoch", run.steps_per_epoch)
    check_steps("fit", "validation_steps", run.validation_steps)
    if run.distributed and (steps is not None or run.validation_steps is not None
                            or is_stream(run.x) or is_stream(run.validation_data)):
        raise ValueError("fit: distributed=True takes arrays, without steps_per_epoch "
                         "or validation_steps")
    custom = model._custom("train_step")
    if custom and (run.sample_weight is not None or run.class_weight is not None):
        raise ValueError("fit: 'sample_weight' and 'class_weight' weigh the built-in "
                         "train_step's loss; a custom train_step weighs its examples itself")
    if is_stream(run.x):
        if run.validation_split not in (None, 0, 0.0):
            raise ValueError(f"fit: 'validation_split' needs arrays; received a "
                             f"generator 'x' with validation_split={run.validation_split!r}"
                             f" (pass validation_data)")
        if run.sample_weight is not None:
            raise ValueError(f"fit: 'sample_weight' is for array data; received a generator "
                             f"'x' and sample_weight={describe(run.sample_weight)} (a "
                             f"generator yields its weights: (x, y, sample_weight))")
        x = model._stream("fit", "x", run.x, run.y, steps, "steps_per_epoch", "train_step",
                          run.class_weight)
        x.require_steps()
        y, validation_data, weights = None, run.validation_data, None
    else:
        x, y = model._data("fit", run.x, run.y, "train_step")
        weights = example_weights("fit", model, y, run.sample_weight, run.class_weight,
                                  count(x))
        x, y, validation_data = split_validation("fit", x, y, run.validation_split,
                                                 run.validation_data)
        batches = num_batches(count(x), run.batch_size)  # of what validation_split leaves
        if steps is not None and steps > batches:
            raise ValueError(f"fit: 'steps_per_epoch' ({steps}) must be at most the "
                             f"{batches} batches of {count(x)} examples at batch_size="
                             f"{run.batch_size}")
        steps = batches if steps is None else steps
        if validation_data is not None and weights is not None and \
                run.validation_data is None:  # validation_split: the weights split too,
            # the held-out examples keeping only their sample_weight (Keras never weighs
            # the validation loss by class_weight)
            held_out = check_sample_weight("fit", run.sample_weight, len(weights))
            weights = weights[:count(x)]
            if held_out is not None:
                validation_data = (*validation_data, held_out[count(x):])
        if not custom:
            check_layout("fit", model, x)
    if validation_data is not None and not model._custom("test_step"):
        model._require_compiled("fit")
    if is_stream(validation_data):
        validation_data = (model._stream("fit", "validation_data", validation_data, None,
                                        run.validation_steps, "validation_steps",
                                        "test_step"), None, None)
    else:
        validation_data = check_validation_data(
            "fit", validation_data, lambda op, xv, yv: model._data(
                op, xv, yv, "test_step", allow_empty=True), x)
        if validation_data is not None and not model._custom("test_step"):
            check_layout("fit", model, validation_data[0], "x_val")
    return x, y, validation_data, steps, weights
