"""``Embedding``: a trainable lookup table for integer ids.

Its input is an integer array, so it overrides :meth:`Layer.forward` (which
expects floats): ids of any shape (N, ...) give (N, ..., embedding_dim) in the
table's dtype. There is no gradient for integer ids: :meth:`backward` adds the
table's gradient into ``gradients["W"]`` and returns ``None``, so an Embedding
is the first layer of a model.
"""

from __future__ import annotations

from .. import ops, regularizers
from .._checks import choice, describe, positive_int
from .._hyper import flag
from ..ops import check_ids, check_max_norm, check_padding_idx, embedding_renorm_
from . import declarations as twins
from . import onnx_forms
from .base import Layer
from .caching import keeps_cache
from .registry import register


def standard_normal(shape, dtype, rng):
    """N(0, 1) samples in ``dtype``: PyTorch's default embedding initialization."""
    return rng.standard_normal(shape, dtype=dtype)


@register
class Embedding(Layer):
    """ids (N, ...) integers in [0, num_embeddings) -> (N, ..., embedding_dim).

    The table ``W`` (num_embeddings, embedding_dim) starts N(0, 1) with the ``padding_idx``
    row (an int in [-num_embeddings, num_embeddings) or None) set to zero; that row never
    receives a gradient (PyTorch's ``nn.Embedding``). With ``max_norm`` (a number > 0), each
    forward first rescales IN PLACE the looked-up rows whose ``norm_type``-norm exceeds it to
    that norm (:func:`~handgrad.ops.embedding_renorm_`; not differentiated).
    """

    torch_twin = twins.TorchTwin("Embedding", twins.embedding_params, twins.RESET)
    onnx_form = onnx_forms.embedding
    takes_ids = True

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=2.0, mask_zero=False, embeddings_regularizer=None, **kwargs):
        super().__init__(**kwargs)
        owner = type(self).__name__
        self.mask_zero = flag(owner, "mask_zero", mask_zero)
        # Keras's embeddings_regularizer: a penalty on the table (handgrad.regularizers)
        self.embeddings_regularizer = regularizers.get(owner, "embeddings_regularizer",
                                                       embeddings_regularizer)
        self.activity_regularizer, self.activity_penalty = None, 0.0
        self.num_embeddings = positive_int(owner, "num_embeddings", num_embeddings)
        self.embedding_dim = positive_int(owner, "embedding_dim", embedding_dim)
        check_padding_idx(owner, padding_idx, self.num_embeddings)
        self.padding_idx = padding_idx
        self.max_norm, self.norm_type = check_max_norm(owner, max_norm, norm_type)

    def get_config(self):
        return {**super().get_config(), "num_embeddings": self.num_embeddings,
                "embedding_dim": self.embedding_dim, "padding_idx": self.padding_idx,
                "max_norm": self.max_norm, "norm_type": self.norm_type,
                **({"mask_zero": True} if self.mask_zero else {}),
                **({} if self.embeddings_regularizer is None else
                   {"embeddings_regularizer": regularizers.serialize(
                       self.embeddings_regularizer)})}

    def compute_mask(self, x, y, mask):
        """Keras's ``mask_zero``: the ids 0 are padding, masked for the layers after it."""
        return (x != 0) if self.mask_zero else None

    @property
    def parameter_regularizers(self) -> dict:
        """``{"W": embeddings_regularizer}``, or {} without one."""
        reg = self.embeddings_regularizer
        return {} if reg is None or "W" not in self.parameters else {"W": reg}

    def _build(self, input_shape, rng):
        self.add_parameter("W", (self.num_embeddings, self.embedding_dim), standard_normal, rng)
        if self.padding_idx is not None:
            self.parameters["W"][self.padding_idx] = 0

    def output_shape(self, input_shape):
        self.ensure_built(input_shape)
        return (*tuple(input_shape), self.embedding_dim)

    def forward(self, x, training=True, grad=None):
        """Rows of ``W`` for the integer ids ``x`` (N, ...); keeps the cache when ``grad``
        (default: ``training``)."""
        grad = keeps_cache(self.label, training, grad)
        ids = check_ids(self.label, x, self.num_embeddings)
        if ids.ndim == 0:
            raise ValueError(f"{self.label}: 'x' must have a batch axis; received a scalar")
        self.ensure_built(ids.shape[1:])
        if self.max_norm is not None:
            embedding_renorm_(self.parameters["W"], ids, self.max_norm, self.norm_type)
        y, cache = ops.embedding(ids, self.parameters["W"], self.padding_idx)
        if grad:
            self._caches.append(cache)
        return y

    def _backward(self, dy, cache):
        return None, {"W": ops.embedding_backward(dy, cache)}


@register
class EmbeddingBag(Embedding):
    """Bags of ids -> (B, embedding_dim): the per-bag "sum", "mean" or "max" of rows of
    ``W`` (PyTorch's ``nn.EmbeddingBag``; kernel :func:`~handgrad.ops.embedding_bag`).

    Call forms (per-sample weights: mode "sum" only, the shape of the ids):

    - ``forward(ids)``, ``ids`` (B, L): B bags of L ids (the form a ``Sequential`` and
      the ONNX export take); in a graph ``Model``, ``layer(ids)``;
    - ``forward([indices, offsets])`` or ``forward([indices, offsets,
      per_sample_weights])``, called directly: 1-D ``indices`` cut into bags at
      ``offsets`` (or (B, L) ids with ``offsets`` None);
    - in a graph ``Model``, ``layer([ids, per_sample_weights])``, both (N, L): fixed-length
      bags with weights (offsets cannot share the batch axis, so a graph has no offsets).

    ``padding_idx`` ids are left out of their bag; an empty bag gives zeros. There is
    no gradient for the ids: :meth:`backward` returns None, or ``[None, None,
    dper_sample_weights]`` when per-sample weights were given; in a graph the ids get
    None and the per-sample weights their gradient.
    """

    torch_twin = twins.TorchTwin("EmbeddingBag", twins.embedding_params, twins.RESET)
    onnx_form = onnx_forms.embedding_bag

    def __init__(self, num_embeddings, embedding_dim, mode="mean", padding_idx=None,
                 max_norm=None, norm_type=2.0, include_last_offset=False, **kwargs):
        super().__init__(num_embeddings, embedding_dim, padding_idx, max_norm, norm_type,
                         **kwargs)
        self.mode = choice(self.label, "mode", mode, ops.EMBEDDING_BAG_MODES)
        self.include_last_offset = flag(self.label, "include_last_offset", include_last_offset)

    def get_config(self):
        return {**super().get_config(), "mode": self.mode,
                "include_last_offset": self.include_last_offset}

    def output_shape(self, input_shape):
        self.ensure_built(input_shape)
        return (self.embedding_dim,)

    def forward(self, x, training=True, grad=None):
        """The bags' reductions for ``x`` (see the class doc); keeps the cache when
        ``grad`` (default: ``training``)."""
        grad = keeps_cache(self.label, training, grad)
        if isinstance(x, (list, tuple)):
            if not 2 <= len(x) <= 3:
                raise ValueError(f"{self.label}: 'x' must be (B, L) ids or a list [indices, "
                                 f"offsets(, per_sample_weights)]; received a list of {len(x)}")
            indices, offsets, weights = (*x, None)[:3]
        else:
            indices, offsets, weights = x, None, None
        if getattr(indices, "ndim", None) not in (1, 2):
            raise ValueError(f"{self.label}: 'indices' must be (B, L) ids or 1-D ids with "
                             f"offsets; received {describe(indices)}")
        self.ensure_built(tuple(indices.shape[1:]))
        y, cache = ops.embedding_bag(self.parameters["W"], indices, offsets, self.mode, weights,
                                     self.padding_idx, self.include_last_offset, self.max_norm,
                                     self.norm_type)
        if grad:
            self._caches.append(cache)
        return y

    def graph_forward(self, inputs, training):
        """Graph call on (N, L) ids, or ``[ids, per_sample_weights]`` (both (N, L))."""
        if len(inputs) == 1:
            return self.forward(inputs[0], training)
        if len(inputs) != 2:
            raise TypeError(f"{self.label}: a graph call takes ids or [ids, "
                            f"per_sample_weights]; received {len(inputs)} input tensors")
        ids, weights = inputs
        if ids.ndim != 2 or weights.shape != ids.shape:
            raise ValueError(f"{self.label}: a graph call on [ids, per_sample_weights] takes "
                             f"both of shape (N, L); received ids {describe(ids)} and "
                             f"per_sample_weights {describe(weights)}")
        return self.forward([ids, None, weights], training)

    def graph_backward(self, dy, input_grad=True):
        """[None] for ids, or [None, dper_sample_weights] for [ids, per_sample_weights]."""
        dx = self.backward(dy)
        return [None] if dx is None else [None, dx[2]]

    def onnx_graph_form(self, g, values, out_shapes):
        """A graph call: on ids, the chain's form; on [ids, per_sample_weights], Gather,
        Mul by the weights (unsqueezed) and ReduceSum over L."""
        if len(values) == 1:
            return [self.onnx_form(g, values[0])]
        ids, weights = values
        if self.padding_idx is not None or self.max_norm is not None or not ids.ids:
            return [self.onnx_form(g, ids)]  # raises the reason
        rows = g.op("Gather", [g.const(self.parameters["W"], "W"), ids.name], "rows", axis=0)
        scale = g.op("Unsqueeze", [weights.name, g.ints([-1])], "bag_weights")
        y = g.op("ReduceSum", [g.op("Mul", [rows, scale], "bag"), g.ints([1])], "bag",
                 keepdims=0)
        return [g.value(y, out_shapes[0], False)]

    def _backward(self, dy, cache):
        dweight, dweights = ops.embedding_bag_backward(dy, cache)
        return (None if dweights is None else [None, None, dweights]), {"W": dweight}
