"""``SparseEvolution``: a Dense layer with a sparse, evolving connectivity mask (Sparse
Evolutionary Training, Mocanu et al. 2018).

The mask (F_in, F_out) of 0/1 in the layer's dtype is a buffer (saved and loaded with the
weights). It starts as an Erdős–Rényi graph: ``round(density * F_in * F_out)`` connections
at random places, ``density = min(1, epsilon * (F_in + F_out) / (F_in * F_out))``.
:meth:`SparseEvolution.evolve` (after each epoch;
:class:`handgrad.training.SparseEvolutionCallback` calls it in ``fit``) prunes the weakest
connections and grows as many new ones.
The mask is drawn with the weights, from the build generator (the model's seed, or the
layer's ``seed``); evolution draws (grown places, their weights) come from the layer's
seeded Generator ``rng`` (``Layer.draws_random``), so a seeded model evolves identically.

Masked weights. ``W`` is kept zero off the mask: build, :meth:`~SparseEvolution.evolve`,
every forward and :meth:`~SparseEvolution.apply_mask` multiply it by the mask in place. The
weight gradient is zero off the mask, but an optimizer's state can still move a masked
weight (momentum or Adam moments of a connection that ``evolve`` removed); the next forward
clears that before it is used, and the ``fit`` callback clears it after every step. The
torch twin and the ONNX export apply the mask first, so they see ``W * mask``.
"""

from __future__ import annotations

import numpy as np

from .. import initializers
from .._hyper import number
from . import declarations as twins
from .core import Dense
from .registry import register


def sparse_dense_params(layer, layout):
    """Linear: weight = (W * mask).T, bias = b; the mask stays with the layer (torch's
    Linear has none: an imported dense weight is masked by the layer's own mask)."""
    layer.apply_mask()
    return twins.dense_params(layer, layout)


def connection_count(density, size):
    """The number of connections of an Erdős–Rényi mask of ``density`` over ``size``
    places (at least one)."""
    return max(1, min(size, round(density * size)))


@register
class SparseEvolution(Dense):
    """Sparse fully connected layer (..., F_in) -> (..., out_features):
    y = x (W * mask) + b, with dx = dy (W * mask)^T, dW = (x^T dy) * mask, db = sum dy.

    ``epsilon`` (> 0) sets the density ``min(1, epsilon (F_in + F_out) / (F_in F_out))``
    of the random mask; the other arguments are :class:`Dense`'s (``seed`` seeds the
    mask and evolution draws, else they follow the model's seed)."""

    torch_twin = twins.TorchTwin("Linear", sparse_dense_params, twins.RESET)
    draws_random = True

    def __init__(self, out_features, epsilon=20.0, bias=True, **kwargs):
        super().__init__(out_features, bias=bias, **kwargs)
        self.epsilon = number(type(self).__name__, "epsilon", epsilon, low=0.0, low_open=True)

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}

    @property
    def density(self) -> float:
        """The mask's initial density ``min(1, epsilon (F_in + F_out) / (F_in F_out))``."""
        if not self.built and self.input_shape is None:
            raise RuntimeError(f"{self.label}: the density depends on F_in, known when the "
                               f"layer is built; run the layer on data first")
        n_in, n_out = self.input_shape[-1], self.out_features
        return min(1.0, self.epsilon * (n_in + n_out) / (n_in * n_out))

    def _build(self, input_shape, rng):
        if len(input_shape) < 1 or input_shape[-1] < 1:
            super()._build(input_shape, rng)  # refuses a rank-0 example
            raise ValueError(f"{self.label}: expects inputs (N, ..., F_in) with F_in >= 1; "
                             f"received per-example shape {tuple(input_shape)}")
        mask = np.zeros((input_shape[-1], self.out_features), dtype=self.dtype)
        count = connection_count(self.density, mask.size)  # drawn first: the same mask in
        mask.flat[rng.choice(mask.size, count, replace=False)] = 1  # float32 and float64
        super()._build(input_shape, rng)
        self.buffers["mask"] = mask
        self.apply_mask()

    def apply_mask(self):
        """Zero ``W`` off the mask, in place (what an optimizer moved there)."""
        np.multiply(self.parameters["W"], self.buffers["mask"], out=self.parameters["W"])

    @property
    def connections(self) -> int:
        """The number of connections (ones of the mask)."""
        return int(np.count_nonzero(self.buffers["mask"]))

    def _forward(self, x, training):
        self.apply_mask()
        return super()._forward(x, training)

    def _backward(self, dy, cache):
        dx, grads = super()._backward(dy, cache)
        grads["W"] = grads["W"] * self.buffers["mask"]
        return dx, grads

    def _double_backward(self, q, dy, cache):
        """Dense's, the weight term masked: dP/dW = (q^T dy) * mask."""
        d_dy, d_x, grads = super()._double_backward(q, dy, cache)
        return d_dy, d_x, {"W": grads["W"] * self.buffers["mask"]}

    def export_weight(self):
        """``W * mask`` (what the ONNX export writes)."""
        return self.parameters["W"] * self.buffers["mask"]

    def evolve(self, zeta=0.3):
        """One SET step; returns the number of connections replaced.

        Of the connections with weight >= 0, the ``floor(zeta * count)`` smallest are
        removed, and of those with weight < 0 the ``floor(zeta * count)`` closest to zero
        (ties: the lower flat index first); as many new connections are placed at random
        among the places then empty (a removed place may be drawn again), with weights
        drawn by ``kernel_initializer`` from ``rng``. The number of connections is kept."""
        zeta = number(f"{self.label}.evolve", "zeta", zeta, low=0.0, high=1.0, high_open=True)
        if not self.built:
            raise RuntimeError(f"{self.label}: evolve() needs the mask, which is made when "
                               f"the layer is built; run the layer on data first")
        weight, mask = self.parameters["W"], self.buffers["mask"]
        w, flat_mask = weight.reshape(-1), mask.reshape(-1)
        active = np.flatnonzero(flat_mask)
        values = w[active]
        removed = []
        for group, key in ((active[values >= 0], w), (active[values < 0], -w)):
            count = int(np.floor(zeta * group.size))
            order = np.lexsort((group, key[group]))  # by value, then by index
            removed.append(group[order[:count]])
        removed = np.concatenate(removed)
        if removed.size == 0:
            return 0
        mask.flat[removed] = 0
        weight.flat[removed] = 0
        grown = self.rng.choice(np.flatnonzero(flat_mask == 0), removed.size, replace=False)
        init = initializers.get(self.kernel_initializer)
        fresh = init(weight.shape, dtype=self.dtype, rng=self.rng)
        mask.flat[grown] = 1
        weight.flat[grown] = fresh.reshape(-1)[grown]
        return int(removed.size)

