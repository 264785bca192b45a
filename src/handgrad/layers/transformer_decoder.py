"""Transformer decoder layer and the stacks, the twins of torch's
``TransformerDecoderLayer``, ``TransformerEncoder`` and ``TransformerDecoder``
(batch-first).

The decoder layer: self-attention on tgt (N, T, E), cross-attention from it to memory
(N, S, E), a feed-forward block; each in a residual with a LayerNorm (see
:mod:`.transformer` for the residual forms and the masks). Its backward returns dL/dtgt
and keeps dL/dmemory, the sum of the cross-attention's key and value gradients (over
every layer of a stack): ``backward_all(dy)`` -> (dtgt, dmemory). A stack runs
``num_layers`` copies of its layer (``layers.0``, ...) and an optional final norm.

Graph calls: ``encoder(x)`` or ``encoder([x, *masks])``, ``decoder([tgt, memory,
*masks])``.
"""

from __future__ import annotations

from .._checks import positive_int
from .normalization import LayerNorm
from .registry import register
from .transformer import (
    TransformerBlock,
    TransformerEncoderLayer,
    TransformerLayerBase,
    check_mask_inputs,
    entry,
    layer_config,
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
    attention_masks = (DECODER_MASKS[::2], DECODER_MASKS[1::2])
    onnx_form = None  # two inputs: no ONNX export
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


class LayerStack(TransformerBlock):
    """``num_layers`` independent copies of a layer (``layers.0`` ...), then an optional
    final ``norm``; torch deep-copies its prototype, so the copies start equal."""

    def __init__(self, layer, num_layers, norm=None, mask_inputs=(), *, name=None,
                 trainable=True, dtype=None, seed=None):
        owner = type(self).__name__
        self.prototype = layer_config(owner, self.layer_argument, layer, self.layer_class)
        self.num_layers = positive_int(owner, "num_layers", num_layers)
        self.norm = None if norm is None else layer_config(owner, "norm", norm, LayerNorm)
        self.d_model, self.nhead = self.prototype.d_model, self.prototype.nhead
        self.norm_first = False
        self.mask_inputs = check_mask_inputs(owner, mask_inputs, self.mask_names)
        config = {k: v for k, v in self.prototype.get_config().items()
                  if k not in ("name", "mask_inputs", "seed", "dtype")}
        self.layers = [type(self.prototype).from_config(config) for _ in range(num_layers)]
        self._children = [(f"layers.{i}", child) for i, child in enumerate(self.layers)]
        if self.norm is not None:
            self._children.append(("norm", self.norm))
        super().__init__(name=name, trainable=trainable, dtype=dtype, seed=seed)
        self.seed_children()

    def get_config(self):
        return {**super().get_config(), self.layer_argument: entry(self.prototype),
                "num_layers": self.num_layers, "norm": entry(self.norm)}

    def _build(self, input_shape, rng):
        super()._build(input_shape, rng)
        source = self.prototype if self.prototype.built else self.layers[0]
        for layer in self.layers:  # torch deep-copies the prototype: the copies start equal
            for key, value in layer.named_parameters().items():
                value[...] = source.named_parameters()[key]

    def onnx_form(self, g, v):
        """The layers' ONNX forms, then the norm's (a single-input stack only)."""
        for _, child in self.children():
            v = g.convert(child, v)
        return v

    def _run(self, arrays, training, grad, masks):
        x, rest = arrays[0], arrays[1:]
        for layer in self.layers:
            x = layer._run([x, *rest], training, grad, masks)
        return x if self.norm is None else self.norm.forward(x, training, grad=grad)

    def _back(self, dy):
        if self.norm is not None:
            dy = self.norm.backward(dy)
        extra = None
        for layer in reversed(self.layers):
            dy, *rest = layer._back(dy)
            extra = rest if extra is None else [a + b for a, b in zip(extra, rest)]
        return [dy, *extra]


@register
class TransformerEncoder(LayerStack):
    """torch's ``TransformerEncoder``: ``num_layers`` copies of ``encoder_layer`` (a
    :class:`TransformerEncoderLayer`), then ``norm`` (a LayerNorm or None).
    ``forward(src, training=True, mask=None, src_key_padding_mask=None, causal=False)``
    (``mask`` is torch's name; ``src_mask`` the same)."""

    layer_argument = "encoder_layer"
    layer_class = TransformerEncoderLayer
    causal_names = ("causal", "is_causal")
    mask_names = ("src_mask", "src_key_padding_mask", "mask")

    def __init__(self, encoder_layer, num_layers, norm=None, mask_inputs=(), **kwargs):
        super().__init__(encoder_layer, num_layers, norm, mask_inputs, **kwargs)

    def _run(self, arrays, training, grad, masks):
        if "mask" in masks:
            masks = {**masks, "src_mask": masks["mask"]}
        return super()._run(arrays, training, grad, masks)


@register
class TransformerDecoder(LayerStack):
    """torch's ``TransformerDecoder``: ``num_layers`` copies of ``decoder_layer``, then
    ``norm`` (a LayerNorm or None); the forward of :class:`TransformerDecoderLayer`."""

    layer_argument = "decoder_layer"
    onnx_form = None
    layer_class = TransformerDecoderLayer
    data_inputs = ("tgt", "memory")
    mask_names = DECODER_MASKS
    causal_names = DECODER_FLAGS

    def __init__(self, decoder_layer, num_layers, norm=None, mask_inputs=(), **kwargs):
        super().__init__(decoder_layer, num_layers, norm, mask_inputs, **kwargs)
