"""``Embedding``: a trainable lookup table for integer ids.

Its input is an integer array, so it overrides :meth:`Layer.forward` (which
expects floats): ids of any shape (N, ...) give (N, ..., embedding_dim) in the
table's dtype. There is no gradient for integer ids: :meth:`backward` adds the
table's gradient into ``gradients["W"]`` and returns ``None``, so an Embedding
is the first layer of a model.
"""

from __future__ import annotations

from .. import ops
from .._checks import positive_int
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
                 norm_type=2.0, **kwargs):
        super().__init__(**kwargs)
        owner = type(self).__name__
        self.num_embeddings = positive_int(owner, "num_embeddings", num_embeddings)
        self.embedding_dim = positive_int(owner, "embedding_dim", embedding_dim)
        check_padding_idx(owner, padding_idx, self.num_embeddings)
        self.padding_idx = padding_idx
        self.max_norm, self.norm_type = check_max_norm(owner, max_norm, norm_type)

    def get_config(self):
        return {**super().get_config(), "num_embeddings": self.num_embeddings,
                "embedding_dim": self.embedding_dim, "padding_idx": self.padding_idx,
                "max_norm": self.max_norm, "norm_type": self.norm_type}

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
