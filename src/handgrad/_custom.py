"""Custom objects (a loss, an initializer, a metric) that a saved file names.

A file never holds code: a user-defined callable is stored as ``{"custom": name}`` and
found again by that name when the file is loaded, in the ``custom_objects`` mapping
given to ``load`` or else in the registry filled by :func:`register_custom` (as Keras
does). While a file is being saved, a callable that has no name in the ``custom_objects``
given to ``save`` nor in the registry is refused, so no file names what no one can find.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Mapping

from ._checks import describe

KEY = "custom"
_REGISTRY: dict[str, object] = {}
#: While saving: ``({id(object): name}, custom_objects)`` of the ``custom_objects`` given.
_SAVING = contextvars.ContextVar("handgrad_saving", default=None)


def _check_name(op, name):
    if not isinstance(name, str):
        raise TypeError(f"{op}: 'name' must be a string; received {describe(name)}")
    if not name or name == "<lambda>":
        raise ValueError(f"{op}: 'name' must be a non-empty name other than '<lambda>'; "
                         f"received {name!r}")
    return name


def _origin(obj):
    return getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)


def _register(obj, name):
    op = "register_custom"
    if not callable(obj):
        raise TypeError(f"{op}: only callables (losses, initializers, metrics) can be "
                        f"registered; received {describe(obj)}")
    if name is None:
        name = getattr(obj, "__name__", None)
        if not isinstance(name, str) or name == "<lambda>":
            raise ValueError(f"{op}: {describe(obj)} has no usable __name__; pass "
                             f"register_custom(name='...')")
    _check_name(op, name)
    previous = _REGISTRY.get(name)
    # The same definition run again (a reloaded module, a notebook cell) replaces itself.
    if previous is not None and previous is not obj and _origin(previous) != _origin(obj):
        raise ValueError(f"{op}: the name {name!r} is already registered for "
                         f"{describe(previous)}; choose another name")
    _REGISTRY[name] = obj
    return obj


def register_custom(name=None):
    """Register a custom loss, initializer or metric under ``name`` (default: its
    ``__name__``) so that files naming it load without ``custom_objects``. Use as
    ``@register_custom``, ``@register_custom("my_loss")`` or
    ``register_custom("my_loss")(fn)``."""
    if callable(name):  # used bare: @register_custom
        return _register(name, None)
    if name is not None:
        _check_name("register_custom", name)
    return lambda obj: _register(obj, name)


def registered_name(obj):
    """The name ``obj`` is registered under, or None."""
    return next((name for name, value in _REGISTRY.items() if value is obj), None)


def check_custom_objects(op, custom_objects) -> dict:
    """``custom_objects`` (None or a mapping name -> callable) as a dict."""
    if custom_objects is None:
        return {}
    if not isinstance(custom_objects, Mapping):
        raise TypeError(f"{op}: 'custom_objects' must be a dict name -> callable; received "
                        f"{describe(custom_objects)}")
    for name, obj in custom_objects.items():
        _check_name(f"{op}: 'custom_objects' key", name)
        if not callable(obj):
            raise TypeError(f"{op}: 'custom_objects'[{name!r}] must be callable; received "
                            f"{describe(obj)}")
    return dict(custom_objects)


@contextlib.contextmanager
def saving(custom_objects: dict):
    """While a file is written: name objects by ``custom_objects`` and refuse the unnamed."""
    token = _SAVING.set(({id(obj): name for name, obj in custom_objects.items()},
                         custom_objects))
    try:
        yield
    finally:
        _SAVING.reset(token)


def reference(obj, what: str) -> dict:
    """``{"custom": name}`` for a non-built-in callable ``obj`` (``what`` says where it is
    used). While saving, a callable without a name raises a ValueError saying how to name
    it; otherwise its ``__name__`` stands in."""
    scope = _SAVING.get()
    names, given = scope if scope is not None else ({}, {})
    name = names.get(id(obj))
    if name is None:
        name = registered_name(obj)
        if name is not None and name in given:
            raise ValueError(f"save: {what} is registered as {name!r}, but custom_objects maps "
                             f"{name!r} to {describe(given[name])}; use another key")
    if name is None and scope is not None:
        hint = getattr(obj, "__name__", "")
        hint = hint if hint.isidentifier() else "my_object"
        raise ValueError(
            f"save: {what} is the custom callable {describe(obj)}, which the file could only "
            f"name and load could not find. Register it (decorate its definition with "
            f"@handgrad.io.register_custom or call handgrad.io.register_custom({hint!r})(obj)), "
            f"or pass custom_objects={{{hint!r}: obj}} to save and to load")
    return {KEY: name if name is not None else getattr(obj, "__name__", type(obj).__name__)}


def is_reference(value) -> bool:
    """True for a stored ``{"custom": ...}`` entry."""
    return isinstance(value, dict) and set(value) == {KEY}


def resolve(value, custom_objects: dict, where: str, field: str):
    """The object a stored ``{"custom": name}`` names: ``custom_objects`` first, then the
    registry; a missing name is a ValueError naming the file, the field and the name."""
    name = value[KEY]
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: field '{field}' must be {{'custom': <a name>}}; received "
                         f"{value!r}")
    if name in custom_objects:
        return custom_objects[name]
    if name in _REGISTRY:
        return _REGISTRY[name]
    raise ValueError(
        f"{where}: field '{field}' names the custom object {name!r}, which is neither in "
        f"custom_objects nor registered; pass custom_objects={{{name!r}: <the object>}} to "
        f"load, or first import the code that registers it with "
        f"@handgrad.io.register_custom")
