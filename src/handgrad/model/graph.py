"""``Model``: any directed acyclic graph of layers, built by calling layers on tensors.

    image, meta = hg.Input((28, 28, 1), name="image"), hg.Input((4,), name="meta")
    h = L.GlobalAvgPool2D()(L.ReLU()(L.Conv2D(16, 3, padding="same")(image)))
    z = L.Concatenate()([h, L.Dense(16)(meta)])
    model = hg.Model([image, meta], [L.Dense(10, name="logits")(z), L.Dense(1)(z)])

Forward runs the nodes (layer calls) in topological order. Backward runs them in
reverse: each node's output gradient is the sum over the nodes that consume that
tensor (fan-out), ``dL/dt = sum_j dL/dt_j``, and the node's layer turns it into its
input gradients. A layer called twice shares its weights: its cache stack pairs the
second forward with the first backward, so both gradients add into one array.
"""

from __future__ import annotations

import numpy as np

from .._checks import describe
from .._named import unique_names
from ..inspect.anomaly import AnomalyError, at_node, reports_anomalies
from ..inspect.summary import print_summary
from ..layers.base import Layer, check_dtype, snake_case
from ..layers.caching import forward_scope, keeps_cache
from ..layers.masking import graph_call
from ..layers.registry import REGISTRY, register
from ..layers.symbolic import GraphNetwork, SymbolicTensor, concrete, input_tensor
from ..training.loop import TrainingMixin
from .graph_io import arrays_by_input, config_of, output_gradients, replay
from .keras_api import KerasModelAPI


def Input(shape, name=None, dtype=None) -> SymbolicTensor:
    """A graph input: per-example ``shape`` (no batch axis), an optional ``name`` (the
    key of a dict passed to ``Model.forward``) and ``dtype`` (None: the model's)."""
    return input_tensor(shape, name, dtype)


def _as_list(owner, name, value):
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values or not all(isinstance(v, SymbolicTensor) for v in values):
        raise TypeError(f"{owner}: '{name}' must be a tensor or a list of tensors from "
                        f"handgrad.Input and layer calls; received {describe(value)}")
    return values


def _topological(outputs, inputs):
    """The nodes that lead from ``inputs`` to ``outputs``, each after its producers."""
    order, seen, given = [], set(), {t.uid for t in inputs}
    stack = [(t, False) for t in reversed(outputs)]
    while stack:
        tensor, expanded = stack.pop()
        node = tensor.node
        if tensor.uid in given:
            continue
        if node is None:
            raise ValueError(f"Model: an output depends on {tensor!r}, which is not in "
                             f"'inputs'; pass every Input the outputs need")
        if id(node) in seen:
            continue
        if expanded:
            seen.add(id(node))
            order.append(node)
            continue
        stack.append((tensor, True))
        stack.extend((t, False) for t in reversed(node.inputs)
                     if t.uid not in given and id(t.node) not in seen)
    return order


def _cast(layer, dtype):
    """``layer``'s own float arrays (parameters, gradients, buffers) cast to ``dtype``,
    their values kept; its dtype set to it."""
    for arrays in (layer.parameters, layer.gradients, layer.buffers):
        for key, value in arrays.items():
            if getattr(value, "dtype", None) is not None and value.dtype.kind == "f":
                arrays[key] = value.astype(dtype)
    layer.dtype = dtype


@register
class Model(KerasModelAPI, GraphNetwork, TrainingMixin, Layer):
    """A graph of layer calls from ``inputs`` to ``outputs`` (a tensor, a list, or a dict
    of named tensors: the names become ``output_names``, the keys of compile's losses and
    of ``y``, and ``predict`` and ``model(x)`` return a dict; ``forward`` a list).

    ``forward(x)`` takes an array, a list in input order or a dict keyed by Input names
    and returns an array (one output) or a list; ``backward(dy)`` takes an array or a
    list in output order (``None``: no gradient from that output) and returns ``dx``
    or a list in input order. ``dtype`` and ``seed`` decide the parameters of every
    layer that does not set its own. A Model is a layer: it can be called on tensors
    of another Model (several times: its weights are shared) and used in
    ``Sequential``. It builds its layers when it is made (from its own ``seed``), and
    keeps its weights when it is nested; made without a ``dtype``, it takes the outer
    model's (its arrays are cast). A layer frozen
    before (``trainable=False``) stays frozen; ``trainable=False`` freezes them all.
    """

    def __init__(self, inputs, outputs, *, name=None, dtype=None, seed=None, trainable=True):
        self.output_keys = None
        if isinstance(outputs, dict):  # Keras's dict outputs: named by their keys
            if not outputs or not all(isinstance(key, str) for key in outputs):
                raise TypeError(f"Model: a dict of 'outputs' must map names (strings) to "
                                f"tensors; received keys {list(outputs)}")
            self.output_keys = list(outputs)
            outputs = list(outputs.values())
        self.inputs = _as_list("Model", "inputs", inputs)
        self.outputs = _as_list("Model", "outputs", outputs)
        self.single_input = not isinstance(inputs, (list, tuple))
        self.single_output = not isinstance(outputs, (list, tuple))
        if any(t.node is not None for t in self.inputs):
            raise ValueError("Model: 'inputs' must be handgrad.Input tensors, not the "
                             "outputs of layer calls")
        if len({t.uid for t in self.inputs}) != len(self.inputs):
            raise ValueError("Model: the same Input appears twice in 'inputs'")
        self.nodes = _topological(self.outputs, self.inputs)
        self._layers = []  # no children yet: a frozen layer stays frozen in a trainable model
        super().__init__(name=name, dtype=dtype, seed=seed, trainable=trainable)
        for node in self.nodes:
            if not any(layer is node.layer for layer in self._layers):
                self._layers.append(node.layer)
        if not trainable:
            self.trainable = False
        self._name_layers()
        self.input_names = [t.name or f"input_{i}" for i, t in enumerate(self.inputs)]
        if len(set(self.input_names)) != len(self.input_names):
            raise ValueError(f"Model: the Inputs' names must be unique (they key the dicts "
                             f"given to forward and fit); received {self.input_names}")
        # a shared layer's several calls make outputs of one name: suffixed _1, _2, ...
        self.output_names = self.output_keys or unique_names([
            t.node.layer.name if t.node is not None else self.input_names[
                self.inputs.index(t)] for t in self.outputs])
        self.training = True
        # Made without its own dtype, a model takes the outer model's when it is nested
        # (see ``adopt``); its weights stay its own.
        self._own_dtype = dtype is not None
        self._built_here = []
        self.build(self.inputs[0].shape if self.single_input else [t.shape for t in self.inputs])

    def _name_layers(self):
        names = set()
        for index, layer in enumerate(self._layers):
            if layer is self:
                raise ValueError("Model: a model cannot contain itself")
            if layer.name is None:
                layer.name = f"{snake_case(type(layer).__name__)}_{index}"
            if layer.name in names:
                raise ValueError(f"Model: two layers are named {layer.name!r}; layer names "
                                 f"must be unique in a model")
            names.add(layer.name)

    # ----------------------------------------------------------- structure
    @property
    def layers(self):
        """The distinct layers in the order of their first call."""
        return list(self._layers)

    def children(self):
        return ((layer.name, layer) for layer in self._layers)

    def get_config(self):
        return {**super().get_config(), **config_of(self)}

    @classmethod
    def from_config(cls, config):
        inputs, outputs, rest = replay(config, REGISTRY, Input)
        return cls(inputs, outputs, **rest)

    def summary(self, print_fn=print):
        """Print (and return) a table with one row per node (layer call): output shape,
        parameters (a shared layer's at its first call), parameter memory, the calls or
        Inputs it is "Connected to" and, for spatial inputs, the receptive field; see
        :mod:`handgrad.inspect`."""
        return print_summary(self, print_fn=print_fn)

    # -------------------------------------------------------------- build
    def build(self, input_shape, rng=None, dtype=None):
        """Build every unbuilt layer, node by node, for the Inputs' shapes (given again
        as ``input_shape``: one shape, or a list for several inputs)."""
        expected = self._check_input_shape(input_shape)
        self.dtype = self.dtype or check_dtype(self.label, dtype) or np.dtype(np.float32)
        rng = np.random.default_rng(self.seed) if rng is None else rng
        for node in self.nodes:
            layer = node.layer
            if not layer.built:
                self._built_here.append((layer, layer.dtype))
                layer.graph_build([concrete(t.shape) for t in node.inputs], rng, self.dtype)
            elif not any(layer is built for built, _ in self._built_here):
                layer.adopt(rng, self.dtype)
        self.input_shape = expected[0] if self.single_input else expected
        self.built = True
        return self

    def _check_input_shape(self, input_shape):
        """The Inputs' shapes, after checking ``input_shape`` (one shape, or a list)."""
        expected = [t.shape for t in self.inputs]
        given = [input_shape] if self.single_input else list(input_shape)
        if [tuple(None if d is None else int(d) for d in s) for s in given] != expected:
            raise ValueError(f"{self.label}: takes per-example input shape(s) "
                             f"{expected[0] if self.single_input else expected}; received "
                             f"{input_shape}")
        return expected

    def adopt(self, rng, dtype):
        """Nested in a model being built: the weights stay as they are (initialized, loaded
        or trained). A model made without its own dtype takes the outer model's: the arrays
        of the layers it built without their own dtype are cast to it."""
        dtype = check_dtype(self.label, dtype)
        if self._own_dtype or dtype is None or dtype == self.dtype:
            return
        for layer, given_dtype in self._built_here:
            if given_dtype is None:
                _cast(layer, dtype)
        for node in self.nodes:
            if not any(node.layer is built for built, _ in self._built_here):
                node.layer.adopt(rng, dtype)
        self.dtype = dtype

    def graph_build(self, input_shapes, rng, dtype):
        self.build(input_shapes[0] if self.single_input else input_shapes, rng, dtype)

    def output_shape(self, input_shape):
        """The Outputs' per-example shapes (a list for several outputs), for inputs of the
        shape(s) the model was made for."""
        self._check_input_shape(input_shape)
        shapes = [t.shape for t in self.outputs]
        return shapes[0] if self.single_output else shapes

    # --------------------------------------------------- forward/backward
    @reports_anomalies  # its outputs are its nodes' outputs, which are checked
    def forward(self, x, training=None, grad=None):
        """The outputs (an array, or a list in output order) for ``x``: an array, a list
        in input order or a dict keyed by Input names. ``training`` (default: the mode
        set by :meth:`train`/:meth:`eval`): dropout on, batch statistics; ``grad``
        (default: ``training``) keeps the caches for :meth:`backward`. An outermost
        forward that keeps caches first drops what earlier forwards left unconsumed."""
        training = self.training if training is None else training
        grad = keeps_cache(self.label, training, grad)
        values = dict(zip((t.uid for t in self.inputs), arrays_by_input(self, x)))
        shapes = {uid: (value.shape, value.dtype) for uid, value in values.items()}
        node, masks = None, {}  # masks of padded steps by tensor (layers/masking.py)
        try:
            with forward_scope(self, grad):
                for node in self.nodes:
                    inputs = [values[t.uid] for t in node.inputs]
                    out, out_masks = graph_call(
                        node.layer, inputs, [masks.get(t.uid) for t in node.inputs],
                        training if node.training is None else node.training)
                    outs = out if isinstance(out, (list, tuple)) else [out]
                    for tensor, value, mask in zip(node.outputs, outs, out_masks):
                        masks[tensor.uid] = mask
                        values[tensor.uid] = value
                        shapes[tensor.uid] = (value.shape, value.dtype)
        except AnomalyError as error:
            at_node(error, self, node)
            raise
        if grad:
            self._caches.append(shapes)
        results = [values[t.uid] for t in self.outputs]
        return results[0] if self.single_output else results

    def backward(self, dy, *, input_grad=True):
        """The input gradients (an array, or a list in input order; None for an integer
        input) of the latest training forward, from ``dy``: an array or a list in output
        order, ``None`` for an output that gets no gradient. Parameter gradients are
        added into the layers' ``gradients``. ``input_grad=False``: None (each input's
        None), and the layers reading only the model's inputs skip their dx where they
        can (see ``Layer.backward``)."""
        if not self._caches:
            raise RuntimeError(f"{self.label}: backward() called without a matching "
                               f"forward(x, training=True) or forward(x, grad=True)")
        shapes, inputs = self._caches[-1], {t.uid for t in self.inputs}
        grads = output_gradients(self, dy, shapes)  # checked before the cache is consumed
        self._caches.pop()
        node = None
        try:
            for node in reversed(self.nodes):
                dys = [grads.pop(t.uid, None) for t in node.outputs]
                dys = [np.zeros(*shapes[t.uid]) if g is None else g
                       for g, t in zip(dys, node.outputs)]
                upstream = dys if len(dys) > 1 else dys[0]
                if input_grad or any(t.uid not in inputs for t in node.inputs):
                    dxs = node.layer.graph_backward(upstream)
                else:  # it reads only the model's inputs, whose gradient nobody reads
                    dxs = node.layer.graph_backward(upstream, input_grad=False)
                for tensor, dx in zip(node.inputs, dxs):
                    if dx is not None:
                        grads[tensor.uid] = grads[tensor.uid] + dx if tensor.uid in grads \
                            else dx
        except AnomalyError as error:
            at_node(error, self, node)
            raise
        dx = [grads.get(t.uid, np.zeros(*shapes[t.uid]))
              if input_grad and shapes[t.uid][1].kind in "fc" else None for t in self.inputs]
        return dx[0] if self.single_input else dx

    def graph_forward(self, inputs, training):
        return self.forward(inputs[0] if self.single_input else list(inputs), training)

    def graph_backward(self, dy, input_grad=True):
        dx = self.backward(dy, input_grad=input_grad)
        return [dx] if self.single_input else dx
