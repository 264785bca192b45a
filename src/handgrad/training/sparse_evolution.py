"""SparseEvolutionCallback: Sparse Evolutionary Training in ``fit`` (see
:class:`handgrad.layers.SparseEvolution`)."""

from __future__ import annotations

from .._hyper import number
from ..layers.sparse import SparseEvolution
from .hooks import Callback

__all__ = ["SparseEvolutionCallback"]


class SparseEvolutionCallback(Callback):
    """At each epoch's end, ``evolve(zeta)`` every :class:`SparseEvolution` layer of the
    model (in the order of ``model.walk()``); after every training step, re-apply their
    masks, so that no optimizer state moves a weight off the mask. ``replaced`` holds,
    per epoch, ``{layer path: connections replaced}``."""

    def __init__(self, zeta=0.3):
        self.zeta = number(type(self).__name__, "zeta", zeta, low=0.0, high=1.0,
                           high_open=True)
        self.replaced: list[dict] = []

    def _layers(self):
        return [(path, layer) for path, layer in self.model.walk()
                if isinstance(layer, SparseEvolution)]

    def on_train_begin(self, logs=None):
        self.replaced = []

    def on_train_batch_end(self, batch, logs=None):
        for _, layer in self._layers():
            layer.apply_mask()

    def on_epoch_end(self, epoch, logs=None):
        self.replaced.append({path: layer.evolve(self.zeta) for path, layer in self._layers()})
