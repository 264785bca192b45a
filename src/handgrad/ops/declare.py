"""Op declarations: every op is declared once, beside its math, with what the rest of the
library derives from it.

    def softsign(x): ...                # y = x / (1 + |x|), the cache holds x
    def softsign_backward(dy, cache): ...   # dx = dy / (1 + |x|)^2

    declare(softsign, softsign_backward, layer="Softsign",
            value=lambda x: x / (1.0 + abs(x)),
            slopes=lambda x: (1.0 / (1.0 + abs(x)) ** 2,
                              -2.0 * math.copysign(1.0, x) / (1.0 + abs(x)) ** 3),
            torch=lambda F, t: F.softsign(t),
            onnx=lambda g, x: g.op("Softsign", [x], "softsign"))

Derived from the declarations (nothing else keeps a list of op names):

- ``handgrad.ops``: each family module ends with ``__all__ = exports(__name__, globals())``
  and ``ops/__init__.py`` star-imports the families, so ``ops.<name>`` is the ``def`` in
  the family file (grep and "go to definition" find it).
- ``handgrad.ops.reference``: the loop twins (functions of a reference module named as a
  declared kernel); an elementwise activation's twins are built from its scalar math
  (``value``, ``slopes``) by :mod:`handgrad.ops.reference.activations`.
- ``handgrad.layers``: one :class:`~handgrad.layers.Activation` class per ``layer=``.
- the ONNX converters (``onnx=``), ``ops.ACTIVATIONS``, the layer-case table of
  :mod:`handgrad.testing` and the parity tests (``torch=``, ``samples=``, ``kinks=``).

A second-order kernel that lives in another module declares itself with
``@second_order(forward)``.

Any other op declares its torch counterpart (handgrad's layout in and out) and its
:class:`Sample` inputs, which the op-case table runs through the op, its loop twin,
finite differences and torch::

    declare(conv1d, conv1d_backward, torch=torch_conv, samples=CONV1D)
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field, replace

DECLARED: dict = {}
"""Op name -> :class:`OpDecl`, in declaration order."""


@dataclass(frozen=True)
class Fixed:
    """A sample argument passed as it is, never differentiated (ids, a group count, a
    seed); an array of it is a tensor for torch."""

    value: object


@dataclass(frozen=True)
class Data:
    """A sample argument drawn at random but not differentiated (noise, targets):
    uniform in ``[low, high)`` when both are given, else standard normal."""

    shape: tuple
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Sample:
    """One sample input of an op for the op-case table: ``args`` in the forward's
    order, each a shape (a random float array, differentiated), None (an absent
    optional array), :class:`Data` or :class:`Fixed`; ``kwargs``. ``ties``: the first
    array drawn from small integers (max windows tie); ``negative``: all below zero
    (padding must never win a max); ``derivative``: False where the backward is a
    convention rather than the derivative (an embedding's padding row)."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    ties: bool = False
    negative: bool = False
    derivative: bool = True


@dataclass(frozen=True)
class OpDecl:
    """One op: its kernels and what the layers, converters, twins and tests need of it.

    ``forward(x, ...) -> (y, cache)``; ``backward(dy, cache)``; ``gradgrad(q, dy, cache)``
    (or None). For an activation with a layer class: ``layer`` (its class name);
    ``saves`` (``"x"`` or ``"y"``: what the cache holds); ``value(x, *params)`` and
    ``slopes(saved, *params) -> (f', f'')``, scalar math of the loop twins (``params``
    as in the cache); ``variants`` (table name -> keywords, e.g. ``gelu_tanh``).
    ``torch(F, *tensors, **kwargs)``: the ``torch.nn.functional`` counterpart, taking
    and returning tensors in handgrad's layout (it raises NotImplementedError for a
    case torch cannot express); ``onnx(g, x, **hyper) -> name``: the ONNX nodes;
    ``samples``: keyword sets (an activation) or :class:`Sample` s (any other op) for
    the test tables; ``kinks(**hyper)``: the points where f' or f'' jumps;
    ``grads``: the forward's argument names the backward's results are the gradients
    of, in order, where that is not the order of the sample's float arrays.
    """

    name: str
    forward: Callable
    backward: Callable
    gradgrad: Callable | None = None
    layer: str | None = None
    saves: str = "x"
    value: Callable | None = None
    slopes: Callable | None = None
    variants: dict = field(default_factory=dict)
    torch: Callable | None = None
    onnx: Callable | None = None
    samples: tuple = ({},)
    kinks: Callable = lambda **_: ()
    grads: tuple | None = None

    @property
    def kernels(self):
        """The kernel functions, forward first."""
        return tuple(k for k in (self.forward, self.backward, self.gradgrad) if k is not None)

    @property
    def hyper(self):
        """Hyper-parameter name -> default, read from the forward's signature (after the
        array arguments, which have no default)."""
        return {p.name: p.default for p in inspect.signature(self.forward).parameters.values()
                if p.default is not p.empty}

    @property
    def elementwise(self):
        """Whether the loop twins can be built from scalar math."""
        return self.value is not None and self.slopes is not None


def declare(forward, backward, **fields):
    """Declare the op ``forward.__name__`` (see :class:`OpDecl` for ``fields``)."""
    name = forward.__name__
    if backward.__name__ != f"{name}_backward":
        raise ValueError(f"declare: the backward of {name!r} must be named "
                         f"'{name}_backward'; received {backward.__name__!r}")
    if name in DECLARED:
        raise ValueError(f"declare: {name!r} is already declared")
    DECLARED[name] = OpDecl(name, forward, backward, **fields)
    return DECLARED[name]


def second_order(forward):
    """Decorator: declare ``<op>_gradgrad`` as the second-order kernel of ``forward``."""

    def attach(gradgrad):
        decl = declaration(forward)
        if gradgrad.__name__ != f"{decl.name}_gradgrad":
            raise ValueError(f"second_order: the kernel of {decl.name!r} must be named "
                             f"'{decl.name}_gradgrad'; received {gradgrad.__name__!r}")
        DECLARED[decl.name] = replace(decl, gradgrad=gradgrad)
        return gradgrad

    return attach


def declaration(kernel):
    """The :class:`OpDecl` of a forward kernel (or of its name)."""
    for decl in DECLARED.values():
        if kernel is decl.forward or kernel == decl.name:
            return decl
    raise KeyError(f"no op is declared with forward {getattr(kernel, '__name__', kernel)!r}; "
                   f"declared: {', '.join(DECLARED)}")


def kernel_names():
    """Every declared kernel name (forward, backward, second order)."""
    return [k.__name__ for decl in DECLARED.values() for k in decl.kernels]


def exports(module, namespace):
    """``__all__`` of an op module: the declared kernel names it defines (for an ops
    family, its kernels; for a reference module, its loop twins)."""
    return [name for name in kernel_names()
            if getattr(namespace.get(name), "__module__", None) == module]


def activations():
    """The declared activations (ops with a layer class), in declaration order."""
    return [decl for decl in DECLARED.values() if decl.layer]


def activation_table():
    """Lower-case name -> ``(forward, backward)`` of every activation and variant;
    forwards use their defaults (a variant's forward binds its keywords)."""
    table = {}
    for decl in activations():
        table[decl.name] = (decl.forward, decl.backward)
        for variant, keywords in decl.variants.items():
            table[variant] = (functools.partial(decl.forward, **keywords), decl.backward)
    return table
