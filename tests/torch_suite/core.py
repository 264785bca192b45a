"""The engine of the torch-suite: one torch sample through an adapter, handgrad and torch
autograd, compared.

An adapter (one per torch row, in the family modules) turns a torch sample into a
:class:`Plan`: the differentiable tensors of the sample (``leaves``, torch's layout),
``torch_fn(*leaves)`` (torch's call) and ``handgrad_fn(*arrays)`` (handgrad's call on
NumPy copies of the leaves, channels moved inside), which returns ``(y, backward,
extras)``: ``backward(dy) -> [gradient of each leaf]`` (torch's layout, None where none)
and ``extras`` the buffers to compare (running statistics), as ``torch_fn`` returns
them. It raises :class:`Unsupported` (a short named reason) for a sample handgrad does
not take.

Tolerances (DESIGN, "tolerances follow from the dtype and the case"): the reference is
torch in float64; the size of the case's terms is measured as torch's own float32
error on it, ``max|t32 - t64| / eps32`` (the inputs rounded to float32 and the float32
arithmetic: the componentwise condition of the case times ``|y|``), over two float32
runs (the inputs rounded, and rounded then one ulp off at random: one run can be exact
by luck), at least ``max|t64|``. ``terms``, how many values one result sums, is at most
the fan-in: the largest input's size over the output's for the output (a reduction, a
convolution), the output's size over an input's for that input's gradient (a bias, a
broadcast weight).
handgrad in ``dtype`` must be within ``tolerance(dtype, terms, scale)``: one float32
result of torch can be exact by luck, the fan-in keeps the bound of a sum honest.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from handgrad.testing import finite_max, max_abs_error, tolerance

EPS32 = float(np.finfo(np.float32).eps)
DTYPES = {"float32": (torch.float32, np.float32), "float64": (torch.float64, np.float64)}


class Unsupported(Exception):
    """A sample handgrad does not take; ``reason`` is a short name the report groups by."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class Mismatch(AssertionError):
    """handgrad's result differs from torch's beyond the tolerance (or raised)."""


@dataclass
class Plan:
    leaves: list
    torch_fn: object
    handgrad_fn: object
    #: ``bounds(arrays, dy) -> {"y" or "grad i": (terms, scale)}``: a family's derived
    #: bounds (``tests/tolerances.py``), which the measured ones never go below
    bounds: object = None
    #: ``{"y" or "grad i": terms}`` replacing the fan-in where one result depends on more
    #: values than it (a composite layer: the count of values it depends on)
    terms: dict = None


def numpy(t):
    return t.detach().cpu().numpy().copy() if isinstance(t, torch.Tensor) else t


def _nudged(t, seed):
    """``t`` in float32, each entry moved one ulp up or down at random."""
    a = t.detach().to(torch.float32).numpy()
    up = np.random.default_rng(seed).random(a.shape) < 0.5
    return torch.as_tensor(np.where(up, np.nextafter(a, np.float32(np.inf)),
                                    np.nextafter(a, np.float32(-np.inf))))


def _torch_eval(plan, tdtype, dy, nudge=None):
    """(y, [grad per leaf], extras) of torch on the leaves cast to ``tdtype`` (float32
    leaves one ulp off at random with a ``nudge`` seed)."""
    leaves = [(t.detach().to(tdtype) if nudge is None else _nudged(t, nudge + i))
              .requires_grad_(True) for i, t in enumerate(plan.leaves)]
    out = plan.torch_fn(*leaves)
    y, extras = out if isinstance(out, tuple) else (out, {})
    if y.requires_grad:
        y.backward(torch.as_tensor(dy, dtype=tdtype).reshape(y.shape))
    grads = [numpy(t.grad) if t.grad is not None else np.zeros(tuple(t.shape)) for t in leaves]
    return numpy(y), grads, {k: numpy(v) for k, v in extras.items()}


def _bound(dtype, ref, lows, terms, derived=None):
    scale = max([finite_max(ref)] + [max_abs_error(low, ref) / EPS32 for low in lows])
    if not np.isfinite(scale):  # torch float32 over/underflows where float64 does not
        scale = finite_max(ref)
    bound = tolerance(dtype, terms, scale)
    return bound if derived is None else max(bound, tolerance(dtype, *derived))


def fan_in(sources, result):
    """How many entries of ``sources`` one entry of ``result`` can sum, at most (>= 1)."""
    return max(1, -(-max(int(np.size(a)) for a in sources) // max(int(np.size(result)), 1)))


def _check(name, ours, ref, lows, dtype, terms=1, derived=None):
    if ours is None:
        ours = np.zeros_like(ref)
    ours = np.asarray(ours)
    if ours.shape != ref.shape:
        raise Mismatch(f"{name}: shape {ours.shape} != torch's {ref.shape}")
    error = max_abs_error(ours, ref)
    bound = _bound(dtype, ref, lows, terms, derived)
    if not error <= bound:
        raise Mismatch(f"{name}: max |error| {error:.3e} > {bound:.3e}")


def run_plan(plan, dtype_name, seed=0):
    """Compare handgrad with torch on one plan; raises :class:`Mismatch`."""
    ndtype = DTYPES[dtype_name][1]
    with torch.no_grad():
        probe = plan.torch_fn(*[t.detach().double() for t in plan.leaves])
    probe = probe[0] if isinstance(probe, tuple) else probe
    dy = np.random.default_rng(seed).standard_normal(tuple(probe.shape))
    ref = _torch_eval(plan, torch.float64, dy)
    lows = [_torch_eval(plan, torch.float32, dy), _torch_eval(plan, torch.float32, dy, seed)]
    arrays = [numpy(t).astype(ndtype) for t in plan.leaves]
    y, backward, extras = plan.handgrad_fn(*arrays)
    derived = {} if plan.bounds is None else plan.bounds(
        [numpy(t).astype(np.float64) for t in plan.leaves], dy)
    terms = plan.terms or {}
    _check("y", y, ref[0], [lo[0] for lo in lows], ndtype,
           terms.get("y", fan_in(arrays or [y], ref[0])), derived.get("y"))
    if np.ndim(y) and np.asarray(y).dtype != ndtype:  # a reduced loss may be a float
        raise Mismatch(f"y: dtype {np.asarray(y).dtype} for {dtype_name} inputs")
    grads = backward(dy.astype(ndtype))
    if len(grads) != len(ref[1]):
        raise Mismatch(f"{len(grads)} gradients for {len(ref[1])} inputs")
    for i, (g, r) in enumerate(zip(grads, ref[1])):
        _check(f"grad {i}", g, r, [lo[1][i] for lo in lows], ndtype,
               terms.get(f"grad {i}", fan_in([ref[0]], r)), derived.get(f"grad {i}"))
    for key, want in ref[2].items():
        _check(key, extras.get(key), want, [lo[2][key] for lo in lows], ndtype)


def run_error(adapter, sample):
    """'pass' when handgrad refuses the bad input with a ValueError/TypeError (raised by
    the adapter's conversion or by handgrad's call); raises Mismatch otherwise."""
    try:
        plan = adapter(sample)
        arrays = [numpy(t) for t in plan.leaves]
        y, backward, _ = plan.handgrad_fn(*arrays)
        backward(np.ones(np.shape(y)))
    except (ValueError, TypeError):
        return "pass"
    except Unsupported:
        raise
    except Exception as exc:
        raise Mismatch(f"raised {type(exc).__name__} instead of ValueError/TypeError: "
                       f"{exc}") from exc
    raise Mismatch("returned a result where torch raises")
