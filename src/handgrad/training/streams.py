"""Batches from Python: a generator, an iterator or any iterable of ``(x, y)`` batches as
the data of ``fit``, ``evaluate`` and ``predict`` (Keras's generator input).

Each item is a tuple ``(x, y)`` of one batch (``x`` and ``y`` in the forms of
:mod:`.data`: arrays, lists or dicts of arrays); ``predict`` and a model that learns
from ``x`` alone also take an item that is ``x`` itself (of a tuple, only ``x`` is used).
A third entry is the batch's ``sample_weight`` (B,), as Keras's: ``fit`` and ``evaluate``
weigh the batch's losses by it (:mod:`.weights`; ``predict`` ignores it). Every batch is
checked as arrays of ``fit`` are.

How many batches an epoch takes: ``steps`` (``steps_per_epoch`` of ``fit``,
``validation_steps``, ``steps`` of ``evaluate``/``predict``) when given; else the whole
iterable. A re-iterable (an object whose ``iter()`` gives a fresh iterator each time) is
walked once per epoch; a one-shot iterator (a generator) continues across epochs, so
``fit`` needs ``steps_per_epoch`` with it (an endless generator would never end its
epoch) and ``evaluate``/``predict`` run it until it stops unless ``steps`` is given.
"""

from __future__ import annotations

from .._checks import describe, is_int


def is_stream(value) -> bool:
    """Whether ``value`` is an iterable of batches rather than data: not an array, a
    list, a tuple, a dict or a string, but iterable."""
    if value is None or isinstance(value, (list, tuple, dict, str, bytes)):
        return False
    if hasattr(value, "shape") or hasattr(value, "__array__"):
        return False
    return hasattr(value, "__iter__") or hasattr(value, "__next__")


def check_steps(op, name, steps):
    """``None`` or an int >= 1."""
    if steps is not None and (not is_int(steps) or steps < 1):
        raise ValueError(f"{op}: '{name}' must be None or an int >= 1; received "
                         f"{describe(steps)}")
    return steps


class Stream:
    """One argument's batches: ``batches()`` yields the checked ``(xb, yb, wb)`` of one
    epoch (``yb`` None where ``pairs`` is False; ``wb`` the batch's (B,) weights or None).
    ``check(label, xb, yb) -> (xb, yb)`` converts and checks one batch, ``weigh(label,
    xb, yb, w) -> wb`` its weights ``w`` (None when the item has none);
    ``steps``/``steps_name`` bound an epoch."""

    def __init__(self, op, arg, source, *, steps, steps_name, check, pairs=True,
                 weigh=None):
        self.op, self.arg, self.source, self.check = op, arg, source, check
        self.weigh = weigh or (lambda label, xb, yb, w: None)
        self.steps, self.steps_name, self.pairs = steps, steps_name, pairs
        try:
            first = iter(source)
        except TypeError:
            raise TypeError(f"{op}: '{arg}' is not iterable; received "
                            f"{describe(source)}") from None
        self.one_shot = first is source
        self._iterator = first if self.one_shot else None

    def require_steps(self):
        """A one-shot iterator needs ``steps`` (``fit``)."""
        if self.one_shot and self.steps is None:
            raise ValueError(f"{self.op}: '{self.arg}' is a generator (a one-shot iterator); "
                             f"pass {self.steps_name}= (the batches per epoch), since a "
                             f"generator that never ends would never end the epoch and one "
                             f"that ends has nothing left for the next")

    def _split(self, item, index):
        label = f"{self.op}: batch {index} of '{self.arg}'"
        if not self.pairs:
            return label, (item[0] if isinstance(item, tuple) and 1 <= len(item) <= 3
                           else item), None, None
        if not isinstance(item, (tuple, list)) or len(item) not in (2, 3):
            raise TypeError(f"{label} must be a tuple (x, y) or (x, y, sample_weight); "
                            f"received {describe(item)}")
        return label, item[0], item[1], (item[2] if len(item) == 3 else None)

    def batches(self):
        iterator = self._iterator if self.one_shot else iter(self.source)
        index = 0
        while self.steps is None or index < self.steps:
            try:
                item = next(iterator)
            except StopIteration:
                if self.steps is not None or index == 0:
                    wanted = "" if self.steps is None else f" of {self.steps_name}={self.steps}"
                    raise ValueError(f"{self.op}: '{self.arg}' ran out of batches after "
                                     f"{index}{wanted}; give fewer steps, or a generator "
                                     f"that loops over the data (while True: ...)") from None
                return
            label, xb, yb, w = self._split(item, index)
            xb, yb = self.check(label, xb, yb)
            yield xb, yb, self.weigh(label, xb, yb, w)
            index += 1
