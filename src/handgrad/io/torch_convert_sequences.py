"""The handgrad layers of torch's sequence and rearranging modules, registered into
:data:`.torch_convert_ops.MODULES` for :mod:`.torch_convert`: ``Embedding`` (its input:
integer ids), ``LSTM``/``GRU``/``RNN`` with ``batch_first=True`` (the output sequence,
``module(x)[0]``; the final states ``[1]`` are refused by the converter) and
``PixelShuffle``/``PixelUnshuffle`` (channel-aware: channels-last maps).
"""

from __future__ import annotations

from .. import layers as L
from .torch_convert_ops import CHANNEL_MODULES, MODULES

#: torch modules whose output is a tuple (sequence, state): only item 0 is converted
TUPLE_OUTPUT_MODULES = {"LSTM", "GRU", "RNN"}


def _embedding(m):
    if m.scale_grad_by_freq or m.sparse:
        raise ValueError("scale_grad_by_freq=True or sparse=True (handgrad's Embedding "
                         "has neither)")
    return L.Embedding(m.num_embeddings, m.embedding_dim, padding_idx=m.padding_idx,
                       max_norm=m.max_norm, norm_type=m.norm_type)


def _recurrent(m):
    kind = type(m).__name__
    if not m.batch_first:
        raise ValueError("batch_first=False (handgrad's sequences are (N, T, F), batch "
                         "first)")
    kw = {"bidirectional": m.bidirectional, "bias": m.bias, "dropout": float(m.dropout)}
    if kind == "LSTM":
        kw["proj_size"] = m.proj_size
    if kind == "RNN":
        kw["nonlinearity"] = m.nonlinearity
    return getattr(L, kind)(m.hidden_size, m.num_layers, **kw)


MODULES.update({
    "Embedding": _embedding,
    **{kind: _recurrent for kind in TUPLE_OUTPUT_MODULES},
    "PixelShuffle": lambda m: L.PixelShuffle(m.upscale_factor),
    "PixelUnshuffle": lambda m: L.PixelUnshuffle(m.downscale_factor),
})
CHANNEL_MODULES.update({"PixelShuffle", "PixelUnshuffle"})


def sequence_item(conv, node, index):
    """Whether ``node`` is ``module(x)[index]`` of a recurrent module (its recorded output
    is a tuple, converted as its sequence): item 0, the sequence, is that value; a used
    item 1 (the final state) is refused."""
    if not isinstance(conv.runtime[node.args[0]], tuple):
        return False
    if index != 0 and _used(node):
        conv.refuse(node, "the final state of a recurrent module (item 1 of its output) is "
                          "not converted; its sequence (item 0) is")
    return True


def _used(node):
    """Whether ``node``'s value reaches anything but unused items (``out, (h, c) = ...``
    with ``h`` and ``c`` unused)."""
    return any(getattr(user.target, "__name__", "") != "getitem" or _used(user)
               for user in node.users)
