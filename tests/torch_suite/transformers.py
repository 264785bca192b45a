"""Adapters of the transformer rows (``TransformerEncoderLayer``, ``TransformerEncoder``,
``TransformerDecoderLayer``, ``Transformer``) through handgrad's layers, the weights
imported from the torch module (see :mod:`.layers`); the masks pass by torch's keyword
names, with a batch axis added to unbatched inputs and ``batch_first=False`` transposed."""

from __future__ import annotations

import numpy as np
import torch

from handgrad import layers as hl

from .core import Unsupported
from .layers import _mask, _mask_dtype, _seq, layer_plan, load

ACTIVATION = {torch.nn.functional.relu: "relu", torch.nn.functional.gelu: "gelu"}


def _layer_config(layer):
    """handgrad's constructor arguments of a torch encoder or decoder layer."""
    act = layer.activation
    name = ACTIVATION.get(act) or {torch.nn.ReLU: "relu", torch.nn.GELU: "gelu"}.get(type(act))
    if name is None or getattr(act, "approximate", "none") != "none":
        raise Unsupported("activation")
    return {"d_model": layer.self_attn.embed_dim, "nhead": layer.self_attn.num_heads,
            "dim_feedforward": layer.linear1.out_features, "dropout": layer.dropout.p,
            "activation": name, "layer_norm_eps": layer.norm1.eps,
            "norm_first": layer.norm_first, "bias": layer.linear1.bias is not None}


def _norm(norm, dtype):
    return None if norm is None else hl.LayerNorm(norm.normalized_shape[-1], eps=norm.eps,
                                                  bias=norm.bias is not None)


def _builder(m):
    """(handgrad layer factory, batch_first, first torch layer) of a torch module."""
    name = type(m).__name__
    if name in ("TransformerEncoderLayer", "TransformerDecoderLayer"):
        cls = getattr(hl, name)
        return (lambda d: cls(**_layer_config(m), dtype=d)), m.self_attn.batch_first, m
    if name == "TransformerEncoder":
        first = m.layers[0]
        return (lambda d: hl.TransformerEncoder(
            hl.TransformerEncoderLayer(**_layer_config(first)), m.num_layers,
            _norm(m.norm, d), dtype=d)), first.self_attn.batch_first, first
    first = m.encoder.layers[0]
    config = _layer_config(first)
    return (lambda d: hl.Transformer(num_encoder_layers=len(m.encoder.layers),
                                     num_decoder_layers=len(m.decoder.layers), **config,
                                     dtype=d)), m.batch_first, first


def transformer(info, module_input, training):
    ci, fi = module_input.constructor_input, module_input.forward_input
    m = info.module_cls(*ci.args, **ci.kwargs).train(training)
    build, bf, first = _builder(m)
    if first.dropout.p and training:
        raise Unsupported("random mask")
    data = list(fi.args)
    unbatched = data[0].dim() == 2
    masks = {k: v for k, v in fi.kwargs.items() if isinstance(v, torch.Tensor)}
    flags = {k: v for k, v in fi.kwargs.items() if k not in masks and v is not None}
    if any(not isinstance(v, bool) for v in flags.values()):
        raise Unsupported("forward keywords")

    def call(mod, *xs):
        found = {k: t.to(xs[0].dtype) if t.is_floating_point() else t
                 for k, t in masks.items()}
        return mod(*xs, **found, **flags)

    def run(layer, state, *arrays):
        seq = [_seq(a, bf, unbatched) for a in arrays]
        load(layer, state, seq[0].shape[1:], arrays[0].dtype)
        found = {k: _mask_dtype(_mask(v, unbatched, "key_padding" in k), arrays[0].dtype)
                 for k, v in masks.items()}
        y = layer.forward(*seq, **found, **flags)
        out = y[0] if unbatched else (y if bf else np.swapaxes(y, 0, 1))

        def back(dy):
            layer.backward(_seq(dy, bf, unbatched))
            grads = layer.input_grads
            return [g[0] if unbatched else (g if bf else np.swapaxes(g, 0, 1)) for g in grads]

        return out, back

    return layer_plan(m, data, call, build, run, None if unbatched else 1 - bf)


MODULES = {name: transformer for name in ("TransformerEncoderLayer", "TransformerEncoder",
                                          "TransformerDecoderLayer", "Transformer")}
