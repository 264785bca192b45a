"""The op case table (after PyTorch's OpInfo), built from the op declarations: one case
per declared :class:`~handgrad.ops.declare.Sample` of every op that is not an
activation (those have their own table, ``test_activations.py``), and the helpers that
run a case through handgrad, its loop twin, finite differences and torch."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import numpy as np

from handgrad import ops
from handgrad.ops import reference
from handgrad.ops.declare import Data, Fixed, Sample
from handgrad.testing import assert_close as assert_within
from handgrad.testing import numeric_gradient

from tolerances import condition_bounds, op_bounds

#: ops whose (terms, scale) ``tolerances.op_bounds`` derives; the others are measured
WINDOWED = ("conv", "max_pool", "avg_pool", "global_", "linear", "interpolate")


@dataclass
class OpCase:
    """One sample input of an op: its arguments in order (a shape: a random float array,
    differentiated; None: absent; :class:`Data`; :class:`Fixed`) and keywords."""

    op: str
    shapes: tuple
    kwargs: dict = field(default_factory=dict)
    ties: bool = False  # small-integer inputs, so max windows tie
    negative: bool = False  # all inputs < 0 (the padding must never win a max)
    derivative: bool = True  # False: the backward is a convention (a padding row)

    @classmethod
    def of(cls, decl, sample):
        return cls(decl.name, sample.args, sample.kwargs, sample.ties, sample.negative,
                   sample.derivative)

    @property
    def id(self):
        first = next(s for s in self.shapes if isinstance(s, tuple))
        words = [f"{k}={v}" for k, v in self.kwargs.items()]
        flags = [name for name in ("ties", "negative") if getattr(self, name)]
        return "-".join([self.op, "x".join(map(str, first)), *words, *flags]).replace(" ", "")

    @property
    def differentiable(self):
        """The positions of the arguments the backward returns gradients for."""
        return [i for i, s in enumerate(self.shapes) if s is None or isinstance(s, tuple)]

    @property
    def names(self):
        """The forward's parameter names of the differentiable arguments."""
        params = list(inspect.signature(getattr(ops, self.op)).parameters)
        return [params[i] for i in self.differentiable]

    def inputs(self, dtype=np.float64, seed=0):
        rng = np.random.default_rng(seed)
        arrays = []
        for i, spec in enumerate(self.shapes):
            if spec is None:
                arrays.append(None)
            elif isinstance(spec, Fixed):
                arrays.append(spec.value)
            elif isinstance(spec, Data):
                uniform = spec.low is not None
                draw = rng.uniform(spec.low, spec.high, spec.shape) if uniform else \
                    rng.standard_normal(spec.shape)
                arrays.append(draw.astype(dtype))
            elif i == 0 and self.ties:
                arrays.append(rng.integers(-2, 3, spec).astype(dtype))
            elif i == 0 and self.negative:
                arrays.append((-1.0 - rng.random(spec)).astype(dtype))
            else:
                arrays.append(rng.standard_normal(spec).astype(dtype))
        return arrays


CASES = [OpCase.of(decl, sample) for decl in ops.DECLARED.values() if not decl.layer
         for sample in decl.samples if isinstance(sample, Sample)]


def gradients(case, grads):
    """The backward's results in the order of the case's differentiable arguments."""
    grads = grads if isinstance(grads, tuple) else (grads,)
    order = ops.DECLARED[case.op].grads
    if order is None:
        return grads
    return tuple(grads[order.index(name)] for name in case.names)


def run(module, case, arrays, dy=None):
    """Forward then backward with ``dy`` (default: random) for the first output;
    returns (y, dy, grads), grads in argument order."""
    out = getattr(module, case.op)(*arrays, **case.kwargs)
    y, cache = out[0], out[-1]
    if dy is None:
        dy = np.random.default_rng(1).standard_normal(y.shape).astype(y.dtype)
    return y, dy, gradients(case, getattr(module, case.op + "_backward")(dy, cache))


def vectorized(case, arrays):
    return run(ops, case, arrays)


def loops(case, arrays):
    return run(reference, case, arrays)


def _measured_bounds(case, arrays, dy):
    """[(terms, scale)] of the output and each gradient, measured on the case (see
    ``tolerances.condition_bounds``); None where an input is absent."""
    wide = [np.array(a, np.float64) if isinstance(a, np.ndarray) and a.dtype.kind == "f"
            else a for a in arrays]
    dy = np.asarray(dy, np.float64)

    def outputs():
        y, _, grads = run(ops, case, wide, dy)
        return {"y": y, **{str(i): g for i, g in enumerate(grads)}}

    perturbed = [a for a in wide if isinstance(a, np.ndarray) and a.dtype.kind == "f"]
    bounds = condition_bounds(outputs, perturbed)
    return [bounds["y"]] + [bounds.get(str(i)) for i in range(len(case.differentiable))]


def assert_results_close(case, arrays, dy, ours, reference, dtype, what):
    """Check ``ours = (y, grads)`` against a ``reference`` (y, grads) of the same case,
    each within the rounding tolerance of ``dtype`` for its terms and their size."""
    if case.op.startswith(WINDOWED):
        bounds = op_bounds(case.op, arrays, dy, case.kwargs)
    else:
        bounds = _measured_bounds(case, arrays, dy)
    assert len(ours[1]) == len(reference[1]) == len(bounds) - 1, f"{what}: gradient count"
    names = ["y", *(f"d{name}" for name in case.names)]
    pairs = zip(names, bounds, [ours[0], *ours[1]], [reference[0], *reference[1]])
    for name, bound, a, b in pairs:
        if bound is None:
            assert a is None and b is None, f"{case.op}: {name} for an absent input"
            continue
        terms, scale = bound
        assert_within(a, b, dtype=dtype, terms=terms, scale=scale, what=f"{what}: {name}")


def finite_difference(case, arrays, index, dy):
    """Central differences of L = <op(arrays), dy> with respect to arrays[index] and
    their measured error (``numeric_gradient(..., with_error=True)``)."""
    fn = getattr(ops, case.op)
    base = [a.copy() if isinstance(a, np.ndarray) else a for a in arrays]
    return numeric_gradient(lambda: np.sum(fn(*base, **case.kwargs)[0] * dy), base[index],
                            with_error=True)
