"""``TiedDense``: an output projection that reuses an ``Embedding``'s table (weight tying).

A language model whose logits are ``h @ E.T + b`` (``E`` the input embedding's table)
holds ``E`` once: it stays the Embedding's parameter ``W``, so ``named_parameters``,
``named_gradients``, ``count_params``, checkpoints and the optimizer see it once (one
optimizer state). The gradient of the projection, ``dE = dy^T h`` (V, D), is added into
the Embedding's ``gradients["W"]``, next to the lookup's, so the two uses sum into one
array. ``TiedDense`` owns only its bias ``b`` (V,).

Its config names the Embedding (``"embedding": <layer name>``); ``Sequential`` and graph
``Model`` link the name to the layer when rebuilt from a config (:func:`link_tied`), so
save/load round-trips the tie. PyTorch's twin is ``nn.Linear(D, V)`` with
``lm_head.weight = embedding.weight``.
"""

from __future__ import annotations

from .. import initializers, ops
from .._checks import describe
from . import declarations as twins
from . import onnx_forms
from .base import Layer
from .embedding import Embedding
from .registry import register


@register
class TiedDense(Layer):
    """h (N, ..., D) -> logits (N, ..., V) = h @ E.T + b, E = ``embedding``'s table (V, D).

    ``embedding`` is an :class:`Embedding` (or its name, linked by the model that holds
    both, see :func:`link_tied`); ``use_bias`` adds b (V,), initialized as torch's
    ``nn.Linear`` bias, U(+-1/sqrt(D)). Backward: dh = dy E, dE = dy^T h (added to the
    Embedding's gradient), db = sum of dy over the leading axes.
    """

    torch_twin = twins.TorchTwin("Linear", twins.tied_dense_params, twins.RESET)
    onnx_form = onnx_forms.tied_dense
    receptive_field = "pointwise"

    def __init__(self, embedding, use_bias=True, *, name=None, trainable=True, dtype=None,
                 seed=None):
        super().__init__(name=name, trainable=trainable, dtype=dtype, seed=seed)
        owner = type(self).__name__
        if not isinstance(embedding, (Embedding, str)):
            raise TypeError(f"{owner}: 'embedding' must be an Embedding layer (or its name); "
                            f"received {describe(embedding)}")
        if not isinstance(use_bias, bool):
            raise TypeError(f"{owner}: 'use_bias' must be a bool; received {use_bias!r}")
        self.use_bias = use_bias
        self.embedding = embedding if isinstance(embedding, Embedding) else None
        self._embedding_name = embedding if isinstance(embedding, str) else None

    @property
    def embedding_name(self):
        """The name of the tied Embedding (None for an unnamed one)."""
        return self.embedding.name if self.embedding is not None else self._embedding_name

    def get_config(self):
        name = self.embedding_name
        if name is None:
            raise ValueError(f"{self.label}: its Embedding has no name, so the tie cannot be "
                             f"written; add both layers to one model (which names them) or "
                             f"name the Embedding")
        return {**super().get_config(), "embedding": name, "use_bias": self.use_bias}

    def link(self, embedding):
        """Tie to ``embedding`` (the Embedding that the config named)."""
        if not isinstance(embedding, Embedding):
            raise TypeError(f"{self.label}: 'embedding' must be an Embedding layer; received "
                            f"{describe(embedding)}")
        self.embedding = embedding

    def _table(self):
        if self.embedding is None:
            raise ValueError(f"{self.label}: its Embedding {self._embedding_name!r} is not "
                             f"linked; build the model that holds both from one config "
                             f"(Sequential or Model.from_config, handgrad.io.load) or call "
                             f"handgrad.layers.link_tied(model)")
        if not self.embedding.built:
            raise ValueError(f"{self.label}: its {self.embedding.label} is not built yet; "
                             f"run or build the Embedding first (it comes earlier in the model)")
        return self.embedding.parameters["W"]

    @property
    def table(self):
        """E (V, D), the Embedding's own array (not a copy)."""
        return self._table()

    @property
    def tied_parameters(self) -> dict:
        """``{"E": table}``: the array this layer uses but does not own (not listed by
        ``named_parameters``; the torch and ONNX exports read it here)."""
        return {"E": self._table()}

    # ------------------------------------------------------------------ build
    def _build(self, input_shape, rng):
        if self.embedding is None:
            self._table()  # the error that says how to link it
        features = self.embedding.embedding_dim
        if len(input_shape) < 1 or input_shape[-1] != features:
            raise ValueError(f"{self.label}: expects inputs (N, ..., {features}) (the "
                             f"embedding_dim of the tied {self.embedding.label}); received "
                             f"per-example shape {tuple(input_shape)}")
        if self.use_bias:
            bias = initializers.torch_default_bias(features)
            self.add_parameter("b", (self.embedding.num_embeddings,), bias, rng)

    def graph_build(self, input_shapes, rng, dtype):
        """In a graph the call is probed on a copy whose Embedding may not be built yet:
        it is then built here (for ids of h's leading shape, as in a language model)."""
        if self.embedding is not None and not self.embedding.built:
            self.embedding.build(tuple(input_shapes[0])[:-1], rng=rng, dtype=dtype)
        super().graph_build(input_shapes, rng, dtype)

    def output_shape(self, input_shape):
        self.ensure_built(input_shape)
        return (*tuple(input_shape)[:-1], self.embedding.num_embeddings)

    # ------------------------------------------------------- forward/backward
    def _forward(self, x, training):
        table = self._table()
        if x.dtype != table.dtype:
            raise TypeError(f"{self.label}: input dtype {x.dtype} does not match the tied "
                            f"{self.embedding.label}'s {table.dtype} table")
        return ops.linear(x, table.T, self.parameters.get("b"))

    def _grads(self, d_table, db):
        grads = {"E": d_table.T}
        if db is not None:
            grads["b"] = db
        return grads

    def _backward(self, dy, cache):
        dx, dw, db = ops.linear_backward(dy, cache)
        return dx, self._grads(dw, db)

    def _double_backward(self, q, dy, cache):
        """dh = dy E: dP/d dy = q E^T, dP/dE = (dy^T q) (V, D); no h or b term."""
        d_dy, dw = ops.linear_gradgrad(q, dy, cache)
        return d_dy, None, {"E": dw.T}

    def _accumulate(self, grads):
        """The table's gradient goes into the Embedding's (unless it is frozen), the
        bias's into this layer's."""
        grads = dict(grads)
        d_table = grads.pop("E", None)
        if d_table is not None and self.embedding.trainable:
            self.embedding.gradients["W"] += d_table
        super()._accumulate(grads)


def link_tied(layers):
    """Link every unlinked :class:`TiedDense` in ``layers`` (layers or containers, walked)
    to the Embedding of its name among them; returns the TiedDense layers left unlinked
    (their Embedding is elsewhere, e.g. in an outer model)."""
    embeddings, tied = {}, []
    for top in layers:
        for _, layer in top.walk():
            if isinstance(layer, Embedding) and layer.name is not None:
                embeddings.setdefault(layer.name, []).append(layer)
            elif isinstance(layer, TiedDense) and layer.embedding is None:
                tied.append(layer)
    left = []
    for layer in tied:
        found = embeddings.get(layer.embedding_name, [])
        if len(found) > 1:
            raise ValueError(f"{layer.label}: {len(found)} Embedding layers are named "
                             f"{layer.embedding_name!r}; the tie needs a unique name")
        if found:
            layer.link(found[0])
        else:
            left.append(layer)
    return left
