"""``Transformer``, the twin of torch's ``nn.Transformer`` (batch-first): memory =
encoder(src), y = decoder(tgt, memory); backward: (dtgt, dmemory) from the decoder,
dsrc = encoder'(dmemory), so ``backward_all(dy)`` -> (dsrc, dtgt). Graph call
``transformer([src, tgt, *masks])``.
"""

from __future__ import annotations

from .. import initializers
from .._checks import positive_int
from .._hyper import flag, number
from .normalization import LayerNorm
from .registry import register
from .transformer import ENCODER_MASKS, TransformerBlock, check_mask_inputs
from .transformer_decoder import (
    DECODER_FLAGS,
    DECODER_MASKS,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)


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
