"""The layer registry: class name -> class, for rebuilding a model from its saved
config, and the one list the exports and error messages read the layer declarations
from. A layer registers itself where it is defined (``@register``). This module
imports nothing, so every floor can use it."""

REGISTRY: dict = {}


def register(cls):
    """Class decorator: make ``cls`` loadable from a saved config by its class name.

    A name belongs to one class: registering another class under a taken name raises a
    ValueError here, not when a file is saved. The same definition run again (a reloaded
    module, a notebook cell: same module and qualified name) replaces itself."""
    taken = REGISTRY.get(cls.__name__)
    if taken is not None and (taken.__module__, taken.__qualname__) != (
            cls.__module__, cls.__qualname__):
        raise ValueError(f"register: the layer name {cls.__name__!r} is taken by "
                         f"{taken.__module__}.{taken.__qualname__}; a saved file names layers "
                         f"by class, so {cls.__module__}.{cls.__qualname__} needs another name")
    REGISTRY[cls.__name__] = cls
    return cls
