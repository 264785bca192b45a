"""How optimizers are constructed and configured: Keras's ``learning_rate`` as the name
of ``lr``, parameter groups as torch's first argument (``params=``), a clear refusal of
PyTorch's ``Adam(model.parameters(), lr=...)``, and no new attributes after construction
(a typo would be silently ignored).

Keras's argument names (:data:`KERAS_NAMES`) are accepted where the class takes the
handgrad (torch) argument they stand for: ``beta_1``/``beta_2`` for the two entries of
``betas`` (the other keeps its default), ``epsilon`` for ``eps``, ``rho`` for RMSProp's
``alpha``; ``momentum``, ``nesterov``, ``amsgrad``, ``weight_decay``, ``clipnorm`` and
``clipvalue`` are spelled alike. Only the names change: the defaults stay handgrad's
(torch's), e.g. Adam's ``eps=1e-8`` where Keras's ``epsilon`` is 1e-7, RMSProp's
``alpha=0.99`` and ``lr=0.01`` where Keras's ``rho`` is 0.9 and its learning rate 1e-3;
pass Keras's values for Keras's settings. The update rules stay torch's: ``eps`` is added
to the bias-corrected ``sqrt(v_hat)``, where Keras adds ``epsilon`` before the correction
(the two differ only where epsilon matters). Giving both spellings of one argument, or a
name the class does not take, is a TypeError naming the accepted spellings.

handgrad's optimizers take hyper-parameters (and parameter groups naming parameters):
``step(params, grads)`` receives the arrays (``fit`` passes the model's trainable ones).
"""

from __future__ import annotations

import functools
import inspect
import numbers
from collections.abc import Iterable, Mapping

from ._checks import describe, unknown_argument

_GROUPS = ("parameter groups name their parameters: [{'params': ['dense_0.W', ...], "
           "'weight_decay': 0.0}, ...] (or a dict subset of model.named_parameters()), "
           "see optimizers.param_groups")


def _groups(owner, args, kwargs):
    """``(groups or None, args, kwargs)``: parameter groups given as torch's first argument
    (or ``params=``) are taken out; parameters given as arrays are refused."""
    given = kwargs.get("params", args[0] if args else None)
    if "params" not in kwargs and (given is None or isinstance(given, (numbers.Real, str))):
        return None, args, kwargs
    if "params" in kwargs and given is None:
        return None, args, {k: v for k, v in kwargs.items() if k != "params"}
    if isinstance(given, (list, tuple)) and given and all(
            isinstance(g, Mapping) and "params" in g for g in given):
        if "params" in kwargs:
            return given, args, {k: v for k, v in kwargs.items() if k != "params"}
        return given, args[1:], kwargs
    groups = isinstance(given, (list, tuple)) and any(isinstance(g, Mapping) for g in given)
    if "params" in kwargs or groups or isinstance(given, (Iterable, Mapping)):
        raise TypeError(
            f"{owner}: received the parameters {describe(given)} as the first argument, as "
            f"torch.optim takes them; handgrad's optimizers take hyper-parameters "
            f"({owner}(lr=...)) and step(params, grads) receives the parameters (model.fit "
            f"passes the model's trainable ones); {_GROUPS}")
    return None, args, kwargs


#: Keras's argument name -> (handgrad's, the entry of it (None: the whole value))
KERAS_NAMES = {"learning_rate": ("lr", None), "beta_1": ("betas", 0),
               "beta_2": ("betas", 1), "epsilon": ("eps", None), "rho": ("alpha", None)}


def _keras_names(owner, init, args, kwargs):
    """``kwargs`` with Keras's names (:data:`KERAS_NAMES`) renamed to those ``init`` takes;
    a TypeError for both spellings of one argument or for a name ``init`` does not take."""
    parameters = inspect.signature(init).parameters
    if any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        return kwargs  # a constructor that forwards its keywords checks them itself
    accepted = [name for name in parameters if name != "self"]
    given = set(list(parameters)[1:1 + len(args)]) | set(kwargs)
    kwargs, parts = dict(kwargs), {}
    for keras, (target, entry) in KERAS_NAMES.items():
        if keras not in kwargs or keras in accepted or target not in accepted:
            continue
        if target in given:
            raise TypeError(f"{owner}: received both {keras!r} (Keras's name) and "
                            f"{target!r} (handgrad's) for one argument; give one of them")
        value = kwargs.pop(keras)
        if entry is None:
            kwargs[target] = value
        else:
            parts[entry] = value
    if parts:  # beta_1, beta_2: the other entry keeps handgrad's default
        default = list(parameters["betas"].default)
        kwargs["betas"] = tuple(parts.get(i, default[i]) for i in range(len(default)))
    spellings = [*accepted, *(k for k, (t, _) in KERAS_NAMES.items() if t in accepted)]
    for key in kwargs:
        if key not in accepted:
            raise unknown_argument(owner, key, spellings)
    return kwargs


def _checked_init(cls, init):
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        owner = type(self).__name__
        groups, args, kwargs = _groups(owner, args, kwargs)
        kwargs = _keras_names(owner, init, args, kwargs)
        object.__setattr__(self, "_configured", False)
        init(self, *args, **kwargs)
        if type(self).__init__ is __init__:  # the outermost constructor has finished
            if groups is not None:
                self._set_groups(groups)
            object.__setattr__(self, "_configured", True)
    signature = inspect.signature(init)  # from_config may pass the groups as params=
    if not any(p.kind is p.VAR_KEYWORD or p.name == "params"
               for p in signature.parameters.values()):
        __init__.__signature__ = signature.replace(parameters=[
            *signature.parameters.values(),
            inspect.Parameter("params", inspect.Parameter.KEYWORD_ONLY, default=None)])
    return __init__


class OptimizerArguments:
    """Base of :class:`handgrad.optimizers.Optimizer`: every constructor accepts
    ``learning_rate=`` for ``lr`` and parameter groups first (or as ``params=``), and
    refuses parameters given as arrays (PyTorch's ``Adam(model.parameters())``);
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
