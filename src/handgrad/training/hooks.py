"""The callback protocol of ``fit``, ``evaluate`` and ``predict``: Keras's hooks, called
at Keras's moments.

==========================  ===================================================
``on_train_begin/end``      ``fit`` starts / ends (``logs``: ``{}`` / the last epoch's)
``on_epoch_begin/end``      each epoch (``epoch``, 0-based; ``logs``: ``{}`` / the epoch's)
``on_train_batch_begin``    before each training step (``batch``: its index in the epoch)
``on_train_batch_end``      after it (``logs``: the step's logs); the base class's
                            versions call ``on_batch_begin``/``on_batch_end`` (aliases)
``on_test_begin/end``       ``evaluate``, and ``fit``'s validation after each epoch
``on_test_batch_begin/end`` each batch of those
``on_predict_begin/end``    ``predict``
``on_predict_batch_*``      each batch of it (``logs["outputs"]``: the batch's outputs)
==========================  ===================================================

A callback that defines another ``on_*`` method (a misspelt hook that would never be
called) is refused with a ValueError.
"""

from __future__ import annotations

import difflib

from .._checks import describe

HOOKS = (
    "on_train_begin", "on_train_end", "on_epoch_begin", "on_epoch_end",
    "on_train_batch_begin", "on_train_batch_end", "on_batch_begin", "on_batch_end",
    "on_test_begin", "on_test_end", "on_test_batch_begin", "on_test_batch_end",
    "on_predict_begin", "on_predict_end", "on_predict_batch_begin", "on_predict_batch_end",
)


class Callback:
    """Hooks called by ``fit``, ``evaluate`` and ``predict`` (see :mod:`.hooks`);
    ``self.model`` is set before the first one, and by ``fit`` ``self.params``
    (``{"verbose", "epochs", "steps"}``: steps per epoch). ``logs`` is always a dict.

    ``rank_zero_only``: in data-parallel training (``fit(distributed=True)``) only rank 0
    runs the callback (one that writes files); the others run on every process and see
    the same logs."""

    model = None
    params = None
    rank_zero_only = False

    def set_model(self, model):
        self.model = model

    def set_params(self, params):
        self.params = params

    def check_logs(self, keys):
        """Called by ``fit`` before training with the keys its epoch logs will have
        ("loss", the metrics, "val_*" with validation data, "lr", "seconds"); raise a
        ValueError for a need that cannot be met. Callbacks may add keys of their own."""

    def set_epoch_examples(self, examples, seconds):
        """Called by ``fit`` after each epoch's training batches, before its validation:
        the ``examples`` they held (every process's together) and the ``seconds`` they
        took (the throughput :class:`~handgrad.training.TensorBoard` logs)."""

    def _does_nothing(self, *args, **kwargs):
        """The base class's hook: does nothing (a subclass overrides the ones it needs)."""

    on_train_begin = on_train_end = on_epoch_begin = on_epoch_end = _does_nothing
    on_batch_begin = on_batch_end = _does_nothing
    on_test_begin = on_test_end = on_test_batch_begin = on_test_batch_end = _does_nothing
    on_predict_begin = on_predict_end = _does_nothing
    on_predict_batch_begin = on_predict_batch_end = _does_nothing

    def on_train_batch_begin(self, batch, logs=None):
        self.on_batch_begin(batch, logs)

    def on_train_batch_end(self, batch, logs=None):
        self.on_batch_end(batch, logs)


def _check_hooks(op, callback):
    """Refuse an ``on_*`` method that is not one of :data:`HOOKS` (never called)."""
    for name in dir(callback):
        if name.startswith("on_") and name not in HOOKS and callable(getattr(callback, name)):
            near = difflib.get_close_matches(name, HOOKS, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise ValueError(f"{op}: callback {type(callback).__name__} defines {name!r}, "
                             f"which is not a callback hook and would never be called; "
                             f"{hint}the hooks are {', '.join(HOOKS)}")


def prepare(op, callbacks, model) -> list:
    """``callbacks`` (a list or tuple of :class:`Callback`) as a list, each checked and
    attached to ``model``."""
    if not isinstance(callbacks, (list, tuple)):
        raise TypeError(f"{op}: 'callbacks' must be a list of Callback objects; received "
                        f"{describe(callbacks)}")
    for callback in callbacks:
        if not isinstance(callback, Callback):
            raise TypeError(f"{op}: 'callbacks' must hold Callback objects; received "
                            f"{describe(callback)}")
        _check_hooks(op, callback)
    for callback in callbacks:
        callback.set_model(model)
    return list(callbacks)


def notify(callbacks, method, *args):
    """Call ``method`` of every callback with ``args``."""
    for callback in callbacks:
        getattr(callback, method)(*args)
