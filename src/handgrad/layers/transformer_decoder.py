"""Transformer decoder layers and the whole ``Transformer``, the twins of torch's
``TransformerDecoderLayer``, ``TransformerDecoder`` and ``Transformer`` (batch-first).

The decoder layer: self-attention on tgt (N, T, E), cross-attention from it to memory
(N, S, E), a feed-forward block; each in a residual with a LayerNorm (see
:mod:`.transformer` for the residual forms and the masks). Its backward returns dL/dtgt
and keeps dL/dmemory, the sum of the cross-attention's key and value gradients (over
every layer of a stack): ``backward_all(dy)`` -> (dtgt, dmemory). ``Transformer``
(``backward_all`` -> (dsrc, dtgt)): memory = encoder(src), y = decoder(tgt, memory),
dsrc = encoder'(dmemory).

Graph calls: ``decoder([tgt, memory, *masks])``, ``transformer([src, tgt, *masks])``.
"""

from __future__ import annotations

from .. import initializers
from .._checks import positive_int
from .._hyper import flag, number
from .normalization import LayerNorm
from .registry import register
from .transformer import (
    ENCODER_MASKS,
    LayerStack,
    TransformerBlock,
    TransformerEncoder,
    TransformerEncoderLayer,
    TransformerLayerBase,
    check_mask_inputs,
)

DECODER_MASKS = ("tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask")
DECODER_FLAGS = ("tgt_is_causal", "memory_is_causal", "causal")


@register
class TransformerDecoderLayer(TransformerLayerBase):
    """torch's ``TransformerDecoderLayer`` (batch_first). ``forward(tgt, memory,
    training=True, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
    memory_key_padding_mask=None, tgt_is_causal=False, memory_is_causal=False)``
    (``causal`` is ``tgt_is_causal``)."""

    data_inputs = ("tgt", "memory")
    mask_names = DECODER_MASKS
    causal_names = DECODER_FLAGS
    attention_names = ("self_attn", "multihead_attn")
    norm_names = ("norm1", "norm2", "norm3")

    def _run(self, arrays, training, grad, masks):
        tgt, memory = arrays
        causal = masks.get("tgt_is_causal") or masks.get("causal")
        x = self.residual(tgt, self.norm1, lambda h: self.attend(
            0, h, training, grad, masks.get("tgt_mask"), masks.get("tgt_key_padding_mask"),
            causal), training, grad)
        x = self.residual(x, self.norm2, lambda h: self.attend(
            1, h, training, grad, masks.get("memory_mask"),
            masks.get("memory_key_padding_mask"), masks.get("memory_is_causal"), memory),
            training, grad)
        return self.residual(x, self.norm3, lambda h: self.feed_forward(h, training, grad),
                             training, grad)

    def _back(self, dy):
        dmemory = []

        def cross_back(g):
            dq, dm = self.attend_back(1, g)
            dmemory.append(dm)
            return dq

        d = self.residual_back(dy, self.norm3, self.feed_forward_back)
        d = self.residual_back(d, self.norm2, cross_back)
        return [self.residual_back(d, self.norm1, lambda g: self.attend_back(0, g)[0]),
                dmemory[0]]


@register
class TransformerDecoder(LayerStack):
    """torch's ``TransformerDecoder``: ``num_layers`` copies of ``decoder_layer``, then
    ``norm`` (a LayerNorm or None); the forward of :class:`TransformerDecoderLayer`."""

    layer_argument = "decoder_layer"
    layer_class = TransformerDecoderLayer
    data_inputs = ("tgt", "memory")
    mask_names = DECODER_MASKS
    causal_names = DECODER_FLAGS

    def __init__(self, decoder_layer, num_layers, norm=None, mask_inputs=(), **kwargs):
        super().__init__(decoder_layer, num_layers, norm, mask_inputs, **kwargs)


@register
class Transformer(TransformerBlock):
    """torch's ``Transformer`` (batch_first): an encoder of ``num_encoder_layers`` and a
    decoder of ``num_decoder_layers``, each with a final LayerNorm; every weight matrix
    starts Glorot-uniform, as torch's ``_reset_parameters``. ``forward(src, tgt,
    training=True, src_mask=None, tgt_mask=None, memory_mask=None,
    src_key_padding_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None,
    src_is_causal=False, tgt_is_causal=False, memory_is_causal=False)``."""

    data_inputs = ("src", "tgt")
    mask_names = ENCODER_MASKS + DECODER_MASKS
    causal_names = ("src_is_causal", "tgt_is_causal", "memory_is_causal")

    def __init__(self, d_model=512, nhead=8, num_encoder_layers=6, num_decoder_layers=6,
                 dim_feedforward=2048, dropout=0.1, activation="relu", layer_norm_eps=1e-5,
                 norm_first=False, bias=True, mask_inputs=(), *, name=None, trainable=True,
                 dtype=None, seed=None):
        owner = type(self).__name__
        layer = {"d_model": d_model, "nhead": nhead, "dim_feedforward": dim_feedforward,
                 "dropout": dropout, "activation": activation,
                 "layer_norm_eps": layer_norm_eps, "norm_first": norm_first, "bias": bias}
        counts = (positive_int(owner, "num_encoder_layers", num_encoder_layers),
                  positive_int(owner, "num_decoder_layers", num_decoder_layers))
        parts = []
        for cls, stack, count in ((TransformerEncoderLayer, TransformerEncoder, counts[0]),
                                  (TransformerDecoderLayer, TransformerDecoder, counts[1])):
            prototype = cls(**layer)
            norm = LayerNorm(prototype.d_model, eps=prototype.layer_norm_eps,
                             bias=prototype.use_bias)
            parts.append(stack(prototype, count, norm))
        self.encoder, self.decoder = parts
        self._children = [("encoder", self.encoder), ("decoder", self.decoder)]
        self.d_model, self.nhead = self.encoder.d_model, self.encoder.nhead
        self.layer_config, self.counts = parts[0].prototype.get_config(), counts
        self.norm_first = flag(owner, "norm_first", norm_first)
        number(owner, "dropout", dropout, low=0.0, high=1.0, high_open=True)
        self.mask_inputs = check_mask_inputs(owner, mask_inputs, self.mask_names)
        super().__init__(name=name, trainable=trainable, dtype=dtype, seed=seed)
        self.seed_children()

    def get_config(self):
        keys = ("d_model", "nhead", "dim_feedforward", "dropout", "activation",
                "layer_norm_eps", "norm_first", "bias")
        return {**super().get_config(), **{k: self.layer_config[k] for k in keys},
                "num_encoder_layers": self.counts[0], "num_decoder_layers": self.counts[1]}

    def _build(self, input_shape, rng):
        super()._build(input_shape, rng)
        for value in self.named_parameters().values():
            if value.ndim > 1:  # torch's Transformer re-draws every matrix
                value[...] = initializers.glorot_uniform(value.shape, value.dtype, rng)

    def _run(self, arrays, training, grad, masks):
        src, tgt = arrays
        memory = self.encoder._run([src], training, grad, {
            "src_mask": masks.get("src_mask"),
            "src_key_padding_mask": masks.get("src_key_padding_mask"),
            "is_causal": masks.get("src_is_causal")})
        decoder_masks = {key: masks.get(key) for key in DECODER_MASKS + DECODER_FLAGS[:2]}
        return self.decoder._run([tgt, memory], training, grad, decoder_masks)

    def _back(self, dy):
        dtgt, dmemory = self.decoder._back(dy)
        return [self.encoder._back(dmemory)[0], dtgt]
