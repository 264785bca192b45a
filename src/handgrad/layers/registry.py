"""The layer registry: class name -> class, for rebuilding a model from its saved
config. A layer registers itself where it is defined (``@register``). This module
imports nothing, so every floor can use it."""

REGISTRY: dict = {}


def register(cls):
    """Class decorator: make ``cls`` loadable from a saved config by its class name."""
    REGISTRY[cls.__name__] = cls
    return cls
