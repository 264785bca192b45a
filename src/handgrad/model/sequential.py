"""``Sequential``: a model is a layer that chains forward and reverses backward."""

from __future__ import annotations

from .._checks import describe
from ..inspect.anomaly import reports_anomalies
from ..inspect.summary import print_summary
from ..layers import REGISTRY, Layer, register
from ..layers.base import snake_case
from ..layers.caching import forward_scope, keeps_cache
from ..layers.masking import chain_call
from ..layers.symbolic import SymbolicTensor
from ..layers.tied import link_tied
from ..training.loop import TrainingMixin
from .keras_api import KerasModelAPI


def _input_shape(tensor, input_shape):
    """The per-example shape of a leading ``Input`` (Keras's ``Sequential([keras.Input(
    shape), ...])``); refused beside a different ``input_shape`` or as a layer's output."""
    if tensor.node is not None:
        raise TypeError("Sequential: the first item may be an hg.Input(shape), not the output "
                        f"of a layer call ({tensor!r}); use handgrad.Model for a graph")
    if None in tensor.shape:
        raise ValueError(f"Sequential: the leading Input's shape {tensor.shape} has a free "
                         f"(None) axis; Sequential builds for one per-example shape, a "
                         f"graph handgrad.Model(inputs, outputs) takes variable lengths")
    if input_shape is not None and tuple(input_shape) != tensor.shape:
        raise ValueError(f"Sequential: 'input_shape' {tuple(input_shape)} differs from the "
                         f"leading Input's shape {tensor.shape}; give one of them")
    return tensor.shape


@register
class Sequential(KerasModelAPI, TrainingMixin, Layer):
    """A stack of layers: ``forward`` runs them in order, ``backward`` in reverse.

    Parameters of the children are exposed by :meth:`named_parameters` as
    ``"<layer name>.<key>"`` (nested models add their own prefix). Layers without
    a name are named ``<snake_case class>_<index>``.
    """

    chain = True  # forward runs the children in order (see Layer.chain)

    def __init__(self, layers=(), *, name=None, dtype=None, seed=None, input_shape=None,
                 trainable=True):
        self.layers: list[Layer] = []
        super().__init__(name=name, dtype=dtype, seed=seed, trainable=trainable)
        self.training = True
        if not isinstance(layers, (list, tuple)):
            raise TypeError(f"Sequential: 'layers' must be a list of layers; received "
                            f"{describe(layers)}")
        layers = list(layers)
        if layers and isinstance(layers[0], SymbolicTensor):  # Keras's [keras.Input(shape), ...]
            input_shape = _input_shape(layers.pop(0), input_shape)
        for layer in layers:
            self.add(layer)
        if input_shape is None and self.layers:  # Keras's Dense(8, input_shape=(4,))
            input_shape = self.layers[0].declared_input_shape
        if input_shape is not None:
            self.build(input_shape)

    # ------------------------------------------------------------- structure
    def add(self, layer):
        if isinstance(layer, SymbolicTensor):
            raise TypeError(f"Sequential.add: 'layer' must be a handgrad Layer; received "
                            f"an hg.Input of shape {layer.shape}; an Input goes first in the "
                            f"list given to Sequential([hg.Input(shape), ...]), or use "
                            f"input_shape=")
        if not isinstance(layer, Layer):
            raise TypeError(f"Sequential.add: 'layer' must be a handgrad Layer; received "
                            f"{describe(layer)}")
        if layer.name is None:
            layer.name = f"{snake_case(type(layer).__name__)}_{len(self.layers)}"
        if any(other.name == layer.name for other in self.layers):
            raise ValueError(f"Sequential.add: a layer named {layer.name!r} is already in the "
                             f"model; layer names must be unique")
        if any(other is layer for other in self.layers):
            raise ValueError(f"Sequential.add: {layer.label} is already in the model")
        if not self.trainable:
            layer.trainable = False
        self.layers.append(layer)
        self.built = False
        return self

    def __iter__(self):
        return iter(self.layers)

    def __len__(self):
        return len(self.layers)

    def __getitem__(self, index):
        if isinstance(index, str):
            for layer in self.layers:
                if layer.name == index:
                    return layer
            raise KeyError(f"Sequential: no layer named {index!r}")
        return self.layers[index]

    def children(self):
        return ((layer.name, layer) for layer in self.layers)

    def get_config(self):
        config = super().get_config()
        config["layers"] = [{"class": type(layer).__name__, "config": layer.get_config()}
                            for layer in self.layers]
        if self.input_shape is not None:
            config["input_shape"] = list(self.input_shape)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        children = []
        for entry in config.pop("layers", []):
            if entry.get("class") not in REGISTRY:
                raise ValueError(f"Sequential.from_config: unknown layer class "
                                 f"{entry.get('class')!r}; known: {sorted(REGISTRY)}")
            children.append(REGISTRY[entry["class"]].from_config(entry["config"]))
        link_tied(children)  # a TiedDense's config names its Embedding
        return cls(children, **config)

    # ------------------------------------------------------------------ build
    def _build(self, input_shape, rng):
        if not self.layers:
            raise ValueError("Sequential: cannot build a model without layers")
        shape = input_shape
        for layer in self.layers:
            if not layer.built:
                layer.build(shape, rng=rng, dtype=self.dtype)
            else:
                layer.adopt(rng, self.dtype)
            shape = layer.output_shape(shape)
        self.output_shape_ = shape

    def output_shape(self, input_shape):
        self.ensure_built(input_shape)
        shape = tuple(input_shape)
        for layer in self.layers:
            shape = layer.output_shape(shape)
        return shape

    # ------------------------------------------------------- forward/backward
    @reports_anomalies  # its output is its last child's, which is checked
    def forward(self, x, training=None, grad=None):
        """The last layer's output. ``training`` (default: the mode set by :meth:`train` /
        :meth:`eval`): dropout on, batch statistics; ``grad`` (default: ``training``): keep
        the caches for :meth:`backward`. An outermost forward that keeps caches first drops
        what earlier forwards left without a backward."""
        training = self.training if training is None else training
        grad = keeps_cache(self.label, training, grad)
        if not self.built:
            shape = getattr(x, "shape", None)
            if shape is None or len(shape) < 1:
                raise TypeError(f"{self.label}: 'x' must be an array with a batch axis; "
                                f"received {describe(x)}")
            self.ensure_built(shape[1:])
        mask = None  # a mask of padded steps, carried along (layers/masking.py)
        with forward_scope(self, grad):
            for layer in self.layers:
                x, mask = chain_call(layer, x, mask, training)
        return x

    def backward(self, dy, *, input_grad=True):
        """dL/dx through the layers, latest first; ``input_grad=False``: None, and the
        first layer skips its dx where its op can (see ``Layer.backward``)."""
        for index in range(len(self.layers) - 1, -1, -1):
            dy = self.layers[index].backward(dy, input_grad=input_grad or index > 0)
        return dy

    # --------------------------------------------------------------- summary
    def summary(self, input_shape=None, print_fn=print):
        """Print (and return) a table of layer, output shape, parameter count, parameter
        memory and (for spatial inputs) receptive field; see :mod:`handgrad.inspect`.

        Shapes are inferred without data; ``input_shape`` (per example) is needed
        only if the model is not built yet.
        """
        return print_summary(self, input_shape, print_fn)

