"""Adapters of the pooling rows: max, average, adaptive pools and max unpooling on
torch's (N, C, *S) (or unbatched (C, *S)) maps, moved to handgrad's (N, *S, C); the
indices of ``return_indices`` (flat positions in each channel's map, as torch's) are
compared exactly."""

from __future__ import annotations

import numpy as np
import torch

from .helpers import Sample, Unsupported, batched, first, last, named, op_row

MAX = ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices")
AVG = ("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
       "divisor_override")
ADAPTIVE_MAX = ("input", "output_size", "return_indices")
ADAPTIVE_AVG = ("input", "output_size")
LP = ("input", "norm_type", "kernel_size", "stride", "ceil_mode")
UNPOOL = ("input", "indices", "kernel_size", "stride", "padding", "output_size")
FRACTIONAL = ("input", "kernel_size", "output_size", "output_ratio", "return_indices",
              "_random_samples")
#: torch's defaults where handgrad's differ
DEFAULTS = {"count_include_pad": True}
#: torch's keyword -> handgrad's
RENAME = {"_random_samples": "samples"}


def pool(name, nd, names):
    """``ops.<name>`` on the sample's (N, C, *S) input; keywords by torch's names."""
    from handgrad import ops

    def run(sample, *arrays):
        v, leaves = named(sample, names, arrays)
        if leaves != ["input"]:
            raise Unsupported("gradient of a non-input")
        x, added = batched(v["input"], nd)
        keywords = {RENAME.get(k, k): v.get(k, DEFAULTS.get(k)) for k in names[1:]
                    if k in v or k in DEFAULTS}
        if keywords.get("stride") == ():
            keywords["stride"] = None
        for key in ("kernel_size", "stride", "padding", "dilation"):
            if isinstance(keywords.get(key), (tuple, list)) and len(keywords[key]) == 1:
                keywords[key] = keywords[key][0]  # torch repeats a 1-tuple on every axis
        if "indices" in keywords or name.startswith("max_unpool"):
            keywords.pop("indices", None)
            indices = last(batched(v["indices"], nd)[0])
            if keywords.get("output_size") is not None:
                keywords["output_size"] = tuple(keywords["output_size"])[-nd:]
            out = getattr(ops, name)(last(x), indices, **keywords)
        else:
            out = getattr(ops, name)(last(x), **keywords)
        y, cache = out[0], out[-1]
        extras = {}
        if keywords.get("return_indices"):
            idx = first(out[1])
            extras["indices"] = idx[0] if added else idx
        y = first(y)

        def backward(dy):
            dx = first(getattr(ops, name + "_backward")(last(dy[None] if added else dy), cache))
            return [dx[0] if added else dx]

        return (y[0] if added else y), backward, extras

    return op_row(run)


def _row(name, nd, names):
    adapter = pool(name, nd, names)

    def wrapped(op, sample):
        plan = adapter(op, sample)
        fn = plan.torch_fn
        plan.torch_fn = lambda *t: _indices_extra(fn(*t))
        return plan

    return wrapped


def fractional(nd):
    """A fractional max pool row on fixed regions: where torch would draw its own
    ``_random_samples``, one draw (float32 values, exact in both dtypes) goes to torch
    and, as ``samples``, to handgrad."""
    adapter = _row(f"fractional_max_pool{nd}d", nd, FRACTIONAL)

    def wrapped(op, sample):
        kwargs = dict(sample.kwargs)
        if kwargs.get("_random_samples") is None:
            x = sample.input
            shape = (x.shape[0] if x.dim() == nd + 2 else 1, x.shape[-nd - 1], nd)
            u = np.random.default_rng(x.numel()).random(shape).astype(np.float32)
            kwargs["_random_samples"] = torch.as_tensor(u, dtype=x.dtype)
        return adapter(op, Sample(sample.input, sample.args, kwargs))

    return wrapped


def _indices_extra(out):
    return (out[0], {"indices": out[1]}) if isinstance(out, tuple) else out


OPS = {}
for _nd in (1, 2, 3):
    OPS[f"max_pool{_nd}d"] = _row(f"max_pool{_nd}d", _nd, MAX)
    OPS[f"avg_pool{_nd}d"] = _row(f"avg_pool{_nd}d", _nd, AVG[:6] if _nd == 1 else AVG)
    OPS[f"adaptive_max_pool{_nd}d"] = _row(f"adaptive_max_pool{_nd}d", _nd, ADAPTIVE_MAX)
    OPS[f"adaptive_avg_pool{_nd}d"] = _row(f"adaptive_avg_pool{_nd}d", _nd, ADAPTIVE_AVG)
    if _nd < 3:  # not op_db rows: the functional forms of the LPPool modules
        OPS[f"lp_pool{_nd}d"] = _row(f"lp_pool{_nd}d", _nd, LP)
    if _nd > 1:
        OPS[f"fractional_max_pool{_nd}d"] = fractional(_nd)
    for _variant in ("", ".grad"):
        OPS[f"max_unpool{_nd}d{_variant}"] = _row(f"max_unpool{_nd}d", _nd, UNPOOL)
