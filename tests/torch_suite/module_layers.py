"""Module rows run through handgrad's layer twin: Linear (``Dense``), the convolutions
and transposed convolutions (lazy ones after one call), Embedding, the batch, instance,
group and layer norms. The torch module's parameters and buffers go into the layer
through ``from_torch`` (``layers.layer_plan``); the layer's forward and backward run on
the sample (channels moved last, an unbatched input given a batch axis of one), the
parameter gradients are compared by torch name and the running statistics after the
call. A sample the layer cannot take as a one-input call (other forward keywords, more
inputs) goes to the functional adapter of ``modules.py`` instead."""

from __future__ import annotations

import numpy as np
import torch

from handgrad import layers as hl

from . import modules
from .helpers import first, last, numpy
from .layers import layer_plan, load

STATS = ("running_mean", "running_var")


def _channels(unbatched):
    """torch's (N, C, *S) <-> handgrad's (N, *S, C) (unbatched (C, *S): a batch of one)."""
    def to(a):
        return last(a[None] if unbatched else a)

    def back(a):
        a = first(a)
        return a[0] if unbatched else a

    return to, back


def _trailing(unbatched):
    """Features last already: only the batch axis of one for an unbatched input."""
    return (lambda a: a[None] if unbatched else a), (lambda a: a[0] if unbatched else a)


def _conv(rank, transposed):
    name = f"ConvTranspose{rank}D" if transposed else f"Conv{rank}D"

    def make(m):
        keywords = {"stride": m.stride, "padding": m.padding, "dilation": m.dilation,
                    "groups": m.groups, "bias": m.bias is not None}
        if transposed:
            keywords["output_padding"] = m.output_padding
        else:
            keywords["padding_mode"] = m.padding_mode
        return lambda dtype: getattr(hl, name)(m.out_channels, m.kernel_size, dtype=dtype,
                                               **keywords)

    return make, (lambda m, x: x.dim() == rank + 1), _channels


def _lone_weight(m):
    """The norm layers' ``affine`` is gamma and beta together: torch's affine norm without
    a bias goes to the functional adapter."""
    return m.affine and m.bias is None


def _running(cls):
    def make(m):
        if _lone_weight(m):
            return None
        return lambda dtype: cls(m.momentum, m.eps, m.affine, m.track_running_stats,
                                 dtype=dtype)

    if cls is hl.BatchNorm:  # (N, C) or (N, C, *S): always batched
        return make, (lambda m, x: False), _channels
    return make, (lambda m, x: x.dim() == m._get_no_batch_dim()), _channels


def _group_norm(m):
    if _lone_weight(m):
        return None
    return lambda dtype: hl.GroupNorm(m.num_groups, eps=m.eps, affine=m.affine, dtype=dtype)


TWINS = {"Linear": (lambda m: lambda dtype: hl.Dense(m.out_features, bias=m.bias is not None,
                                                     dtype=dtype),
                    lambda m, x: x.dim() == 1, _trailing),
         "GroupNorm": (_group_norm, lambda m, x: False, _channels),
         "LayerNorm": (lambda m: lambda dtype: hl.LayerNorm(
             m.normalized_shape, m.eps, m.elementwise_affine, m.bias is not None, dtype=dtype),
                       lambda m, x: x.dim() == len(m.normalized_shape), _trailing)}
for _rank in (1, 2, 3):
    for _lazy in ("", "Lazy"):
        TWINS[f"{_lazy}Conv{_rank}d"] = _conv(_rank, False)
        TWINS[f"{_lazy}ConvTranspose{_rank}d"] = _conv(_rank, True)
    TWINS[f"BatchNorm{_rank}d"] = _running(hl.BatchNorm)
    TWINS[f"InstanceNorm{_rank}d"] = _running(hl.InstanceNorm)


def through_layer(make, is_unbatched, layout, fallback):
    """A module adapter: the module through its handgrad layer (``make(module)`` ->
    ``build(dtype)``, or None where the layer lacks a setting), ``fallback`` (the
    functional adapter) for other calls."""

    def adapter(info, module_input, training):
        ci, fi = module_input.constructor_input, module_input.forward_input
        given = [*fi.args, *fi.kwargs.values()]  # the input, positional or ``input=``
        x = given[0] if len(given) == 1 and set(fi.kwargs) <= {"input"} else None
        if not isinstance(x, torch.Tensor) or not x.is_floating_point():
            return fallback(info, module_input, training)
        m = info.module_cls(*ci.args, **ci.kwargs)
        modules.materialize(m, [x])
        m = m.to(x.dtype).train(training)
        build = make(m)
        if build is None:
            return fallback(info, module_input, training)
        to, back = layout(is_unbatched(m, x))
        stats = [k for k in STATS if getattr(m, k, None) is not None]

        def run(layer, state, xa):
            xs = to(xa)
            load(layer, state, xs.shape[1:], xa.dtype)
            y = layer.forward(xs, training=training, grad=True)
            extras = {k: np.array(layer.buffers[k]) for k in stats}
            return back(y), lambda dy: [back(layer.backward(to(dy)))], extras

        return layer_plan(m, [x], lambda mod, xs: mod(xs), build, run,
                          None if is_unbatched(m, x) else 0, stats)

    return adapter


def embedding(info, module_input, training):
    """ids (N, ...) through ``Embedding`` (max_norm included); the functional adapter for
    ``scale_grad_by_freq`` (the layer has none), unbatched ids and other calls."""
    ci, fi = module_input.constructor_input, module_input.forward_input
    m = info.module_cls(*ci.args, **ci.kwargs)
    ids = numpy(fi.args[0]) if len(fi.args) == 1 else None
    if fi.kwargs or ids is None or ids.ndim == 0 or m.scale_grad_by_freq:
        return modules.MODULES["Embedding"](info, module_input, training)

    def build(dtype):
        return hl.Embedding(m.num_embeddings, m.embedding_dim, m.padding_idx, m.max_norm,
                            m.norm_type, dtype=dtype)

    def run(layer, state):
        load(layer, state, ids.shape[1:], state["weight"].dtype)
        y = layer.forward(ids, training=training, grad=True)
        return y, lambda dy: [layer.backward(dy)][:0]

    # an output entry is a copy of a table entry; a table gradient sums its id's uses
    return layer_plan(m, [], lambda mod: mod(fi.args[0]), build, run,
                      terms={"y": 1, "grad 0": max(ids.size, 1)})


MODULES = {name: through_layer(*twin, modules.MODULES[name]) for name, twin in TWINS.items()}
MODULES["Embedding"] = embedding
