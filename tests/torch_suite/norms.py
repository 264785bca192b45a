"""Adapters of the normalization rows: batch, instance and group norms on torch's
(N, C, *S) moved to channels-last (running statistics, updated in place by both, are
compared after the call), layer and RMS norms over the trailing axes as they are, local
response norm and ``normalize``."""

from __future__ import annotations

import torch

from .helpers import Unsupported, first, kernel, last, named, op_row

BATCH = ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum",
         "eps")
INSTANCE = ("input", "running_mean", "running_var", "weight", "bias", "use_input_stats",
            "momentum", "eps")
STATS = ("running_mean", "running_var")


def _with_stats(fn, names):
    """torch's call returning its (copied, updated) running statistics as extras."""

    def call(*args, **kwargs):
        given = dict(zip(names, args), **kwargs)
        y = fn(*args, **kwargs)
        return y, {k: given[k] for k in STATS if isinstance(given.get(k), torch.Tensor)}

    return call


def _grads(back, dy, leaves, names, move):
    """handgrad's (dx, dgamma, dbeta) by torch's names, in leaf order."""
    dx, dgamma, dbeta = back(last(dy) if move else dy)[:3]
    got = {"input": first(dx) if move else dx, "weight": dgamma, "bias": dbeta}
    return [got.get(k) for k in leaves]


def stats_norm(name, names, flag):
    """batch_norm / instance_norm: ``flag`` is torch's training / use_input_stats."""

    def run(sample, *arrays):
        v, leaves = named(sample, names, arrays)
        if set(leaves) - {"input", "weight", "bias"}:
            raise Unsupported("gradient of a running statistic")
        x = v["input"]
        if x.ndim < 2:
            raise Unsupported("input rank")
        mode = {"training": "training", "use_input_stats": "use_input_stats"}[flag]
        default = flag == "use_input_stats"
        keywords = {mode: bool(v.get(flag, default)), "momentum": v.get("momentum", 0.1),
                    "eps": v.get("eps", 1e-5)}
        stats = {k: v.get(k) for k in STATS}
        y, back = kernel(name, last(x), v.get("weight"), v.get("bias"),
                         stats["running_mean"], stats["running_var"], **keywords)
        extras = {k: s for k, s in stats.items() if s is not None}
        return first(y), lambda dy: _grads(back, dy, leaves, names, True), extras

    fn = getattr(torch.nn.functional, name)
    return op_row(run, _with_stats(fn, names))


def trailing(name, names):
    """layer_norm / rms_norm over the trailing ``normalized_shape``: no channel move."""

    def run(sample, *arrays):
        v, leaves = named(sample, names, arrays)
        extra = {"beta": v.get("bias")} if "bias" in names else {}
        y, back = kernel(name, v["input"], tuple(v["normalized_shape"]), v.get("weight"),
                         *extra.values(), eps=v.get("eps", 1e-5 if name == "layer_norm"
                                                    else None))
        if name == "rms_norm":
            return y, lambda dy: [dict(zip(("input", "weight"), back(dy))).get(k)
                                  for k in leaves]
        return y, lambda dy: _grads(back, dy, leaves, names, False)

    return op_row(run)


def group_norm(sample, x, *params):
    names = ("input", "num_groups", "weight", "bias", "eps")
    v, leaves = named(sample, names, (x, *params))
    if x.ndim < 2:
        raise Unsupported("input rank")
    y, back = kernel("group_norm", last(x), v["num_groups"], v.get("weight"), v.get("bias"),
                     eps=v.get("eps", 1e-5))
    return first(y), lambda dy: _grads(back, dy, leaves, names, True)


def local_response_norm(sample, x):
    names = ("input", "size", "alpha", "beta", "k")
    v, _ = named(sample, names, (x,))
    if x.ndim < 3:
        raise Unsupported("input rank")
    keywords = {k: v[k] for k in names[2:] if k in v}
    y, back = kernel("local_response_norm", last(x), v["size"], **keywords)
    return first(y), lambda dy: [first(back(last(dy))[0])]


def normalize(sample, x):
    names = ("input", "p", "dim", "eps")
    v, _ = named(sample, names, (x,))
    if x.ndim == 0:
        raise Unsupported("0-d input")
    keywords = {"p": v.get("p", 2.0), "axis": v.get("dim", 1), "eps": v.get("eps", 1e-12)}
    y, back = kernel("normalize", x, **keywords)
    return y, lambda dy: [back(dy)[0]]


OPS = {"batch_norm": stats_norm("batch_norm", BATCH, "training"),
       "batch_norm.without_cudnn": stats_norm("batch_norm", BATCH, "training"),
       "instance_norm": stats_norm("instance_norm", INSTANCE, "use_input_stats"),
       "layer_norm": trailing("layer_norm", ("input", "normalized_shape", "weight", "bias",
                                             "eps")),
       "rms_norm": trailing("rms_norm", ("input", "normalized_shape", "weight", "eps")),
       "group_norm": op_row(group_norm),
       "local_response_norm": op_row(local_response_norm),
       "normalize": op_row(normalize)}
