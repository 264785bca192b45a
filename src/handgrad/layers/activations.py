"""Activation layers: each wraps one op pair of :mod:`handgrad.ops`."""

from __future__ import annotations

import typing

import numpy as np

from .. import ops
from .._checks import is_int
from .base import Layer
from .fused import activation_layer
from .registry import register


@register
class Activation(Layer):
    """y = f(x) elementwise (softmax: along ``axis``); no parameters.

    ``Activation("relu")`` (Keras's layer) computes the activation of that Keras name
    (see :mod:`.fused`); the classes below (``ReLU``, ...) are handgrad's spellings.

    Subclasses name their kernels (``forward_op``, ``backward_op``) and hyper-parameters;
    values are validated in ``__init__`` by calling the op once on a tiny array. The
    hyper-parameters may be given by position, in order (``LeakyReLU(0.2)``, as in PyTorch
    and Keras). One subclass is made for each op declared with a ``layer`` name
    (:mod:`handgrad.ops.declare`).
    """

    forward_op = staticmethod(ops.identity)
    backward_op = staticmethod(ops.identity_backward)
    gradgrad_op = None  # the second-order kernel (``ops.<name>_gradgrad``), if any
    defaults: typing.ClassVar[dict] = {}
    receptive_field = "pointwise"

    def onnx_form(self, g, v):
        """ONNX: the export's conversion of the kernel (``g.activation``)."""
        return g.activation(self, v)

    @classmethod
    def accepted_keywords(cls):
        """The keyword names the constructor takes (its ``**hyper`` are ``defaults``;
        ``Activation`` itself checks its own, those of the activation it names)."""
        if cls is Activation:
            return None
        return ("name", "trainable", "dtype", "seed", *cls.defaults)

    def __init__(self, *args, name=None, trainable=True, dtype=None, seed=None, **hyper):
        super().__init__(name=name, trainable=trainable, dtype=dtype, seed=seed)
        if type(self) is Activation:
            args = self._named_activation(args, hyper)
        hyper = self._positional(args, hyper)
        unknown = set(hyper) - set(self.defaults)
        if unknown:
            raise TypeError(f"{type(self).__name__}: unexpected argument(s) {sorted(unknown)}; "
                            f"valid: {sorted(self.defaults) or 'none'}")
        self.hyper = {**self.defaults, **hyper}
        checked = {k: v for k, v in self.hyper.items() if k != "axis"}
        self.forward_op(np.zeros((1, 1)), **checked)
        if "axis" in self.hyper and not is_int(self.hyper["axis"]):
            raise TypeError(f"{type(self).__name__}: 'axis' must be an int; received "
                            f"{self.hyper['axis']!r}")

    def _named_activation(self, args, hyper):
        """Keras's ``Activation("relu")``: take the kernels and hyper-parameters of the
        activation named first (or ``activation=``; None or "linear": the identity);
        returns the remaining positional arguments."""
        if args and "activation" in hyper:
            raise TypeError("Activation: 'activation' given both positionally and by keyword")
        name = args[0] if args else hyper.pop("activation", None)
        layer = activation_layer("Activation", name)
        self.activation = None if layer is None else name
        if layer is not None:
            for key in ("forward_op", "backward_op", "gradgrad_op", "defaults"):
                setattr(self, key, getattr(type(layer), key))
        return args[1:]

    def supports_double_backward(self):
        return self.gradgrad_op is not None

    def _positional(self, args, hyper):
        """The hyper-parameters given positionally, in the order of ``defaults``, as in
        PyTorch and Keras (``LeakyReLU(0.2)``, ``ELU(0.5)``), merged into ``hyper``."""
        owner, names = type(self).__name__, list(self.defaults)
        if len(args) > len(names):
            takes = f"at most {len(names)} positional argument(s) {names}" if names else \
                "no positional arguments (it has no hyper-parameters)"
            raise TypeError(f"{owner}: takes {takes}; received {len(args)}: {args!r}")
        for key, value in zip(names, args):
            if key in hyper:
                raise TypeError(f"{owner}: {key!r} given both positionally and by keyword")
            hyper[key] = value
        return hyper

    def get_config(self):
        config = {**super().get_config(), **self.hyper}
        if type(self) is Activation:
            config["activation"] = self.activation
        return config

    def _forward(self, x, training):
        return self.forward_op(x, **self.hyper)

    def _backward(self, dy, cache):
        return self.backward_op(dy, cache), {}

    @classmethod
    def has_double_backward(cls):
        return cls.gradgrad_op is not None

    def _double_backward(self, q, dy, cache):
        """(q f'(x), q dy f''(x), {}) from the op's ``*_gradgrad`` kernel."""
        if self.gradgrad_op is None:
            return super()._double_backward(q, dy, cache)
        return (*self.gradgrad_op(q, dy, cache), {})


def _ignore_arguments(self, *args, name=None, trainable=True, dtype=None, seed=None,
                      **unused):
    """torch's ``nn.Identity(*args, **kwargs)``: any other arguments are accepted and
    ignored (a placeholder keeps its replaced layer's call)."""
    Activation.__init__(self, name=name, trainable=trainable, dtype=dtype, seed=seed)


#: members that a generated class has beside its kernels, by layer name
_EXTRA = {"Identity": {"__init__": _ignore_arguments,
                       "accepted_keywords": classmethod(lambda cls: None)}}


def _activation(decl):
    """A registered :class:`Activation` subclass for one declared op (its kernels, and
    its hyper-parameters with their defaults from the forward's signature)."""
    gradgrad = decl.gradgrad and staticmethod(decl.gradgrad)
    namespace = {"forward_op": staticmethod(decl.forward),
                 "backward_op": staticmethod(decl.backward), "gradgrad_op": gradgrad,
                 "defaults": decl.hyper, "declaration": decl, "__module__": __name__,
                 "__doc__": decl.forward.__doc__.split(". ")[0].strip() + ".",
                 **_EXTRA.get(decl.layer, {})}
    return register(type(decl.layer, (Activation,), namespace))


# One class per declared activation (``ops/activations.py``: ``declare(..., layer="ReLU")``).
_CLASSES = {decl.layer: _activation(decl) for decl in ops.DECLARED.values() if decl.layer}
globals().update(_CLASSES)
__all__ = ["Activation", *_CLASSES]
