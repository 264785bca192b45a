"""Transformer encoder layers, the twins of ``torch.nn.TransformerEncoderLayer`` and
``torch.nn.TransformerEncoder`` (batch-first: (N, T, E)).

They are containers of existing layers, named as torch names its submodules so that
``named_parameters`` paths map one-to-one to torch's state-dict names
(``self_attn.W_in`` <-> ``self_attn.in_proj_weight``, ``layers.0.linear1.W`` <->
``layers.0.linear1.weight``). Each residual sub-block is, with ``f`` the branch::

    norm_first=False:  y = norm(x + f(x))     dx = dn + f'(dn),  dn = norm'(dy)
    norm_first=True:   y = x + f(norm(x))     dx = dy + norm'(f'(dy))

and the backward is the children's hand-derived backwards, called in the reverse order
of their forwards (each child keeps its own cache stack). Masks follow torch:
``*_mask`` (T, S) or (N*H, T, S), ``*_key_padding_mask`` (N, S); bool True = may not
attend, float = added. ``causal=True`` adds the causal mask (torch's ``is_causal``,
which declares a given mask causal, computes the same).

Graph calls: ``layer(x)``, or ``layer([x, *masks])`` with ``mask_inputs`` naming the
masks that follow the data inputs, in order. A graph tensor has a batch axis, so an
attention mask given as a graph input is per example (N, T, S), repeated per head.
"""

from __future__ import annotations

import numpy as np

from .._checks import describe, float_array, positive_int, upstream_grad
from .._hyper import flag, number
from . import activations
from .attention import MultiHeadAttention
from .base import Layer
from .caching import forward_scope, keeps_cache
from .core import Dense, Dropout
from .normalization import LayerNorm
from .registry import REGISTRY, register

ACTIVATIONS = {"relu": "ReLU", "gelu": "GELU"}
ENCODER_MASKS = ("src_mask", "src_key_padding_mask")


def check_mask_inputs(owner, value, allowed):
    """``mask_inputs`` as a tuple of distinct names out of ``allowed``."""
    if isinstance(value, str) or not isinstance(value, (tuple, list)):
        raise TypeError(f"{owner}: 'mask_inputs' must be a tuple of mask names out of "
                        f"{allowed}; received {describe(value)}")
    names = tuple(value)
    wrong = [name for name in names if name not in allowed]
    if wrong or len(set(names)) != len(names):
        raise ValueError(f"{owner}: 'mask_inputs' must name distinct masks out of {allowed}; "
                         f"received {names}")
    return names


def layer_config(owner, name, entry, cls):
    """A child layer given as ``cls`` instance or as its ``{"class", "config"}`` entry."""
    if isinstance(entry, dict) and entry.get("class") in REGISTRY:
        entry = REGISTRY[entry["class"]].from_config(entry["config"])
    if not isinstance(entry, cls):
        raise TypeError(f"{owner}: '{name}' must be a {cls.__name__}; received "
                        f"{describe(entry)}")
    return entry


def entry(layer):
    return None if layer is None else {"class": type(layer).__name__,
                                       "config": layer.get_config()}


class TransformerBlock(Layer):
    """Base of the transformer containers: children in torch's order, a torch walk by
    name, builds of the children, the entry ``forward`` with keyword masks, and graph
    calls on ``[*data, *masks]``. Subclasses set ``data_inputs``, ``mask_names``,
    ``self._children`` (before ``Layer.__init__``) and implement ``_run`` (the forward
    of the children; ``backward`` pops them in reverse)."""

    receptive_field = "whole"
    data_inputs = ("src",)
    mask_names = ENCODER_MASKS

    def children(self):
        return iter(self._children)

    def torch_walk(self, walker, layouts):
        """Torch interop: each child by its torch name; the output is plain features."""
        for name, child in self.children():
            walker.child(name, child, {})
        return [{}]

    def get_config(self):
        return {**super().get_config(), "mask_inputs": list(self.mask_inputs)}

    def seed_children(self):
        """With a ``seed``, each random child (attention, dropout) gets its own seed drawn
        from it, so its stream is fixed from construction; without one they spawn from
        the build generator (the model's seed), as any random layer."""
        if self.seed is None:
            return
        random = [layer for _, layer in self.walk() if layer.draws_random]
        seeds = np.random.SeedSequence(self.seed).generate_state(len(random))
        for layer, seed in zip(random, seeds):
            layer.seed = int(seed)
            layer.rng = np.random.default_rng(layer.seed)

    def _check_data(self, name, value):
        x = float_array(self.label, name, value, 3, "(N, T, E)")
        if x.shape[-1] != self.d_model:
            raise ValueError(f"{self.label}: '{name}' must have d_model = {self.d_model} "
                             f"features; received shape {tuple(x.shape)}")
        return x

    def _build(self, input_shape, rng):
        if len(input_shape) != 2 or input_shape[-1] != self.d_model:
            raise ValueError(f"{self.label}: expects (N, T, {self.d_model}); received "
                             f"per-example shape {tuple(input_shape)}")
        inner = (*input_shape[:-1], getattr(self, "dim_feedforward", self.d_model))
        for name, child in self.children():
            if not child.built:  # linear2, dropout and the activation see (T, F)
                shape = inner if name in ("linear2", "dropout", "activation") else input_shape
                child.build(shape, rng=rng, dtype=self.dtype)

    def output_shape(self, input_shape):
        self.ensure_built(input_shape)
        return tuple(input_shape)

    def forward(self, *data, training=True, grad=None, **masks):
        """The output (N, T, E) for the data inputs (``src``; a decoder: ``tgt,
        memory``; a Transformer: ``src, tgt``) and keyword masks (see the module
        docstring) and ``causal`` flags; ``grad`` (default: ``training``) keeps the
        caches for :meth:`backward`."""
        grad = keeps_cache(self.label, training, grad)
        if len(data) != len(self.data_inputs):
            raise TypeError(f"{self.label}: forward takes the inputs {self.data_inputs}; "
                            f"received {len(data)} positional arguments")
        unknown = sorted(set(masks) - set(self.mask_names) - set(self.causal_names))
        if unknown:
            raise TypeError(f"{self.label}: unexpected keyword arguments {unknown}; masks: "
                            f"{self.mask_names}, flags: {self.causal_names}")
        arrays = [self._check_data(name, x) for name, x in zip(self.data_inputs, data)]
        self.ensure_built(arrays[0].shape[1:])
        for name, x in zip(self.data_inputs, arrays):
            self.check_dtype(x, arg=name)
        with forward_scope(self, grad):
            y = self._run(arrays, training, grad, masks)
        if grad:
            self._caches.append((y.shape, y.dtype))
        return y

    def _forward(self, x, training):
        """The single-input forward (``output_shape``, ``Sequential``); keeps no cache."""
        return self._run([x], training, False, {}), None

    def _backward(self, dy, cache):
        grads = self._back(self._upstream(dy, cache))
        self.input_grads = grads
        return grads[0], {}

    def _upstream(self, dy, cache):
        return upstream_grad(self.label, dy, *cache)

    def backward_all(self, dy):
        """The gradients of every data input of the latest forward, a tuple."""
        self.backward(dy)
        return tuple(self.input_grads)

    # ---------------------------------------------------------------- graphs
    def graph_build(self, input_shapes, rng, dtype):
        self.build(input_shapes[0], rng=rng, dtype=dtype)

    def graph_forward(self, inputs, training):
        count = len(self.data_inputs) + len(self.mask_inputs)
        if len(inputs) != count:
            raise TypeError(f"{self.label}: takes {count} input tensors "
                            f"({', '.join(self.data_inputs + self.mask_inputs)}); received "
                            f"{len(inputs)}")
        data, given = inputs[:len(self.data_inputs)], inputs[len(self.data_inputs):]
        masks = {name: self._graph_mask(name, mask) for name, mask in
                 zip(self.mask_inputs, given)}
        return self.forward(*data, training=training, **masks)

    def _graph_mask(self, name, mask):
        """An attention mask from a graph is per example (N, T, S): one per head."""
        if name.endswith("key_padding_mask"):
            return mask
        heads = self.nhead
        if np.ndim(mask) != 3:
            raise ValueError(f"{self.label}: the graph input '{name}' must be (N, T, S); "
                             f"received shape {np.shape(mask)}")
        return np.repeat(mask, heads, axis=0)

    def graph_backward(self, dy, input_grad=True):
        return [*self.backward_all(dy), *([None] * len(self.mask_inputs))]

    # ------------------------------------------------------- residual branches
    def residual(self, x, norm, branch, training, grad):
        """norm(x + branch(x)), or x + branch(norm(x)) with ``norm_first``."""
        if self.norm_first:
            return x + branch(norm.forward(x, training, grad=grad))
        return norm.forward(x + branch(x), training, grad=grad)

    def residual_back(self, dy, norm, branch_back):
        """The input gradient of :meth:`residual` from the branch's backward."""
        if self.norm_first:
            return dy + norm.backward(branch_back(dy))
        dn = norm.backward(dy)
        return dn + branch_back(dn)


class TransformerLayerBase(TransformerBlock):
    """The hyper-parameters and children shared by the encoder and decoder layers.
    ``causal=True`` (not in torch's constructor) makes the self-attention always causal,
    as the forward flag does for one call: a GPT block inside a graph or Sequential."""

    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, norm_first=False, bias=True, mask_inputs=(),
                 causal=False, *, name=None, trainable=True, dtype=None, seed=None):
        owner = type(self).__name__
        self.d_model = positive_int(owner, "d_model", d_model)
        self.nhead = positive_int(owner, "nhead", nhead)
        self.dim_feedforward = positive_int(owner, "dim_feedforward", dim_feedforward)
        self.dropout_rate = number(owner, "dropout", dropout, low=0.0, high=1.0,
                                   high_open=True)
        if self.d_model % self.nhead:
            raise ValueError(f"{owner}: 'd_model' ({self.d_model}) must be divisible by "
                             f"'nhead' ({self.nhead})")
        if activation not in ACTIVATIONS:
            raise ValueError(f"{owner}: 'activation' must be one of {sorted(ACTIVATIONS)}; "
                             f"received {activation!r}")
        self.activation_name = activation
        self.layer_norm_eps = number(owner, "layer_norm_eps", layer_norm_eps, low=0.0,
                                     low_open=True)
        self.norm_first = flag(owner, "norm_first", norm_first)
        self.use_bias = flag(owner, "bias", bias)
        self.mask_inputs = check_mask_inputs(owner, mask_inputs, self.mask_names)
        self.causal = flag(owner, "causal", causal)
        attention = [MultiHeadAttention(self.d_model, self.nhead, dropout=self.dropout_rate,
                                        bias=self.use_bias, causal=self.causal and not i)
                     for i, _ in enumerate(self.attention_names)]
        self._children = [*zip(self.attention_names, attention),
                          ("linear1", Dense(self.dim_feedforward, bias=self.use_bias)),
                          ("dropout", Dropout(self.dropout_rate)),
                          ("linear2", Dense(self.d_model, bias=self.use_bias)),
                          *[(norm, self._norm()) for norm in self.norm_names],
                          *[(f"dropout{i + 1}", Dropout(self.dropout_rate))
                            for i in range(len(self.norm_names))],
                          ("activation", getattr(activations, ACTIVATIONS[activation])())]
        for key, child in self._children:
            setattr(self, key, child)
        super().__init__(name=name, trainable=trainable, dtype=dtype, seed=seed)
        self.seed_children()

    def _norm(self):
        return LayerNorm(self.d_model, eps=self.layer_norm_eps, bias=self.use_bias)

    def get_config(self):
        return {**super().get_config(), "d_model": self.d_model, "nhead": self.nhead,
                "dim_feedforward": self.dim_feedforward, "dropout": self.dropout_rate,
                "activation": self.activation_name, "layer_norm_eps": self.layer_norm_eps,
                "norm_first": self.norm_first, "bias": self.use_bias, "causal": self.causal}

    def feed_forward(self, x, training, grad):
        """dropout_k(linear2(dropout(activation(linear1(x))))), k = the last norm's."""
        h = self.linear1.forward(x, training, grad=grad)
        h = self.dropout.forward(self.activation.forward(h, training, grad=grad), training,
                                 grad=grad)
        return self.last_dropout.forward(self.linear2.forward(h, training, grad=grad),
                                         training, grad=grad)

    def feed_forward_back(self, dy):
        d = self.linear2.backward(self.last_dropout.backward(dy))
        return self.linear1.backward(self.activation.backward(self.dropout.backward(d)))

    @property
    def last_dropout(self):
        return getattr(self, f"dropout{len(self.norm_names)}")

    def attend(self, index, x, training, grad, mask, padding, causal, memory=None):
        """dropout_i(attention_i(x[, memory])) with the masks of that attention."""
        attention = getattr(self, self.attention_names[index])
        try:
            y = attention.forward(x, training, key=memory, value=memory,
                                  key_padding_mask=padding, attn_mask=mask,
                                  causal=True if causal else None, grad=grad)
        except ValueError as error:  # name the masks as the caller did
            raise ValueError(f"{self.label}: {self.attention_names[index]} with the masks "
                             f"{self.attention_masks[index]}: {error}") from None
        return getattr(self, f"dropout{index + 1}").forward(y, training, grad=grad)

    def attend_back(self, index, dy):
        """(dx, dmemory or None) of :meth:`attend`."""
        attention = getattr(self, self.attention_names[index])
        dq, dk, dv = attention.backward_all(getattr(self, f"dropout{index + 1}").backward(dy))
        return dq, None if dk is None else dk + dv


@register
class TransformerEncoderLayer(TransformerLayerBase):
    """torch's ``TransformerEncoderLayer`` (batch_first) on src (N, T, E): self-attention
    then a feed-forward block, each in a residual with a LayerNorm (post-norm, or pre-norm
    with ``norm_first``). ``forward(src, training=True, src_mask=None,
    src_key_padding_mask=None, causal=False)``; ``is_causal`` is the same flag."""

    attention_names = ("self_attn",)
    attention_masks = (ENCODER_MASKS,)
    norm_names = ("norm1", "norm2")
    causal_names = ("causal", "is_causal")

    def _run(self, arrays, training, grad, masks):
        causal = masks.get("causal") or masks.get("is_causal")
        x = self.residual(arrays[0], self.norm1, lambda h: self.attend(
            0, h, training, grad, masks.get("src_mask"), masks.get("src_key_padding_mask"),
            causal), training, grad)
        return self.residual(x, self.norm2, lambda h: self.feed_forward(h, training, grad),
                             training, grad)

    def _back(self, dy):
        d = self.residual_back(dy, self.norm2, self.feed_forward_back)
        return [self.residual_back(d, self.norm1, lambda g: self.attend_back(0, g)[0])]

    def onnx_form(self, g, v):
        """The forward without masks: the children's ONNX forms and an Add per residual."""
        def chain(h, names):
            for name in names:
                h = g.channels_last(g.convert(getattr(self, name), h))
            return h

        def residual(x, norm, names):
            if self.norm_first:
                return add(x, chain(chain(x, [norm]), names))
            return chain(add(x, chain(x, names)), [norm])

        def add(a, b):
            return g.value(g.op("Add", [a.name, b.name], "residual"), a.shape)

        x = residual(g.channels_last(v), "norm1", ["self_attn", "dropout1"])
        return residual(x, "norm2", ["linear1", "activation", "dropout", "linear2", "dropout2"])
