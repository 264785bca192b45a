"""What the family adapters share: torch's call of a sample with its differentiable
tensors replaced, the channel moves, a handgrad kernel as ``(y, backward)``."""

from __future__ import annotations

import numpy as np
import torch

from handgrad import ops

from .core import Plan, Unsupported, numpy

__all__ = [
    "Sample",
    "Unsupported",
    "batched",
    "first",
    "kernel",
    "last",
    "leaf_call",
    "op_row",
    "value",
    "with_grad",
]


def _leaf(v):
    return isinstance(v, torch.Tensor) and v.is_floating_point() and v.requires_grad


def leaf_call(fn, sample):
    """(leaves, torch_fn): the sample's differentiable tensors (input, args, kwargs in
    order) and ``torch_fn(*leaves)`` calling ``fn`` with them in their places (every
    other float tensor cast to the leaves' dtype)."""
    items = [sample.input, *sample.args, *sample.kwargs.values()]
    flat = [v for item in items for v in (item if isinstance(item, (list, tuple)) else [item])]
    leaves = [v for v in flat if _leaf(v)]

    def torch_fn(*new):
        it = iter(new)
        dtype = new[0].dtype if new else torch.float64

        def swap(v):
            if isinstance(v, (list, tuple)) and any(_leaf(u) for u in v):
                return type(v)(swap(u) for u in v)
            if _leaf(v):
                return next(it)
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                return v.detach().to(dtype, copy=True)
            return v

        args = [swap(v) for v in (sample.input, *sample.args)]
        kwargs = {k: swap(v) for k, v in sample.kwargs.items()}
        return fn(*args, **kwargs)

    return leaves, torch_fn


class Sample:
    """A sample's ``input``, ``args``, ``kwargs`` (torch's SampleInput, rebuilt)."""

    def __init__(self, input, args=(), kwargs=None):
        self.input, self.args, self.kwargs = input, tuple(args), dict(kwargs or {})


def with_grad(sample):
    """``sample`` with every float tensor differentiable (torch's error inputs have none,
    and the adapters take the differentiable tensors as handgrad's arrays)."""

    def fix(v):
        if isinstance(v, (list, tuple)):
            return type(v)(fix(u) for u in v)
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v.detach().requires_grad_(True)
        return v

    return Sample(fix(sample.input), [fix(v) for v in sample.args],
                  {k: fix(v) for k, v in sample.kwargs.items()})


def op_row(handgrad, torch_fn=None, bounds=None):
    """An OpInfo adapter from ``handgrad(sample, *arrays) -> (y, backward[, extras])``:
    ``arrays`` are NumPy copies of the sample's differentiable tensors in order;
    ``bounds(sample, arrays, dy)``: the family's derived bounds (see ``core.Plan``)."""

    def adapter(op, sample):
        leaves, call = leaf_call(torch_fn or op.op, sample)

        def run(*arrays):
            out = handgrad(sample, *arrays)
            return out if len(out) == 3 else (*out, {})

        derived = None if bounds is None else (lambda arrays, dy: bounds(sample, arrays, dy))
        return Plan(leaves, call, run, derived)

    return adapter


def value(v, dtype=None):
    """A sample's non-differentiable argument as NumPy (a float array in ``dtype``)."""
    a = numpy(v)
    if dtype is not None and isinstance(a, np.ndarray) and a.dtype.kind == "f":
        return a.astype(dtype)
    return a


def last(a):
    """Channels-first (N, C, *S) -> channels-last (N, *S, C)."""
    return None if a is None else np.moveaxis(a, 1, -1)


def first(a):
    return None if a is None else np.moveaxis(a, -1, 1)


def batched(x, spatial):
    """``x`` with a batch axis (torch's unbatched (C, *S) input) and whether one was added."""
    if x.ndim == spatial + 1:
        return x[None], True
    if x.ndim != spatial + 2:
        raise Unsupported("input rank")
    return x, False


def kernel(name, *args, **kwargs):
    """``(y, backward)`` of ``ops.<name>``: backward(dy) -> tuple of gradients."""
    out = getattr(ops, name)(*args, **kwargs)
    y, cache = out[0], out[-1]
    back = getattr(ops, name + "_backward")

    def backward(dy):
        g = back(dy, cache)
        return g if isinstance(g, tuple) else (g,)

    return y, backward


def channels_last_kernel(name, spatial, x, *rest, **kwargs):
    """``(y, backward)`` of a channels-last kernel on torch's (N, C, *S) or (C, *S)
    ``x``; ``rest`` passed as they are; gradients of ``x`` moved back (others kept)."""
    xb, added = batched(x, spatial)
    y, back = kernel(name, last(xb), *rest, **kwargs)
    y = first(y)
    y = y[0] if added else y

    def backward(dy):
        dyb = dy[None] if added else dy
        g = back(last(dyb))
        dx = first(g[0])
        return (dx[0] if added else dx, *g[1:])

    return y, backward


__all__ += ["channels_last_kernel"]


def named(sample, names, arrays):
    """({name: value}, leaf names): the sample's arguments by torch's parameter
    ``names`` (positional first, then keywords), NumPy throughout, the differentiable
    ones replaced by ``arrays`` (handgrad's copies, in leaf order)."""
    keys = list(names[:1 + len(sample.args)]) + list(sample.kwargs)
    items = [sample.input, *sample.args, *sample.kwargs.values()]
    dtype = arrays[0].dtype if arrays else None
    leaves = [k for k, v in zip(keys, items) if _leaf(v)]
    values = {k: value(v, dtype) for k, v in zip(keys, items)}
    values.update(zip(leaves, arrays))
    return values, leaves


def named_row(names, handgrad):
    """An OpInfo adapter from ``handgrad(values) -> (y, backward)`` with ``values`` by
    torch's parameter name (see :func:`named`) and ``backward(dy) -> {name: gradient}``."""

    def run(sample, *arrays):
        values, leaves = named(sample, names, arrays)
        y, back = handgrad(values)
        return y, lambda dy: [back(dy).get(k) for k in leaves]

    return op_row(run)


__all__ += ["named", "named_row"]
