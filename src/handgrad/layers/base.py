"""The layer contract: validated config, lazy parameters, a cache stack.

``forward(x, training=True)`` pushes the op's cache; ``backward(dy)`` pops the
latest one, adds the parameter gradients into ``gradients`` and returns
``dL/dx``. Two forwards then two backwards (latest first) accumulate both
gradients, so a layer can be shared. ``training`` selects the behaviour (dropout,
batch statistics), ``grad`` (default: ``training``) whether the cache is kept: see
:mod:`.caching`, also for a model's outermost forward, which drops unconsumed caches.
"""

from __future__ import annotations

import functools
import inspect
import re
import threading

import numpy as np

from .. import initializers
from .._checks import describe, float_array, float_dtype, is_int
from .._device import to_device
from .._named import NamedArrays
from . import symbolic
from .caching import forward_scope, keeps_cache
from .declarations import Declarations
from .hooks import Hooked
from .keras_args import checked_init
from .placement import Placement
from .second_order import SecondOrder
from .weight_lists import WeightLists

_BUILD_LOCK = threading.RLock()  # lazy builds: one thread builds, the others wait


def check_dtype(owner, dtype):
    """``None`` or float32/float64, as a NumPy dtype (see :func:`_checks.float_dtype`)."""
    return float_dtype(owner, "dtype", dtype)


@functools.cache
def _skips_input_grad(cls) -> bool:
    """Whether ``cls._backward`` takes ``input_grad`` (its op can skip dx: convolutions,
    dense); a subclass that overrides ``_backward`` without it keeps the whole pass."""
    return "input_grad" in inspect.signature(cls._backward).parameters


def snake_case(name: str) -> str:
    return re.sub(r"(?<=[a-z])(?=[A-Z][a-z])", "_", name).lower()


class Layer(SecondOrder, WeightLists, Declarations, Hooked, Placement):
    """Base class of every layer (and of ``Sequential``).

    Subclasses implement ``_build(input_shape, rng)`` (create parameters with
    :meth:`add_parameter`), ``_forward(x, training) -> (y, cache)``,
    ``_backward(dy, cache) -> (dx, {name: grad})`` and ``get_config()``.
    Shapes given to ``build`` are per example (no batch axis). A container keeps no
    arrays of its own: it overrides :meth:`children`, and the prefixed ``named_*``,
    ``count_params``, ``zero_grad``, ``clear_caches``, ``extra_state``, ``trainable`` and
    Keras's ``weights`` lists (:mod:`.weight_lists`) reach its children through
    :meth:`walk`. Hooks (``register_forward_hook``, ``register_backward_hook``) and the
    data-parallel communicator: :mod:`.hooks`; the second-order pass: :mod:`.second_order`.
    """

    #: True for a model: its outermost forward that keeps caches releases the caches that
    #: earlier forwards of its tree left without a backward (see :func:`forward_scope`).
    releases_caches = False

    #: True for a layer that draws random numbers as it runs (dropout masks, noise). It
    #: holds a Generator ``rng`` (state in :meth:`extra_state`), made by :meth:`build` from
    #: the layer's own ``seed``, else spawned from the build generator: a SeedSequence child,
    #: so it follows the model's seed and the layer's place and moves no weight.
    draws_random = False

    #: True for a layer on spatial maps: it accepts Keras's ``data_format="channels_last"``
    #: (and refuses "channels_first"); see :mod:`.keras_args`, which also handles
    #: Keras's argument names and ``input_shape`` for every constructor.
    keras_data_format = False
    #: the per-example ``input_shape`` given to the constructor (Keras's spelling), or None
    declared_input_shape = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "__init__" in vars(cls):
            cls.__init__ = checked_init(vars(cls)["__init__"])

    def __init__(self, *, name=None, trainable=True, dtype=None, seed=None):
        owner = type(self).__name__
        if name is not None and not isinstance(name, str):
            raise TypeError(f"{owner}: 'name' must be a string or None; received {describe(name)}")
        if not isinstance(trainable, bool):
            raise TypeError(f"{owner}: 'trainable' must be a bool; received {trainable!r}")
        if seed is not None and not is_int(seed):
            raise TypeError(f"{owner}: 'seed' must be an int or None; received {describe(seed)}")
        self.name = name
        self._trainable = trainable  # a frozen child stays frozen in a trainable container
        if not trainable:
            self.trainable = False  # freezes the children
        self.dtype = check_dtype(owner, dtype)
        self.seed = seed
        if self.draws_random:
            self.rng = np.random.default_rng(seed)  # until build (see draws_random)
        self.parameters: dict = {}
        self.gradients: dict = {}
        self.buffers: dict = {}
        self.built = False
        self.input_shape = None
        self._caches: list = []

    # ----------------------------------------------------------------- config
    def __repr__(self):
        return f"{type(self).__name__}(name={self.name!r})"

    @property
    def label(self) -> str:
        return f"{type(self).__name__} {self.name!r}" if self.name else type(self).__name__

    @property
    def type_label(self) -> str:
        """The class name as the summary shows it (with a fused activation, if any)."""
        return type(self).__name__

    def get_config(self) -> dict:
        """Constructor arguments (JSON-serializable); subclasses extend it."""
        config = {"name": self.name, "trainable": self.trainable}
        if self.dtype is not None:
            config["dtype"] = str(self.dtype)
        if self.seed is not None:
            config["seed"] = self.seed
        return config

    @classmethod
    def from_config(cls, config: dict):
        return cls(**config)

    # ------------------------------------------------------------------ build
    def build(self, input_shape, rng=None, dtype=None):
        """Create the parameters for inputs of per-example shape ``input_shape``."""
        self.dtype = self.dtype or check_dtype(self.label, dtype) or np.dtype(np.float32)
        if rng is None:
            rng = np.random.default_rng(self.seed)
        if self.draws_random:
            self.rng = rng.spawn(1)[0] if self.seed is None else np.random.default_rng(self.seed)
        self.input_shape = tuple(int(d) for d in input_shape)
        self._build(self.input_shape, rng)
        self.gradients = {k: np.zeros_like(v) for k, v in self.parameters.items()}
        self.built = True
        if self.device != "cpu":  # drawn on the host (same numbers on every device), moved
            self.to(self.device)
        return self

    def ensure_built(self, input_shape):
        """Build on first use, exactly once even when several threads call ``forward``
        (or ``predict``) on an unbuilt layer at the same time."""
        if not self.built:
            with _BUILD_LOCK:
                if not self.built:
                    self.build(input_shape)

    def _build(self, input_shape, rng):
        """Layers with parameters override this."""

    def add_parameter(self, key, shape, initializer, rng):
        init = initializers.get(initializer)
        self.parameters[key] = init(tuple(shape), dtype=self.dtype, rng=rng)

    def output_shape(self, input_shape):
        """Per-example output shape: the op run in inference mode on one zero example."""
        self.ensure_built(input_shape)
        example = to_device(np.zeros((1, *input_shape), dtype=self.dtype), self.device)
        return tuple(self._forward(example, False)[0].shape[1:])

    # ------------------------------------------------------- forward/backward
    def forward(self, x, training=True, grad=None):
        """y = layer(x). ``training``: training behaviour (dropout, batch statistics);
        ``grad`` (default: ``training``): keep the cache for :meth:`backward`."""
        grad = keeps_cache(self.label, training, grad)
        x = float_array(self.label, "x", x)
        if x.ndim == 0:
            raise ValueError(f"{self.label}: 'x' must have a batch axis; received a scalar")
        self.ensure_built(x.shape[1:])
        if self.parameters:
            self.check_dtype(x)
            self.check_device(x)
        with forward_scope(self, grad):
            y, cache = self._forward(x, training)
        if grad:
            self._caches.append(cache)
        return y

    def check_dtype(self, x, holds="parameters", arg=None):
        """Refuse an input whose dtype is not the layer's (what the layer ``holds`` in that
        dtype: its parameters, running statistics, ...); ``arg`` names an input other
        than ``x``."""
        if x.dtype != self.dtype:
            what = f"'{arg}' has dtype" if arg else "input dtype"
            raise TypeError(f"{self.label}: {what} {x.dtype} does not match the layer's "
                            f"{self.dtype} {holds}; cast the input or build the layer/model "
                            f"with dtype='{x.dtype}'")

    def backward(self, dy, *, input_grad=True):
        """dL/dx for the latest unconsumed forward; adds into ``gradients`` unless frozen.
        ``input_grad=False`` (nobody reads dL/dx: a model's data input, like torch's
        tensors without ``requires_grad``): returns None, and a layer whose op can skip
        dx (convolutions, dense) skips it."""
        if not self._caches:
            raise RuntimeError(
                f"{self.label}: backward() called without a matching forward(x, training=True) "
                f"or forward(x, grad=True) (each forward's cache is consumed by exactly one "
                f"backward, and a model's new outermost forward drops the caches that "
                f"earlier ones left: call a model once on the joined batches, or inside a "
                f"graph Model)"
            )
        cache = self._caches.pop()
        if input_grad or not _skips_input_grad(type(self)):
            dx, grads = self._backward(dy, cache)
        else:
            dx, grads = self._backward(dy, cache, input_grad=False)
        self._accumulate(grads)
        return dx if input_grad else None

    @property
    def pending_backwards(self) -> int:
        """The forwards whose caches wait for a backward; 0 after the backward of the last
        one, when the step's parameter gradients are complete."""
        return len(self._caches)

    def _forward(self, x, training):
        raise NotImplementedError

    def _backward(self, dy, cache):
        raise NotImplementedError

    def _accumulate(self, grads):
        """Add ``{key: gradient}`` into ``gradients`` (nothing for a frozen layer)."""
        if self.trainable:
            for key, grad in grads.items():
                self.gradients[key] += grad

    def discard_cache(self):
        """Drop the latest training forward's cache without a backward."""
        self._latest_cache("discard_cache")
        self._caches.pop()

    def _latest_cache(self, method):
        if not self._caches:
            raise RuntimeError(f"{self.label}: {method}() called without a matching "
                               f"forward(x, training=True) or forward(x, grad=True)")
        return self._caches[-1]

    # ---------------------------------------------------------------- graphs
    def __call__(self, inputs, training=None):
        """Call on symbolic tensors (``handgrad.Input`` or earlier calls' outputs; a list
        for several inputs) to build a graph for ``handgrad.Model``; returns the output
        tensor. ``training`` (Keras's ``base_model(inputs, training=False)``): None runs
        this call as the model runs (``fit`` trains, ``predict`` infers); a bool fixes
        its behaviour (dropout, batch statistics) whatever the model's mode, while the
        backward still goes through it (``training=False`` in ``fit``: the inference
        forward keeps its cache, see :mod:`.caching`). To compute on arrays use
        :meth:`forward`."""
        return symbolic.connect(self, inputs, training)

    def graph_build(self, input_shapes, rng, dtype):
        """Build for a graph call on inputs of per-example ``input_shapes`` (a list)."""
        self.build(input_shapes[0], rng=rng, dtype=dtype)

    def adopt(self, rng, dtype):
        """Called on an already built layer when a model that contains it is built; a
        layer keeps its parameters (a graph ``Model`` made without a dtype takes the outer
        model's dtype, its values kept)."""

    def graph_forward(self, inputs, training):
        """Forward of one graph call; ``inputs`` is the list of input arrays (the cache is
        kept as the calling model's forward decides, see :func:`keeps_cache`)."""
        if len(inputs) != 1:
            raise TypeError(f"{self.label}: takes one input tensor; received {len(inputs)}")
        return self.forward(inputs[0], training=training)

    def graph_backward(self, dy, input_grad=True):
        """The input gradients of the latest graph call, a list (one per input);
        ``input_grad``: as in :meth:`backward` (a layer of several inputs may ignore it)."""
        return [self.backward(dy, input_grad=input_grad)]

    # ------------------------------------------------------------- children
    # The container protocol: a container (a model, a residual block) only overrides
    # ``children()``; everything below walks the tree, so a leaf sees just itself.

    #: True for a container whose forward runs its children one after the other in the
    #: order of :meth:`children` (``Sequential``), so that the summary, the plots and the
    #: exports may follow them step by step; other containers (a residual block, a graph
    #: model) are handled by their own class or not at all.
    chain = False

    def children(self):
        """``(name, layer)`` for each direct sub-layer, in order; a container overrides
        this (and sets its children before ``Layer.__init__``, which freezes them when
        given ``trainable=False`` and otherwise leaves each child's own setting)."""
        return iter(())

    def walk(self, prefix=""):
        """``(path, layer)`` for this layer and every nested one, depth first; paths join
        the children's names with dots, as in :meth:`named_parameters` (``"block.conv"``);
        this layer's own path is ``prefix`` (``""`` at the top)."""
        yield prefix, self
        for name, child in self.children():
            yield from child.walk(f"{prefix}.{name}" if prefix else name)

    @property
    def trainable(self) -> bool:
        """Whether backward adds into ``gradients``; setting it sets every child too (as
        Keras's, a container made around a frozen layer leaves it frozen)."""
        return self._trainable

    @trainable.setter
    def trainable(self, value):
        self._trainable = value
        for _, child in self.children():
            child.trainable = value

    def _named(self, attribute, trainable_only=False) -> NamedArrays:
        """``{"<path>.<key>": array}`` over the tree for ``parameters``, ``gradients`` or
        ``buffers`` (the layers' own arrays, not copies); ``trainable_only`` skips the
        arrays of frozen layers, which otherwise are named in ``.frozen`` (an optimizer
        given the dict leaves them alone)."""
        merged, frozen = {}, []
        for path, layer in self.walk():
            if trainable_only and not layer.trainable:
                continue
            for key, value in getattr(layer, attribute).items():
                name = f"{path}.{key}" if path else key
                merged[name] = value
                if not layer.trainable:
                    frozen.append(name)
        return NamedArrays(merged, frozen)

    def named_parameters(self, trainable_only=False) -> dict:
        return self._named("parameters", trainable_only)

    def named_gradients(self, trainable_only=False) -> dict:
        return self._named("gradients", trainable_only)

    def named_buffers(self) -> dict:
        return self._named("buffers")

    def count_params(self) -> int:
        """The number of parameter values; an unbuilt layer has none yet, and says so."""
        if not self.built:
            raise ValueError(f"{self.label}: count_params() needs the parameters, which are "
                             f"made when the layer is built: call build(input_shape), give "
                             f"input_shape to the model, or run it on data first")
        return int(sum(p.size for p in self.named_parameters().values()))

    def zero_grad(self):
        for grad in self.named_gradients().values():
            grad.fill(0)

    def clear_caches(self):
        for _, layer in self.walk():
            layer._caches.clear()

    def extra_state(self) -> dict:
        """JSON-serializable state beyond arrays (e.g. a random generator); a container's
        nests its children's by name (children without state are left out); a layer that
        :attr:`draws_random` keeps its generator's state under ``"rng"``."""
        state = {name: state for name, child in self.children()
                 if (state := child.extra_state())}
        if self.draws_random:
            state["rng"] = self.rng.bit_generator.state
        return state

    def load_extra_state(self, state: dict):
        """Restore what :meth:`extra_state` returned."""
        for name, child in self.children():
            if name in state:
                child.load_extra_state(state[name])
        if self.draws_random and "rng" in state:
            self.rng.bit_generator.state = state["rng"]
