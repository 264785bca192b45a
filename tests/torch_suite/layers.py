"""Adapters that run a ``module_db`` row through its handgrad layer: the torch module's
state dict goes into the layer through ``handgrad.io.from_torch`` (its ``torch_twin``
mapping), the layer's forward and backward run on the sample, and the parameter
gradients come back under torch's names (the same mapping applied to the gradients), so
every parameter is compared as a differentiable input, by name.

Attention and transformer rows: torch's unbatched (T, E) inputs get a batch axis of one
(their masks with it: (S,) -> (1, S), (H, T, S) stays (1 * H, T, S)); ``batch_first=False``
inputs (T, N, E) are transposed to handgrad's (N, T, E) and back. ``MultiheadAttention``
returns ``(output, weights)``: the attention output is compared (the weights are not an
output of handgrad's layer; their effect is in the output and every gradient).
"""

from __future__ import annotations

import numpy as np
import torch

from handgrad import layers as hl
from handgrad.io import from_torch, to_torch_state_dict

from .core import Plan, Unsupported, numpy


def torch_grads(layer):
    """``{torch name: gradient}`` of a layer after its backward: the torch-twin mapping
    (linear: transposes, splits, concatenations) applied to the gradients."""
    walked = [child for _, child in layer.walk()]
    saved = [child.parameters for child in walked]
    try:
        for child in walked:
            child.parameters = {**child.parameters, **child.gradients}
        return to_torch_state_dict(layer, numpy=True)
    finally:
        for child, params in zip(walked, saved):
            child.parameters = params


def layer_plan(m, inputs, call, build, run, batch_axis=0, stats=(), terms=None):
    """A plan over the float ``inputs`` (torch tensors) and ``m``'s parameters (torch's
    ``named_parameters`` order): ``call(m, *inputs)`` torch's output; ``build(dtype)``
    the unbuilt handgrad layer; ``run(layer, *arrays) -> (y, backward[, extras])`` with
    ``backward(dy) -> [gradient of each input]``; ``batch_axis`` of the inputs (None:
    unbatched; a list: one per input), for the ``terms`` of the tolerances. ``stats``:
    buffers compared after the call (running statistics): torch updates fresh copies of
    the module's buffers at each call, the layer its own (``extras``). ``terms``: the
    plan's terms where given (a layer without float inputs), else from the inputs."""
    names = [k for k, _ in m.named_parameters()]
    buffers = {k: numpy(v) for k, v in m.named_buffers()}
    leaves = [t.detach().requires_grad_(True) for t in inputs]
    leaves += [p.detach().requires_grad_(True) for _, p in m.named_parameters()]

    def torch_fn(*new):
        fresh = {k: torch.as_tensor(v.copy()) for k, v in buffers.items()}
        fresh = {k: t.to(new[0].dtype) if t.is_floating_point() else t
                 for k, t in fresh.items()}
        y = _call(m, call, {**fresh, **dict(zip(names, new[len(inputs):]))},
                  new[:len(inputs)], new[0].dtype)
        return (y, {k: fresh[k] for k in stats}) if stats else y

    def handgrad_fn(*arrays):
        layer = build(arrays[0].dtype)
        state = {**{k: v.copy() for k, v in buffers.items()},
                 **dict(zip(names, arrays[len(inputs):]))}
        y, back, *extras = run(layer, state, *arrays[:len(inputs)])

        def backward(dy):
            grads = list(back(dy))
            by_name = torch_grads(layer)
            return grads + [by_name[k] for k in names]

        return y, backward, (extras[0] if extras else {})

    return Plan(leaves, torch_fn, handgrad_fn,
                terms=terms or dependencies(leaves, len(inputs), batch_axis))


def dependencies(leaves, count, batch_axis):
    """``terms`` of a layer's results: one output entry depends on one example of each
    of the ``count`` inputs (all of it when unbatched, ``batch_axis`` None) and on every
    parameter; a gradient entry on those and one example of the upstream (shaped as the
    first input)."""
    axes = batch_axis if isinstance(batch_axis, list) else [batch_axis] * count
    sizes = [t.numel() // (1 if axis is None else max(t.shape[axis], 1))
             for t, axis in zip(leaves[:count], axes)]
    params = sum(t.numel() for t in leaves[count:])
    example = sum(sizes)
    grads = example + params + sizes[0]
    return {"y": example + params, **{f"grad {i}": grads for i in range(len(leaves))}}


def _call(m, call, params, inputs, dtype):
    m = m.to(dtype)
    with torch.nn.utils.stateless._reparametrize_module(m, params):
        return call(m, *inputs)


def load(layer, state, shape, dtype):
    """Build ``layer`` for per-example ``shape`` in ``dtype``, import ``state``."""
    layer.build(shape, dtype=dtype)
    from_torch(state, layer)
    return layer


def _seq(x, batch_first, unbatched):
    """torch's (T, E), (N, T, E) or (T, N, E) -> handgrad's (N, T, E)."""
    if unbatched:
        return x[None]
    return x if batch_first else np.swapaxes(x, 0, 1)


def _mask(mask, unbatched, key_padding=False):
    if mask is None:
        return None
    mask = numpy(mask)
    return mask[None] if unbatched and (key_padding or mask.ndim == 3) else mask


def _mask_dtype(mask, dtype):
    return mask if mask is None or mask.dtype == bool else mask.astype(dtype)


def mha(info, module_input, training):
    ci, fi = module_input.constructor_input, module_input.forward_input
    m = info.module_cls(*ci.args, **ci.kwargs).train(training)
    if m.dropout and training:
        raise Unsupported("random mask")
    q, k, v = fi.args[:3]
    kw = dict(fi.kwargs)
    unbatched = q.dim() == 2
    bf = m.batch_first
    masks = {"key_padding_mask": _mask(kw.pop("key_padding_mask", None), unbatched, True),
             "attn_mask": _mask(kw.pop("attn_mask", None), unbatched)}
    if set(kw) - {"need_weights", "average_attn_weights"}:  # the output is the same
        raise Unsupported("forward keywords")
    mask_tensors = {k2: fi.kwargs.get(k2) for k2 in ("key_padding_mask", "attn_mask")}

    def call(mod, q_, k_, v_):
        found = {k2: (t.to(q_.dtype) if t is not None and t.is_floating_point() else t)
                 for k2, t in mask_tensors.items()}
        return mod(q_, k_, v_, **found)[0]

    def build(dtype):
        return hl.MultiHeadAttention(m.embed_dim, m.num_heads, dropout=m.dropout,
                                     bias=m.in_proj_bias is not None or
                                     m.out_proj.bias is not None,
                                     kdim=None if m._qkv_same_embed_dim else m.kdim,
                                     vdim=None if m._qkv_same_embed_dim else m.vdim,
                                     packed=m._qkv_same_embed_dim,
                                     add_bias_kv=m.bias_k is not None,
                                     add_zero_attn=m.add_zero_attn, dtype=dtype)

    def run(layer, state, qa, ka, va):
        seq = [_seq(a, bf, unbatched) for a in (qa, ka, va)]
        load(layer, state, seq[0].shape[1:], qa.dtype)
        found = {k2: _mask_dtype(v2, qa.dtype) for k2, v2 in masks.items()}
        y = layer.forward(seq[0], key=seq[1], value=seq[2], **found)
        out = y[0] if unbatched else (y if bf else np.swapaxes(y, 0, 1))

        def back(dy):
            g = layer.backward_all(_seq(dy, bf, unbatched))
            return [gi[0] if unbatched else (gi if bf else np.swapaxes(gi, 0, 1)) for gi in g]

        return out, back

    return layer_plan(m, [q, k, v], call, build, run, None if unbatched else 1 - bf)


MODULES = {"MultiheadAttention": mha}
