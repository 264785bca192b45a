"""Keras's model methods on ``Sequential`` and ``Model``: weights as a list, files,
layers by name or index, and ``model(x)`` on arrays as inference.

**The order of** :meth:`KerasModelAPI.get_weights`: layer by layer as
:meth:`~handgrad.layers.Layer.walk` visits them (a ``Sequential`` in its order, a graph
``Model`` in the order of the layers' first calls, nested models depth first), each
layer's parameters in the order it creates them (``W`` then ``b`` for Dense; ``gamma``,
``beta`` for BatchNorm) then its buffers (BatchNorm's ``running_mean``,
``running_var``): Keras's order of trainable then non-trainable weights
(``moving_mean``, ``moving_variance``). ``[name for name in model.weight_names()]`` lists
the names in that order.
"""

from __future__ import annotations

import numpy as np

from .._checks import describe, is_int
from ..layers.symbolic import SymbolicTensor


def _symbolic(inputs) -> bool:
    if isinstance(inputs, (list, tuple)):
        return any(isinstance(t, SymbolicTensor) for t in inputs)
    if isinstance(inputs, dict):
        return any(isinstance(t, SymbolicTensor) for t in inputs.values())
    return isinstance(inputs, SymbolicTensor)


class KerasModelAPI:
    """Mixed into the models (before ``Layer``); see the module docstring."""

    def __call__(self, inputs, training=None):
        """On symbolic tensors: a graph call (the model becomes a layer of a bigger graph;
        ``training=False`` runs it in inference mode whatever the outer model's, as
        Keras's ``base_model(inputs, training=False)``, see :meth:`Layer.__call__`).
        On arrays (an array, a list or a dict as ``forward`` takes them): the outputs in
        inference mode with no cache kept, as Keras's ``model(x)`` (a dict for a model
        made with a dict of outputs); ``training=True``
        runs the training behaviour (dropout, batch statistics), still without caches."""
        if _symbolic(inputs):  # training: None or a bool fixing this call's mode
            return super().__call__(inputs, training)
        if training is not None and not isinstance(training, bool):
            raise TypeError(f"{self.label}: 'training' must be None or a bool; received "
                            f"{describe(training)}")
        outputs = self.forward(inputs, training=bool(training), grad=False)
        return outputs if getattr(self, "single_output", True) else \
            self.named_outputs(outputs)

    # -------------------------------------------------------------- weights
    def _weight_slots(self):
        """``[(name, array)]`` in :meth:`get_weights` order (the model's own arrays)."""
        return [(name, value) for name, value, _ in self.weight_slots()]

    def _require_built(self, op):
        if not self.built:
            raise ValueError(f"{self.label}.{op}: the model is not built yet (call it on data "
                             f"once or call model.build(input_shape))")

    def weight_names(self) -> list:
        """The names of :meth:`get_weights`' arrays, in its order."""
        self._require_built("weight_names")
        return [name for name, _ in self._weight_slots()]

    def get_weights(self) -> list:
        """Copies of every parameter and buffer, layer by layer (see the module
        docstring for the order)."""
        self._require_built("get_weights")
        return [np.array(value, copy=True) for _, value in self._weight_slots()]

    def set_weights(self, weights):
        """Copy ``weights`` (a list in :meth:`get_weights` order) into the model. The
        count, every shape and every dtype are checked first: nothing is copied when one
        differs."""
        op = f"{self.label}.set_weights"
        self._require_built("set_weights")
        if not isinstance(weights, (list, tuple)):
            raise TypeError(f"{op}: 'weights' must be a list of arrays (as get_weights "
                            f"returns); received {describe(weights)}")
        slots = self._weight_slots()
        if len(weights) != len(slots):
            raise ValueError(f"{op}: the model has {len(slots)} weight arrays "
                             f"{[name for name, _ in slots]}; received {len(weights)}")
        for index, ((name, target), value) in enumerate(zip(slots, weights)):
            if not (hasattr(value, "shape") and hasattr(value, "dtype")):
                raise TypeError(f"{op}: weights[{index}] ({name!r}) must be an array; "
                                f"received {describe(value)}")
            if tuple(value.shape) != tuple(target.shape):
                raise ValueError(f"{op}: weights[{index}] ({name!r}) must have shape "
                                 f"{tuple(target.shape)}; received {tuple(value.shape)}")
            if np.dtype(value.dtype) != target.dtype:
                raise ValueError(f"{op}: weights[{index}] ({name!r}) must have dtype "
                                 f"{target.dtype}; received {value.dtype} (cast it with "
                                 f".astype)")
        for (_, target), value in zip(slots, weights):
            target[...] = value

    # ---------------------------------------------------------------- files
    def save(self, path, include_optimizer=True, custom_objects=None):
        """The whole model in one safetensors file: config, weights and, if compiled,
        the optimizer with its state, the loss and the metrics;
        ``handgrad.load_model(path)`` (:func:`handgrad.io.load`) rebuilds it."""
        from ..io import save

        save(self, path, include_optimizer=include_optimizer, custom_objects=custom_objects)

    def save_weights(self, path):
        """Only the parameters and buffers, by name (:func:`handgrad.io.save_weights`)."""
        from ..io import save_weights

        save_weights(self, path)

    def load_weights(self, path):
        """Copy the weights of ``path`` (written by :meth:`save_weights` or :meth:`save`)
        into this built model, by name; a missing, unexpected or differently shaped array
        is a ValueError naming it, and nothing is copied."""
        from ..io import load_weights

        return load_weights(self, path)

    # --------------------------------------------------------------- layers
    def get_layer(self, name=None, index=None):
        """A direct layer by ``name`` or by ``index`` (in :attr:`layers` order), as
        Keras's; exactly one of them is given."""
        op = f"{self.label}.get_layer"
        layers = self.layers
        if (name is None) == (index is None):
            raise ValueError(f"{op}: give exactly one of 'name' and 'index'; received "
                             f"name={name!r}, index={index!r}")
        if index is not None:
            if not is_int(index):
                raise TypeError(f"{op}: 'index' must be an int; received {describe(index)}")
            if not -len(layers) <= index < len(layers):
                raise ValueError(f"{op}: 'index' must be in [{-len(layers)}, {len(layers)}) "
                                 f"for a model of {len(layers)} layers; received {index}")
            return layers[index]
        if not isinstance(name, str):
            raise TypeError(f"{op}: 'name' must be a string; received {describe(name)}")
        for layer in layers:
            if layer.name == name:
                return layer
        raise LayerNotFoundError(f"{op}: no layer named {name!r}; the layers are "
                                 f"{[layer.name for layer in layers]}")


class LayerNotFoundError(ValueError, KeyError):
    """``get_layer`` with an unknown name: a ValueError as Keras's (and a KeyError, as
    ``model["name"]`` raises)."""

    def __str__(self):
        return str(self.args[0])
