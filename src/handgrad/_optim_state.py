"""Checking an optimizer state dict before it replaces an optimizer's state.

The flat form is ``{"iterations": count, "<slot>/<param name>": array, ...}`` with
``step`` slots holding per-parameter step counts (see ``Optimizer.state_dict``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ._checks import FLOAT_DTYPES, describe, is_int


def _count(op, name, value, minimum):
    """An integer count >= ``minimum`` given as an int or a 0-d integer array."""
    if getattr(value, "shape", None) == () and getattr(value, "dtype", None) is not None and (
            value.dtype.kind in "iu"):
        value = int(value)
    if not is_int(value) or value < minimum:
        raise ValueError(f"{op}: {name} must be an integer count >= {minimum}; received "
                         f"{describe(value)}")
    return int(value)


def _array(op, name, value):
    """A float32/float64 array, copied."""
    if not (hasattr(value, "shape") and hasattr(value, "dtype")) or (
            value.dtype not in FLOAT_DTYPES):
        raise TypeError(f"{op}: {name} must be a float32 or float64 array; received "
                        f"{describe(value)}")
    return np.array(value, copy=True)


def check_against(op, state, params):
    """Every state array names a parameter and has its shape and dtype."""
    unknown = sorted({name for arrays in state.values() for name in arrays} - set(params))
    if unknown:
        raise ValueError(f"{op}: the state holds parameters {unknown} that the model lacks; "
                         f"its parameters are {sorted(params)}")
    bad = [f"{slot}/{name}: state {tuple(a.shape)} {a.dtype} vs parameter "
           f"{tuple(params[name].shape)} {params[name].dtype}"
           for slot, arrays in state.items() if slot != "step" for name, a in arrays.items()
           if a.shape != params[name].shape or a.dtype != params[name].dtype]
    if bad:
        raise ValueError(f"{op}: state arrays do not match their parameters: {bad}")


def parse_state(op, state, slots, params=None, required=None):
    """``(iterations, {slot: {name: value}})`` from a flat state dict, every entry checked:
    known slots only, each parameter with all of them (or with ``required[name]``, the
    slots of its parameter group), counts as integers (step counts >= 1), arrays float;
    with ``params`` (dict name -> array) arrays match their parameter.
    """
    if not isinstance(state, Mapping) or "iterations" not in state:
        received = (f"a dict with the keys {sorted(map(str, state))[:6]}"
                    if isinstance(state, Mapping) else describe(state))
        raise TypeError(f"{op}: 'state' must be a dict with an 'iterations' entry; "
                        f"received {received}")
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(f"{op}: 'params' must be None or a dict name -> array; received "
                        f"{describe(params)}")
    iterations = _count(op, "state['iterations']", state["iterations"], 0)
    new: dict[str, dict] = {slot: {} for slot in slots}
    for key, value in state.items():
        if key == "iterations":
            continue
        slot, sep, name = key.partition("/") if isinstance(key, str) else ("", "", "")
        if not sep or slot not in slots:
            raise ValueError(f"{op}: unexpected key {key!r}; expected 'iterations' or "
                             f"'<slot>/<name>' with slot in {list(slots)}")
        if slot == "step":  # t >= 1: Adam divides by 1 - beta1^t
            new[slot][name] = _count(op, f"state[{key!r}]", value, 1)
        else:
            new[slot][name] = _array(op, f"state[{key!r}]", value)
    names = set().union(*new.values()) if new else set()
    required = required or {}
    incomplete = sorted(n for n in names
                        if any(n not in new[s] for s in required.get(n, slots)))
    if incomplete:
        raise ValueError(f"{op}: parameters {incomplete} lack some of the slots {list(slots)}")
    if params is not None:
        check_against(op, new, params)
    return iterations, {slot: arrays for slot, arrays in new.items() if arrays}
