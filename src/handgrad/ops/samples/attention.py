"""Attention samples and torch counterparts (sequences are batch-first in both
layouts; torch's functional multi-head attention is sequence-first)."""

from __future__ import annotations

from ..declare import Sample


def torch_sdpa(F, q, k, v, mask=None, *, causal=False, dropout=0.0, rng=None, scale=None):
    """``F.scaled_dot_product_attention`` (no mask or dropout: those are tested apart)."""
    if mask is not None or dropout:
        raise NotImplementedError("masks and dropout have their own torch tests")
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)


def torch_mha(F, query, key, value, in_weight, in_bias, out_weight, out_bias, bias_k=None,
              bias_v=None, *, num_heads, key_padding_mask=None, attn_mask=None, causal=False,
              dropout=0.0, rng=None, add_zero_attn=False):
    """``F.multi_head_attention_forward`` with the packed weights transposed (bias_k and
    bias_v are (1, 1, E) in both)."""
    if key_padding_mask is not None or attn_mask is not None or causal or dropout:
        raise NotImplementedError("masks and dropout have their own torch tests")
    y, _ = F.multi_head_attention_forward(
        query.transpose(0, 1), key.transpose(0, 1), value.transpose(0, 1),
        query.shape[-1], num_heads, in_weight.T, in_bias, bias_k, bias_v, add_zero_attn, 0.0,
        out_weight.T, out_bias, training=False, need_weights=False)
    return y.transpose(0, 1)


SCALED_DOT_PRODUCT_ATTENTION = (
    Sample(((2, 3, 4), (2, 5, 4), (2, 5, 6))),
    Sample(((2, 4, 3), (2, 4, 3), (2, 4, 2)), {"causal": True}),
    Sample(((2, 2, 3, 4), (2, 2, 3, 4), (2, 2, 3, 5)), {"scale": 0.3}),  # not 1 / sqrt(4)
)
MULTI_HEAD_ATTENTION = (
    Sample(((2, 3, 4), (2, 5, 4), (2, 5, 4), (4, 12), (12,), (4, 4), (4,)), {"num_heads": 2}),
    Sample(((2, 3, 4), (2, 3, 4), (2, 3, 4), (4, 12), None, (4, 4), None), {"num_heads": 1}),
    # torch's add_bias_kv (bias_k, bias_v as arguments 8 and 9) and add_zero_attn
    Sample(((2, 3, 4), (2, 5, 4), (2, 5, 4), (4, 12), (12,), (4, 4), (4,), (1, 1, 4),
            (1, 1, 4)), {"num_heads": 2}),
    Sample(((2, 3, 4), (2, 5, 4), (2, 5, 4), (4, 12), (12,), (4, 4), (4,)),
           {"num_heads": 2, "add_zero_attn": True}),
    Sample(((2, 4, 4), (2, 3, 4), (2, 3, 4), (4, 12), None, (4, 4), (4,), (1, 1, 4),
            (1, 1, 4)), {"num_heads": 1, "add_zero_attn": True}),
)
