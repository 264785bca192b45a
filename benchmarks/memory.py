"""Memory of a benchmark step, measured one way by every case: the peak of the
allocations during it (tracemalloc) and the arrays an op's cache holds."""

from __future__ import annotations

import contextlib
import tracemalloc
from dataclasses import fields, is_dataclass

import numpy as np


@contextlib.contextmanager
def traced():
    """Trace allocations inside the block; yields ``usage()``: (bytes allocated now, peak
    bytes) above the start."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    try:
        yield lambda: tuple(value - base for value in tracemalloc.get_traced_memory())
    finally:
        tracemalloc.stop()


def pass_memory(forward, backward, inputs):
    """(peak temporary MB during ``y, cache = forward()`` and ``backward(cache)``, MB of the
    arrays the cache holds besides ``inputs``)."""
    with traced() as usage:
        y, cache = forward()
        held = _array_bytes(cache, {id(a) for a in inputs if a is not None})
        grads = backward(cache)
        peak = usage()[1]
    del y, grads
    return peak / 2**20, held / 2**20


def _array_bytes(value, exclude, seen=None):
    """Bytes of the distinct arrays (and their bases) reachable from ``value``."""
    seen = set() if seen is None else seen
    if isinstance(value, np.ndarray):
        owner = value if value.base is None else value.base
        if id(owner) in seen or id(value) in exclude or id(owner) in exclude:
            return 0
        seen.add(id(owner))
        return getattr(owner, "nbytes", 0)
    if is_dataclass(value):
        children = [getattr(value, f.name) for f in fields(value)]
    elif isinstance(value, (tuple, list)):
        children = value
    else:
        children = vars(value).values() if hasattr(value, "__dict__") else ()
    return sum(_array_bytes(child, exclude, seen) for child in children)
