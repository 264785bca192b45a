"""Multi-head attention layer (batch-first), the twin of ``torch.nn.MultiheadAttention``.

Parameters (handgrad's (F_in, F_out) layout, see :mod:`handgrad.ops.attention`):

- ``packed=True``: ``W_in`` (E, 3E) with columns q | k | v, ``b_in`` (3E,);
  from torch: ``W_in = in_proj_weight.T``, ``b_in = in_proj_bias``.
- ``packed=False``: ``W_q`` (E, E), ``W_k`` (kdim, E), ``W_v`` (vdim, E) and
  ``b_q``, ``b_k``, ``b_v`` (E,); from torch: ``W_k = k_proj_weight.T`` etc. and
  ``in_proj_bias`` split in three.
- ``W_out`` (E, E) = ``out_proj.weight.T``, ``b_out`` (E,) = ``out_proj.bias``.

Initialization follows torch: Glorot-uniform input projections (the packed one as one
(E, 3E) matrix), PyTorch's default Linear init for ``W_out``, zero biases.
"""

from __future__ import annotations

from .. import initializers, ops
from .._checks import float_array, positive_int
from .._hyper import flag, number
from . import declarations as twins
from . import onnx_forms
from .attention_inputs import graph_masks, mask_inputs_arg
from .base import Layer
from .caching import keeps_cache
from .registry import register


def _torch_bias_kv_init(shape, dtype, rng):
    """torch's xavier_normal_ on (1, 1, E): fan_in = fan_out = E, so N(0, 1 / E)."""
    return initializers.lecun_normal(shape[-1:], dtype=dtype, rng=rng).reshape(shape)


def _optional_dim(owner, name, value):
    return None if value is None else positive_int(owner, name, value)


@register
class MultiHeadAttention(Layer):
    """Multi-head attention on (N, Tq, E) -> (N, Tq, E).

    ``forward(query, training=True, key=None, value=None, key_padding_mask=None,
    attn_mask=None, causal=None)``: self-attention when ``key`` and ``value`` are None
    (so it works inside ``Sequential``), else cross-attention with key (N, Tk, kdim) and
    value (N, Tk, vdim). Masks follow torch's MHA (bool True = may NOT attend, float =
    added): ``key_padding_mask`` (N, Tk), ``attn_mask`` (Tq, Tk) or (N*H, Tq, Tk).
    ``causal=None`` uses the layer's ``causal`` setting. ``dropout`` acts on the
    attention weights in training, with the layer's Generator ``rng`` (from ``seed``, or
    without one from the model's seed, see ``Layer.draws_random``).

    ``backward(dy)`` returns dL/dquery; after a cross-attention forward the key and
    value gradients are in ``key_value_grads`` = (dkey, dvalue) (None for
    self-attention, whose dL/dquery already holds all three shares).
    :meth:`backward_all` returns (dquery, dkey, dvalue) at once.

    In a graph it is called on ``query``, ``[query, key_value]`` or ``[query, key,
    value]``, then the masks that ``mask_inputs`` names, in its order (e.g.
    ``mask_inputs=("key_padding_mask",)``: ``mha([x, pad])`` is self-attention with a
    padding mask); the masks get no gradient. Per-example mask shapes: key_padding_mask
    (Tk,), attn_mask (Tq, Tk) or (H, Tq, Tk) (see :mod:`.attention_inputs`).
    """

    draws_random = True
    torch_twin = twins.TorchTwin("MultiheadAttention", twins.attention_params, twins.RESET)
    onnx_form = onnx_forms.attention
    onnx_graph_form = onnx_forms.graph_attention
    receptive_field = "whole"

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, kdim=None, vdim=None,
                 packed=True, causal=False, add_bias_kv=False, add_zero_attn=False, *,
                 mask_inputs=(), name=None, trainable=True, dtype=None, seed=None):
        super().__init__(name=name, trainable=trainable, dtype=dtype, seed=seed)
        owner = type(self).__name__
        self.embed_dim = positive_int(owner, "embed_dim", embed_dim)
        self.num_heads = positive_int(owner, "num_heads", num_heads)
        if self.embed_dim % self.num_heads:
            raise ValueError(f"{owner}: 'embed_dim' ({self.embed_dim}) must be divisible by "
                             f"'num_heads' ({self.num_heads})")
        self.dropout = number(owner, "dropout", dropout, low=0.0, high=1.0, high_open=True)
        self.use_bias = flag(owner, "bias", bias)
        self.kdim = _optional_dim(owner, "kdim", kdim)
        self.vdim = _optional_dim(owner, "vdim", vdim)
        self.packed = flag(owner, "packed", packed)
        self.causal = flag(owner, "causal", causal)
        self.add_bias_kv = flag(owner, "add_bias_kv", add_bias_kv)
        self.add_zero_attn = flag(owner, "add_zero_attn", add_zero_attn)
        self.mask_inputs = mask_inputs_arg(owner, mask_inputs)
        if self.packed and (self.key_dim != self.embed_dim or self.value_dim != self.embed_dim):
            raise ValueError(f"{owner}: packed=True needs kdim == vdim == embed_dim "
                             f"({self.embed_dim}); received kdim={kdim}, vdim={vdim} (use "
                             f"packed=False for separate projections)")
        self.key_value_grads = (None, None)
        self._graph_inputs = {}  # the input count of each training graph call

    @property
    def key_dim(self):
        return self.embed_dim if self.kdim is None else self.kdim

    @property
    def value_dim(self):
        return self.embed_dim if self.vdim is None else self.vdim

    def get_config(self):
        return {**super().get_config(), "embed_dim": self.embed_dim,
                "num_heads": self.num_heads, "dropout": self.dropout, "bias": self.use_bias,
                "kdim": self.kdim, "vdim": self.vdim, "packed": self.packed,
                "causal": self.causal, "add_bias_kv": self.add_bias_kv,
                "add_zero_attn": self.add_zero_attn, "mask_inputs": list(self.mask_inputs)}

    # ------------------------------------------------------------------ build
    def _build(self, input_shape, rng):
        if len(input_shape) != 2 or input_shape[-1] != self.embed_dim:
            raise ValueError(f"{self.label}: expects queries (N, Tq, {self.embed_dim}); "
                             f"received per-example shape {tuple(input_shape)}")
        e = self.embed_dim
        if self.packed:
            self.add_parameter("W_in", (e, 3 * e), "glorot_uniform", rng)
        else:
            for key, rows in (("W_q", e), ("W_k", self.key_dim), ("W_v", self.value_dim)):
                self.add_parameter(key, (rows, e), "glorot_uniform", rng)
        self.add_parameter("W_out", (e, e), "torch_default", rng)
        if self.use_bias:
            for key in (("b_in",) if self.packed else ("b_q", "b_k", "b_v")):
                self.add_parameter(key, (3 * e if key == "b_in" else e,), "zeros", rng)
            self.add_parameter("b_out", (e,), "zeros", rng)
        if self.add_bias_kv:
            for key in ("bias_k", "bias_v"):
                self.add_parameter(key, (1, 1, e), _torch_bias_kv_init, rng)

    def _in_weights(self):
        p = self.parameters
        if self.packed:
            return p["W_in"], p.get("b_in")
        biases = (p["b_q"], p["b_k"], p["b_v"]) if self.use_bias else None
        return (p["W_q"], p["W_k"], p["W_v"]), biases

    # ------------------------------------------------------- forward/backward
    def forward(self, query, training=True, key=None, value=None, key_padding_mask=None,
                attn_mask=None, causal=None, grad=None):
        """y (N, Tq, E); see the class docstring for the arguments; ``grad`` (default:
        ``training``) keeps the cache for :meth:`backward`."""
        grad = keeps_cache(self.label, training, grad)
        query = float_array(self.label, "query", query, 3, "(N, Tq, E)")
        self.ensure_built(query.shape[1:])
        if query.shape[-1] != self.embed_dim:
            raise ValueError(f"{self.label}: 'query' must have embed_dim = {self.embed_dim} "
                             f"features; received shape {tuple(query.shape)}")
        self.check_dtype(query)
        y, cache = self._attend(query, training, key, value, key_padding_mask, attn_mask,
                                causal)
        if grad:
            self._caches.append(cache)
        return y

    def _attend(self, query, training, key, value, key_padding_mask, attn_mask, causal):
        in_weight, in_bias = self._in_weights()
        return ops.multi_head_attention(
            query, key, value, in_weight, in_bias, self.parameters["W_out"],
            self.parameters.get("b_out"), num_heads=self.num_heads,
            key_padding_mask=key_padding_mask, attn_mask=attn_mask,
            causal=self.causal if causal is None else causal,
            dropout=self.dropout if training else 0.0, rng=self.rng,
            bias_k=self.parameters.get("bias_k"), bias_v=self.parameters.get("bias_v"),
            add_zero_attn=self.add_zero_attn)

    def _forward(self, x, training):
        return self._attend(x, training, None, None, None, None, None)

    def _backward(self, dy, cache):
        dquery, dkey, dvalue, din_w, din_b, dw_out, db_out, *dbias_kv = (
            ops.multi_head_attention_backward(dy, cache))
        self.key_value_grads = (dkey, dvalue)
        if self.packed:
            grads = {"W_in": din_w}
            if din_b is not None:
                grads["b_in"] = din_b
        else:
            grads = dict(zip(("W_q", "W_k", "W_v"), din_w))
            if din_b is not None:
                grads.update(zip(("b_q", "b_k", "b_v"), din_b))
        grads["W_out"] = dw_out
        if db_out is not None:
            grads["b_out"] = db_out
        grads.update(zip(("bias_k", "bias_v"), dbias_kv))
        return dquery, grads

    def backward_all(self, dy):
        """(dquery, dkey, dvalue) for the latest forward; dkey/dvalue are None after a
        self-attention forward."""
        dquery = self.backward(dy)
        return (dquery, *self.key_value_grads)

    def forward_masked(self, x, mask, training):
        """Self-attention with the steps a mask (N, T) drops as masked keys (:mod:`.masking`)."""
        return self.forward(x, training=training, key_padding_mask=~mask)

    def graph_forward_masked(self, inputs, masks, training):
        """The graph call with the key input's mask (the query's in self-attention) as
        masked keys (Keras's value mask); the output keeps the query's mask."""
        keys = 1 if len(inputs) - len(self.mask_inputs) > 1 else 0
        return self.graph_forward(inputs, training, key_mask=masks[keys])

    def graph_forward(self, inputs, training, key_mask=None):
        """Graph call ``mha(q)`` (self-attention), ``mha([q, kv])`` or ``mha([q, k, v])``,
        each followed by the masks named in ``mask_inputs``; ``key_mask`` (N, Tk): the
        keys kept (a carried mask, joined with a given key_padding_mask)."""
        count = len(inputs) - len(self.mask_inputs)
        if not 1 <= count <= 3:
            masks = "".join(f", {name}" for name in self.mask_inputs)
            raise TypeError(f"{self.label}: takes 1 to 3 data tensors (query[, key[, "
                            f"value]]){masks and ' then' + masks[1:]} (mask_inputs="
                            f"{self.mask_inputs}); received {len(inputs)} tensors")
        masks = graph_masks(self.label, self.mask_inputs, inputs[count:])
        if key_mask is not None:
            given = masks.get("key_padding_mask")
            masks["key_padding_mask"] = ~key_mask if given is None else given | ~key_mask
        key = inputs[1] if count > 1 else None
        value = inputs[2] if count > 2 else key
        kept = len(self._caches)
        y = self.forward(inputs[0], training=training, key=key, value=value, **masks)
        if len(self._caches) > kept:  # a shared layer's calls may differ: keyed by place
            self._graph_inputs[len(self._caches) - 1] = count
        return y

    def graph_backward(self, dy, input_grad=True):
        """[dquery, (dkey, dvalue | dkey_value)], then None for each mask input."""
        count = self._graph_inputs.pop(len(self._caches) - 1, None)
        dquery, dkey, dvalue = self.backward_all(dy)
        if dkey is None:  # self-attention: dquery holds the three shares
            grads = [dquery]
        else:
            grads = [dquery, dkey, dvalue] if count == 3 else [dquery, dkey + dvalue]
        return grads + [None] * len(self.mask_inputs)
