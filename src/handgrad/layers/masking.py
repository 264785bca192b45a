"""Masks of padded time steps (Keras's ``compute_mask``) and the ``Masking`` layer.

A mask is a bool array (N, T), True for the steps that count. ``Masking(mask_value)``
and ``Embedding(mask_zero=True)`` make one; ``Sequential`` and the graph ``Model``
carry it along with the tensor, each call through :func:`chain_call` /
:func:`graph_call`:

- a layer that consumes masks has ``forward_masked(x, mask, training)`` (and, when its
  graph call differs, ``graph_forward_masked(inputs, masks, training)``): the recurrent
  layers and ``Bidirectional`` (the steps after each sequence's end are skipped: the
  state is carried and the outputs there are zero), ``GlobalAvgPool1D`` (the mean over
  the kept steps), ``GlobalMaxPool1D`` (the max over them), ``MultiHeadAttention`` (the
  masked steps are masked keys);
- a layer's output mask is its ``compute_mask(x, y, mask)`` where it has one, else the
  input mask passed on when the output keeps the (N, T) axes (``Dense`` on (N, T, F), a
  recurrent layer with ``return_sequences``), else None (a pooling, ``Flatten``).

The recurrent kernels skip the steps after each sequence's length, so a mask for them
must keep a prefix of each sequence (right padding, at least one step), as Keras's
masks from padded batches; a mask with holes is refused. Masked steps get no gradient.
"""

from __future__ import annotations

import numpy as np

from .._checks import array_module, describe, float_array, upstream_grad
from .._hyper import number
from .base import Layer
from .caching import forward_scope, keeps_cache
from .registry import register


def check_mask(owner, mask, batch, steps):
    """``mask`` as a bool array (N, T)."""
    if getattr(mask, "dtype", None) is None or mask.dtype != bool \
            or tuple(mask.shape) != (batch, steps):
        got = f"{mask.dtype} shape {tuple(mask.shape)}" if hasattr(mask, "shape") \
            else describe(mask)
        raise ValueError(f"{owner}: the mask must be a bool array (N, T) = {(batch, steps)}; "
                         f"received {got}")
    return mask


def mask_lengths(owner, mask, batch, steps):
    """The lengths (N,) of a right-padded mask: True on a prefix of >= 1 step of each row."""
    mask = check_mask(owner, mask, batch, steps)
    xp = array_module(mask)
    lengths = mask.sum(axis=1)
    prefix = xp.arange(steps)[None, :] < lengths[:, None]
    if not bool((prefix == mask).all()) or (batch and int(lengths.min()) < 1):
        row = int(xp.argmax((prefix != mask).any(axis=1) | (lengths < 1)))
        raise ValueError(f"{owner}: a recurrent layer takes masks of right-padded sequences "
                         f"(True on a prefix of at least one step of each row, the steps "
                         f"after each sequence's end masked); row {row} of the mask is "
                         f"{mask[row].astype(int).tolist()}")
    return lengths.astype(np.int64)


def passed_mask(x, y, mask):
    """The input mask, kept where the output keeps the (N, T) axes, else None."""
    if mask is None or isinstance(y, (list, tuple)):
        return None
    return mask if y.ndim >= 3 and tuple(y.shape[:2]) == tuple(mask.shape) else None


def _output_mask(layer, x, y, mask):
    compute = getattr(layer, "compute_mask", None)
    return compute(x, y, mask) if compute is not None else passed_mask(x, y, mask)


def chain_call(layer, x, mask, training):
    """``(y, output mask)`` of a step of a chain (``Sequential``)."""
    if mask is not None and hasattr(layer, "forward_masked"):
        y = layer.forward_masked(x, mask, training)
    else:
        y = layer.forward(x, training=training)
    return y, _output_mask(layer, x, y, mask)


def graph_call(layer, inputs, masks, training):
    """``(output(s), [output masks])`` of a call in a graph ``Model``."""
    if any(m is not None for m in masks) and hasattr(layer, "graph_forward_masked"):
        out = layer.graph_forward_masked(inputs, masks, training)
    elif len(inputs) == 1 and masks[0] is not None and hasattr(layer, "forward_masked"):
        out = layer.forward_masked(inputs[0], masks[0], training)
    else:
        out = layer.graph_forward(inputs, training)
    if isinstance(out, (list, tuple)):
        return out, [passed_mask(inputs[0], o, masks[0]) for o in out]
    return out, [_output_mask(layer, inputs[0], out, masks[0])]


def masked_forward(layer, x, mask, training, run):
    """The forward of ``layer`` with ``run(x, mask) -> (y, cache)`` as its op (the cache
    kept as :meth:`Layer.forward` keeps it)."""
    grad = keeps_cache(layer.label, training, None)
    x = float_array(layer.label, "x", x, 3, "(N, T, F)")
    layer.ensure_built(x.shape[1:])
    mask = check_mask(layer.label, mask, *x.shape[:2])
    with forward_scope(layer, grad):
        y, cache = run(x, mask)
    if grad:
        layer._caches.append(cache)
    return y


class MaskedPool:
    """The cache of a global pooling over the kept steps of (N, T, C) (masks (N, T)):

    avg: y = sum_t m x / max(sum_t m, 1)     dx = dy m / max(sum_t m, 1)
    max: y = max_{t: m} x (zeros where every step is masked)   dx = dy at the first argmax
    """

    def __init__(self, weights, shape, dtype):
        self.weights, self.shape, self.dtype = weights, shape, dtype

    @classmethod
    def run(cls, x, mask, kind):
        xp = array_module(x)
        if kind == "avg":
            counts = xp.maximum(mask.sum(axis=1, keepdims=True), 1)
            weights = (mask / counts).astype(x.dtype)[..., None]  # (N, T, 1)
            y = (x * weights).sum(axis=1)
        else:
            kept = xp.where(mask[..., None], x, -xp.inf)
            first = xp.argmax(kept, axis=1)  # (N, C)
            y = xp.where(mask.any(axis=1)[:, None],
                         xp.take_along_axis(x, first[:, None, :], axis=1)[:, 0], 0)
            weights = (xp.arange(x.shape[1])[None, :, None] == first[:, None, :]) \
                & mask[..., None]
            weights = weights.astype(x.dtype)
        return y.astype(x.dtype, copy=False), cls(weights, y.shape, x.dtype)

    def backward(self, owner, dy):
        dy = upstream_grad(owner, dy, self.shape, self.dtype)
        return dy[:, None, :] * self.weights


@register
class Masking(Layer):
    """Keras's ``Masking(mask_value=0.0)``: the steps of (N, T, F) whose features all equal
    ``mask_value`` are masked: y = x * m, m = any(x != mask_value, axis=-1), dx = dy * m;
    the mask m (N, T) goes on to the layers after it (see the module docstring)."""

    receptive_field = "pointwise"

    def __init__(self, mask_value=0.0, *, name=None, **common):
        super().__init__(name=name, **common)
        self.mask_value = number("Masking", "mask_value", mask_value)

    def get_config(self):
        return {**super().get_config(), "mask_value": self.mask_value}

    def compute_mask(self, x, y, mask):
        return (x != self.mask_value).any(axis=-1)

    def _forward(self, x, training):
        if x.ndim != 3:
            raise ValueError(f"{self.label}: 'x' must be sequences (N, T, F); received shape "
                             f"{tuple(x.shape)}")
        kept = (x != self.mask_value).any(axis=-1, keepdims=True)
        return x * kept, (kept, x.shape, x.dtype)

    def _backward(self, dy, cache):
        kept, shape, dtype = cache
        return upstream_grad(self.label, dy, shape, dtype) * kept, {}
