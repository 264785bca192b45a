"""Validation of hyper-parameters and name/config registries, shared by the optimizers,
schedulers and initializers.

Like :mod:`handgrad._checks`, every error is a ``TypeError`` or ``ValueError`` whose
message names the function, the argument, what was expected and what was received.
"""

from __future__ import annotations

import inspect
import math
import numbers
from collections.abc import Mapping

import numpy as np

from ._checks import describe


def number(op, name, value, low=None, high=None, low_open=False, high_open=False) -> float:
    """A finite real number within the given bounds (open or closed), as a Python float."""
    bounds = []
    if low is not None:
        bounds.append(f"{'>' if low_open else '>='} {low:g}")
    if high is not None:
        bounds.append(f"{'<' if high_open else '<='} {high:g}")
    expected = " ".join(["a finite real number", " and ".join(bounds)]).strip()
    message = f"{op}: '{name}' must be {expected}; received {describe(value)}"
    if not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_)):
        raise TypeError(message)
    value = float(value)
    if (
        not math.isfinite(value)
        or (low is not None and (value <= low if low_open else value < low))
        or (high is not None and (value >= high if high_open else value > high))
    ):
        raise ValueError(message)
    return value


def flag(op, name, value) -> bool:
    """A bool (not an int)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{op}: '{name}' must be a bool; received {describe(value)}")
    return bool(value)


def _key(name: str) -> str:
    return name.lower().replace("_", "")


def lookup(op, registry, name):
    """``registry[name]``, ignoring case and underscores ("StepDecay" == "step_decay")."""
    if not isinstance(name, str):
        raise TypeError(f"{op}: expected a name (str); received {describe(name)}")
    found = {_key(k): v for k, v in registry.items()}.get(_key(name))
    if found is None:
        raise ValueError(f"{op}: unknown name {name!r}; expected one of {sorted(registry)}")
    return found


def build_from_config(op, registry, config):
    """Instantiate ``registry[config["name"]]`` with the other entries as keyword arguments."""
    if not isinstance(config, Mapping) or "name" not in config:
        raise TypeError(f"{op}: 'config' must be a dict with a 'name' key; received "
                        f"{describe(config)}")
    cls = lookup(op, registry, config["name"])
    kwargs = {k: v for k, v in config.items() if k != "name"}
    allowed = set(inspect.signature(cls).parameters)
    unknown = sorted(set(kwargs) - allowed)
    if unknown:
        raise TypeError(f"{op}: unknown keys {unknown} for {cls.__name__}; expected some of "
                        f"{sorted(allowed)}")
    return cls(**kwargs)


def get_instance(module, base, registry, value, kwargs):
    """``module.get``: ``value`` if it is a ``base`` instance (no ``kwargs`` allowed), an
    instance built from a config dict (``module.from_config``) updated by ``kwargs``, or
    ``registry``'s class named ``value`` called with ``kwargs``."""
    if isinstance(value, base):
        if kwargs:
            raise TypeError(f"{module}.get: keyword arguments {sorted(kwargs)} cannot be "
                            f"applied to an existing {base.__name__.lower()} {value!r}")
        return value
    if isinstance(value, Mapping):
        return build_from_config(f"{module}.from_config", registry, {**value, **kwargs})
    return lookup(f"{module}.get", registry, value)(**kwargs)
