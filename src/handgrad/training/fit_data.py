"""``fit``'s data checked: arrays (:mod:`.data`) or iterables of batches
(:mod:`.streams`), the validation data, and the steps of an epoch."""

from __future__ import annotations

from ..data.batching import num_batches
from .checks import check_layout
from .data import check_validation_data, count, split_validation
from .streams import check_steps, is_stream


def fit_data(model, run):
    """``(x, y, validation_data, steps per epoch)`` of ``run`` checked: arrays in the
    step's form, or :class:`~.streams.Stream` of batches (``y`` None)."""
    steps = check_steps("fit", "steps_per_epoch", run.steps_per_epoch)
    check_steps("fit", "validation_steps", run.validation_steps)
    if run.distributed and (steps is not None or run.validation_steps is not None
                            or is_stream(run.x) or is_stream(run.validation_data)):
        raise ValueError("fit: distributed=True takes arrays, without steps_per_epoch "
                         "or validation_steps")
    custom = model._custom("train_step")
    if is_stream(run.x):
        if run.validation_split not in (None, 0, 0.0):
            raise ValueError(f"fit: 'validation_split' needs arrays; received a "
                             f"generator 'x' with validation_split={run.validation_split!r}"
                             f" (pass validation_data)")
        x = model._stream("fit", "x", run.x, run.y, steps, "steps_per_epoch", "train_step")
        x.require_steps()
        y, validation_data = None, run.validation_data
    else:
        x, y = model._data("fit", run.x, run.y, "train_step")
        batches = num_batches(count(x), run.batch_size)
        if steps is not None and steps > batches:
            raise ValueError(f"fit: 'steps_per_epoch' ({steps}) must be at most the "
                             f"{batches} batches of {count(x)} examples at batch_size="
                             f"{run.batch_size}")
        steps = batches if steps is None else steps
        x, y, validation_data = split_validation("fit", x, y, run.validation_split,
                                                 run.validation_data)
        if not custom:
            check_layout("fit", model, x)
    if validation_data is not None and not model._custom("test_step"):
        model._require_compiled("fit")
    if is_stream(validation_data):
        validation_data = (model._stream("fit", "validation_data", validation_data, None,
                                        run.validation_steps, "validation_steps",
                                        "test_step"), None)
    else:
        validation_data = check_validation_data(
            "fit", validation_data, lambda op, xv, yv: model._data(
                op, xv, yv, "test_step", allow_empty=True), x)
        if validation_data is not None and not model._custom("test_step"):
            check_layout("fit", model, validation_data[0], "x_val")
    return x, y, validation_data, steps
