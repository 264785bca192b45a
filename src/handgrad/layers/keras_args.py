"""Keras's argument names beside handgrad's, applied in one place for every layer.

:func:`checked_init` wraps each layer class's ``__init__`` (``Layer.__init_subclass__``);
at the outermost constructor it rewrites the keyword arguments before the layer sees them:

- a Keras name (:data:`KERAS_NAMES`: ``units``, ``filters``, ``strides``, ``use_bias``,
  ``pool_size``, ``epsilon``, ``target_shape``, Embedding's ``input_dim`` and
  ``output_dim``) becomes handgrad's where the class takes
  that one; giving both spellings of one argument is a TypeError naming both;
- a call that used a Keras name (or a Keras class alias, see :mod:`.keras_layers`) gets
  Keras's default bias, ``bias_initializer="zeros"``, unless it names one (the kernel
  keeps handgrad's default, torch's, unless ``kernel_initializer`` is given);
- ``data_format``: ``"channels_last"`` (handgrad's layout) is accepted by the layers with
  spatial maps (``keras_data_format``), ``"channels_first"`` refused;
- ``input_shape`` (per example, Keras's way to build the first layer of a ``Sequential``)
  is kept as ``declared_input_shape``;
- ``device`` ("cpu" or "cuda", every layer's) places the layer (:mod:`.placement`);
- any other name the class does not take is a TypeError naming it, its close matches
  and the accepted spellings.
"""

from __future__ import annotations

import functools
import inspect

from .._checks import describe, is_int, unknown_argument

#: Keras's argument name -> handgrad's names it may stand for (the first the class takes)
KERAS_NAMES = {
    "units": ("out_features", "hidden_size"),
    "filters": ("out_channels",),
    "strides": ("stride",),
    "use_bias": ("bias",),
    "pool_size": ("kernel_size",),
    "epsilon": ("eps",),
    "target_shape": ("shape",),
    "input_dim": ("num_embeddings",),
    "output_dim": ("embedding_dim",),
}
#: the names every layer constructor takes beside its own (consumed here)
_EXTRA = ("input_shape", "data_format")


@functools.cache
def accepted_names(cls):
    """The keyword names ``cls(...)`` takes (None: any, a foreign ``**kwargs``): the named
    parameters of its ``__init__`` and, through each ``**kwargs``, of the next one up."""
    hook = getattr(cls, "accepted_keywords", None)
    if hook is not None:  # a class that consumes its own **kwargs (the activations)
        return hook()
    names = []
    for klass in cls.__mro__:
        if "__init__" not in vars(klass) or klass is object:
            continue
        init = inspect.unwrap(vars(klass)["__init__"])
        params = list(inspect.signature(init).parameters.values())[1:]
        names += [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return tuple(dict.fromkeys(names))
        if not klass.__module__.startswith("handgrad."):
            return None  # a user's layer with its own **kwargs: it decides
    return tuple(dict.fromkeys(names))


def _translate(owner, accepted, kwargs, positional):
    """Rename Keras's names to handgrad's in ``kwargs`` (``positional``: the names given
    by position); returns whether one was used."""
    used = False
    for keras, targets in KERAS_NAMES.items():
        if keras not in kwargs or keras in accepted:
            continue
        target = next((t for t in targets if t in accepted), None)
        if target is None:
            continue
        if target in kwargs or target in positional:
            raise TypeError(f"{owner}: received both {keras!r} (Keras's name) and {target!r} "
                            f"(handgrad's) for one argument; give one of them")
        kwargs[target] = kwargs.pop(keras)
        used = True
    return used


def _refuse_unknown(cls, accepted, kwargs):
    aliases = [k for k, targets in KERAS_NAMES.items() if any(t in accepted for t in targets)]
    extra = [k for k in _EXTRA if k != "data_format" or cls.keras_data_format]
    spellings = [k for k in (*accepted, *aliases, *extra) if k != "common"]
    for key in kwargs:
        if key not in accepted:
            raise unknown_argument(cls.__name__, key, spellings)


def _data_format(cls, owner, value):
    if not getattr(cls, "keras_data_format", False):
        raise TypeError(f"{owner}: takes no 'data_format' (it has no spatial maps); "
                        f"received {value!r}")
    if value == "channels_first":
        raise ValueError(f"{owner}: data_format='channels_first' is not supported: handgrad's "
                         f"maps are channels-last (N, ..., C); transpose the data "
                         f"(x.transpose(0, 2, 3, 1) for images) and drop data_format")
    if value != "channels_last":
        raise ValueError(f"{owner}: 'data_format' must be 'channels_last'; received "
                         f"{describe(value)}")


def _input_shape(owner, value):
    if not isinstance(value, (tuple, list)) or not value or not all(
            is_int(d) and d > 0 for d in value):
        raise TypeError(f"{owner}: 'input_shape' must be a tuple of positive ints (per "
                        f"example, without the batch axis); received {describe(value)}")
    return tuple(int(d) for d in value)


def _keras_defaults(cls, positional, kwargs):
    """Fill a Keras alias class's defaults (``keras_defaults``) for the arguments the call
    leaves out (by position or by name)."""
    for key, value in getattr(cls, "keras_defaults", {}).items():
        if key not in positional and key not in kwargs:
            kwargs[key] = value


def checked_init(init):
    """``init`` taking Keras's spellings and refusing unknown names (module docstring)."""
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        cls = type(self)
        if cls.__init__ is not __init__:  # an inner constructor: the outermost checked
            init(self, *args, **kwargs)
            return
        owner, accepted = cls.__name__, accepted_names(cls)
        device = kwargs.pop("device", None)  # every layer's (handgrad.layers.placement)
        shape = kwargs.pop("input_shape", None) if accepted is None or \
            "input_shape" not in accepted else None
        if "data_format" in kwargs and (accepted is None or "data_format" not in accepted):
            _data_format(cls, owner, kwargs.pop("data_format"))
        if accepted is not None:
            positional = set(inspect.signature(cls).bind_partial(*args).arguments) \
                if args else set()
            keras = _translate(owner, accepted, kwargs, positional)
            if (keras or getattr(cls, "keras_defaults", None)) and \
                    "bias_initializer" in accepted:
                kwargs.setdefault("bias_initializer", "zeros")
            _keras_defaults(cls, positional, kwargs)
            if keras and hasattr(cls, "check_keras_call"):  # a name whose meanings differ
                cls.check_keras_call(owner, kwargs)
            _refuse_unknown(cls, accepted, kwargs)
        init(self, *args, **kwargs)
        self.declared_input_shape = None if shape is None else _input_shape(owner, shape)
        if device is not None:
            self.to(device)
    return __init__
