"""How optimizers are constructed and configured: Keras's ``learning_rate`` as the name
of ``lr``, a clear refusal of PyTorch's ``Adam(model.parameters(), lr=...)``, and no
new attributes after construction (a typo would be silently ignored).

handgrad's optimizers take hyper-parameters only: ``step(params, grads)`` receives the
parameters (``fit`` passes the model's trainable ones).
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Iterable, Mapping

from ._checks import describe

_GROUPS = ("parameter groups are not supported yet: give each group its own optimizer "
           "and call its step(params, grads) with that group's arrays, or freeze what must "
           "not train (layer.trainable = False)")


def _torch_style(owner, args, kwargs):
    """Refuse parameters given where handgrad expects ``lr`` (PyTorch's first argument)."""
    given = kwargs.get("params", args[0] if args else None)
    if "params" not in kwargs and (given is None or isinstance(given, (numbers.Real, str))):
        return
    groups = isinstance(given, (list, tuple)) and any(isinstance(g, Mapping) for g in given)
    if "params" in kwargs or groups or isinstance(given, (Iterable, Mapping)):
        raise TypeError(
            f"{owner}: received the parameters {describe(given)} as the first argument, as "
            f"torch.optim takes them; handgrad's optimizers take hyper-parameters only "
            f"({owner}(lr=...)) and step(params, grads) receives the parameters (model.fit "
            f"passes the model's trainable ones)" + (f"; {_GROUPS}" if groups else ""))


def _checked_init(cls, init):
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        owner = type(self).__name__
        _torch_style(owner, args, kwargs)
        if "learning_rate" in kwargs:
            if "lr" in kwargs or args:
                raise TypeError(f"{owner}: give 'lr' or 'learning_rate' (its Keras name), not "
                                f"both")
            kwargs["lr"] = kwargs.pop("learning_rate")
        object.__setattr__(self, "_configured", False)
        init(self, *args, **kwargs)
        if type(self).__init__ is __init__:  # the outermost constructor has finished
            object.__setattr__(self, "_configured", True)
    return __init__


class OptimizerArguments:
    """Base of :class:`handgrad.optimizers.Optimizer`: every constructor accepts
    ``learning_rate=`` for ``lr`` and refuses PyTorch's parameters-first call;
    ``learning_rate`` is also an attribute (the same value as ``lr``); setting an
    attribute the optimizer does not have raises an AttributeError naming the known ones."""

    _configured = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = _checked_init(cls, cls.__dict__["__init__"])

    @property
    def learning_rate(self):
        """Keras's name of ``lr``."""
        return self.lr

    @learning_rate.setter
    def learning_rate(self, value):
        self.lr = value

    def __setattr__(self, name, value):
        if self._configured and name not in vars(self) and name != "learning_rate":
            known = sorted(k for k in vars(self) if not k.startswith("_")) + ["learning_rate"]
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r} to set "
                                 f"(setting it would change nothing); known: {known}")
        object.__setattr__(self, name, value)
