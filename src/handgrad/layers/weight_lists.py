"""Keras's weight lists on every layer and model: ``weights``, ``trainable_weights`` and
``non_trainable_weights``.

Each is a list of the layer tree's own arrays (not copies: updating one in place
updates the layer), in the order of ``get_weights``: layer by layer as
:meth:`~handgrad.layers.Layer.walk` visits them, each layer's parameters in the order it
creates them, then its buffers. ``trainable_weights``: the parameters of the trainable
layers; ``non_trainable_weights``: the parameters of the frozen layers and every buffer
(BatchNormalization's running statistics), as Keras's moving mean and variance.
``weights`` is both, in that order of layers.
"""

from __future__ import annotations


class WeightLists:
    """Mixed into :class:`~handgrad.layers.Layer`; see the module docstring."""

    def weight_slots(self) -> list:
        """``[(name, array, trainable)]`` over the tree, in ``get_weights`` order; names
        as :meth:`named_parameters` gives them."""
        slots = []
        for path, layer in self.walk():
            for arrays, trainable in ((layer.parameters, layer.trainable),
                                      (layer.buffers, False)):
                slots.extend((f"{path}.{key}" if path else key, value, trainable)
                             for key, value in arrays.items())
        return slots

    @property
    def weights(self) -> list:
        """Every parameter and buffer of the tree (see the module docstring)."""
        return [value for _, value, _ in self.weight_slots()]

    @property
    def trainable_weights(self) -> list:
        """The parameters of the trainable layers."""
        return [value for _, value, trainable in self.weight_slots() if trainable]

    @property
    def non_trainable_weights(self) -> list:
        """The parameters of the frozen layers and every buffer."""
        return [value for _, value, trainable in self.weight_slots() if not trainable]
