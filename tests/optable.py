"""The op case table (after PyTorch's OpInfo) and the helpers that run a case
through handgrad, its loop twin, finite differences and torch."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from handgrad import ops
from handgrad.ops import reference
from handgrad.testing import assert_close as assert_within
from handgrad.testing import numeric_gradient

from tolerances import op_bounds


@dataclass
class OpCase:
    """One sample input of an op: array shapes (in argument order) and keywords."""

    op: str
    shapes: tuple
    kwargs: dict = field(default_factory=dict)
    ties: bool = False  # small-integer inputs, so max windows tie
    negative: bool = False  # all inputs < 0 (the padding must never win a max)

    @property
    def id(self):
        words = [f"{k}={v}" for k, v in self.kwargs.items()]
        shapes = "x".join(str(s) for s in self.shapes[0])
        return "-".join([self.op, shapes, *words]).replace(" ", "")

    @property
    def family(self):
        if self.op.startswith("conv_transpose"):
            return "conv_transpose"
        if self.op.startswith("conv"):
            return "conv"
        if self.op.startswith("global"):
            return "global"
        return "pool"

    def inputs(self, dtype=np.float64, seed=0):
        rng = np.random.default_rng(seed)
        arrays = []
        for i, shape in enumerate(self.shapes):
            if shape is None:
                arrays.append(None)
            elif i == 0 and self.ties:
                arrays.append(rng.integers(-2, 3, shape).astype(dtype))
            elif i == 0 and self.negative:
                arrays.append((-1.0 - rng.random(shape)).astype(dtype))
            else:
                arrays.append(rng.standard_normal(shape).astype(dtype))
        return arrays


def run(module, case, arrays, dy_seed=1):
    """Forward then backward with a random upstream gradient; returns (y, dy, grads)."""
    y, cache = getattr(module, case.op)(*arrays, **case.kwargs)
    dy = np.random.default_rng(dy_seed).standard_normal(y.shape).astype(y.dtype)
    grads = getattr(module, case.op + "_backward")(dy, cache)
    if not isinstance(grads, tuple):
        grads = (grads,)
    return y, dy, grads


def vectorized(case, arrays):
    return run(ops, case, arrays)


def loops(case, arrays):
    return run(reference, case, arrays)


def assert_results_close(case, arrays, dy, ours, reference, dtype, what):
    """Check ``ours = (y, grads)`` against a ``reference`` (y, grads) of the same case,
    each within the rounding tolerance of ``dtype`` for its terms and their size."""
    bounds = op_bounds(case.op, arrays, dy, case.kwargs)
    assert len(ours[1]) == len(reference[1]) == len(bounds) - 1, f"{what}: gradient count"
    names = ["y", "dx", "dw", "db"]
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
    base = [a.copy() if a is not None else None for a in arrays]
    return numeric_gradient(lambda: np.sum(fn(*base, **case.kwargs)[0] * dy), base[index],
                            with_error=True)


CASES = [
    # conv2d: x (N, H, W, C), w (KH, KW, C // groups, C_out), b
    OpCase("conv2d", ((2, 6, 7, 3), (3, 3, 3, 4), (4,)), {"padding": 1}),
    OpCase("conv2d", ((2, 7, 8, 2), (3, 3, 2, 3), (3,)), {"stride": 2, "padding": "same"}),
    OpCase("conv2d", ((2, 8, 7, 2), (3, 2, 2, 3), (3,)), {"stride": 3, "padding": "same"}),
    OpCase("conv2d", ((2, 8, 8, 2), (3, 3, 2, 2), (2,)), {"dilation": 2, "padding": (2, 1)}),
    OpCase("conv2d", ((2, 6, 6, 4), (2, 3, 2, 6), (6,)),
           {"groups": 2, "padding": ((1, 0), (0, 2)), "stride": (1, 2)}),
    OpCase("conv2d", ((2, 6, 6, 3), (3, 3, 1, 6), (6,)), {"groups": 3, "padding": 1}),
    OpCase("conv2d", ((2, 5, 4, 2), (7, 6, 2, 3), (3,)), {"padding": 1}),  # kernel = padded input
    OpCase("conv2d", ((1, 5, 5, 2), (3, 3, 2, 2), None), {"padding": "valid"}),  # batch 1, no bias
    OpCase("conv2d", ((2, 9, 9, 2), (3, 3, 2, 2), (2,)),
           {"stride": 2, "dilation": 2, "padding": "same"}),
    # conv1d: x (N, L, C), w (K, C // groups, C_out)
    OpCase("conv1d", ((2, 9, 3), (3, 3, 4), (4,)), {"padding": 1}),
    OpCase("conv1d", ((2, 10, 2), (4, 2, 3), (3,)), {"stride": 2, "padding": "same"}),
    OpCase("conv1d", ((2, 9, 2), (3, 2, 2), (2,)), {"dilation": 2, "padding": "causal"}),
    OpCase("conv1d", ((2, 8, 4), (3, 2, 4), (4,)), {"groups": 2, "padding": ((2, 0),)}),
    OpCase("conv1d", ((1, 7, 3), (5, 1, 3), None), {"groups": 3, "stride": 3}),
    OpCase("conv1d", ((2, 4, 2), (6, 2, 2), (2,)), {"padding": 1}),  # 1-wide output
    # conv_transpose2d: x (N, H, W, C_in), w (KH, KW, C_out // groups, C_in)
    OpCase("conv_transpose2d", ((2, 4, 5, 3), (4, 4, 2, 3), (2,)),
           {"stride": 2, "padding": 1}),
    OpCase("conv_transpose2d", ((2, 4, 4, 2), (3, 3, 3, 2), (3,)),
           {"stride": 2, "padding": 1, "output_padding": 1}),
    OpCase("conv_transpose2d", ((2, 4, 4, 2), (3, 3, 2, 2), (2,)),
           {"dilation": 2, "output_padding": 1, "padding": 1}),
    OpCase("conv_transpose2d", ((2, 3, 4, 4), (3, 2, 3, 4), (6,)),
           {"groups": 2, "stride": (3, 2), "output_padding": (2, 1)}),
    OpCase("conv_transpose2d", ((1, 3, 3, 2), (3, 3, 2, 2), None),
           {"stride": 2, "padding": ((1, 0), (0, 2))}),
    OpCase("conv_transpose2d", ((2, 3, 3, 4), (3, 3, 1, 4), (4,)),
           {"groups": 4, "stride": 2, "dilation": 2, "output_padding": 1}),
    # conv_transpose1d
    OpCase("conv_transpose1d", ((2, 5, 3), (4, 2, 3), (2,)), {"stride": 2, "padding": 1}),
    OpCase("conv_transpose1d", ((2, 5, 2), (3, 2, 2), (2,)),
           {"stride": 3, "dilation": 2, "output_padding": 2, "padding": 2}),
    OpCase("conv_transpose1d", ((1, 4, 4), (3, 1, 4), None), {"groups": 2, "padding": ((0, 2),)}),
    # max_pool2d
    OpCase("max_pool2d", ((2, 6, 6, 3),), {"kernel_size": 2}),
    OpCase("max_pool2d", ((2, 7, 7, 2),), {"kernel_size": 3, "stride": 2, "padding": 1},
           negative=True),
    OpCase("max_pool2d", ((2, 6, 7, 2),), {"kernel_size": 3, "stride": 2, "ceil_mode": True}),
    OpCase("max_pool2d", ((2, 7, 8, 2),),
           {"kernel_size": (2, 3), "stride": (1, 2), "padding": 1, "dilation": (2, 1),
            "ceil_mode": True}, negative=True),
    OpCase("max_pool2d", ((2, 6, 6, 3),), {"kernel_size": 2}, ties=True),
    OpCase("max_pool2d", ((2, 7, 7, 3),), {"kernel_size": 3, "stride": 1, "padding": 1},
           ties=True),
    OpCase("max_pool2d", ((1, 4, 5, 2),), {"kernel_size": (6, 7), "padding": 1},
           negative=True),  # kernel as large as the padded input
    OpCase("max_pool2d", ((2, 5, 6, 2),), {"kernel_size": 3, "stride": 2, "padding": "same"},
           negative=True),
    # max_pool1d
    OpCase("max_pool1d", ((2, 9, 3),), {"kernel_size": 2}),
    OpCase("max_pool1d", ((2, 9, 2),), {"kernel_size": 3, "stride": 2, "padding": 1,
                                        "ceil_mode": True}, negative=True),
    OpCase("max_pool1d", ((2, 10, 2),), {"kernel_size": 3, "dilation": 2, "padding": 1},
           ties=True),
    # avg_pool2d
    OpCase("avg_pool2d", ((2, 6, 6, 3),), {"kernel_size": 2}),
    OpCase("avg_pool2d", ((2, 7, 7, 2),), {"kernel_size": 3, "stride": 2, "padding": 1}),
    OpCase("avg_pool2d", ((2, 7, 6, 2),), {"kernel_size": 3, "stride": 2, "padding": 1,
                                           "ceil_mode": True, "count_include_pad": False}),
    OpCase("avg_pool2d", ((2, 6, 7, 2),), {"kernel_size": (2, 3), "stride": (2, 1),
                                           "padding": (1, 1), "ceil_mode": True}),
    OpCase("avg_pool2d", ((1, 5, 5, 2),), {"kernel_size": 3, "stride": 2, "padding": 1,
                                           "divisor_override": 4}),
    OpCase("avg_pool2d", ((1, 3, 4, 2),), {"kernel_size": (5, 6), "padding": (1, 1)},
           negative=True),
    # avg_pool1d
    OpCase("avg_pool1d", ((2, 9, 3),), {"kernel_size": 3}),
    OpCase("avg_pool1d", ((2, 9, 2),), {"kernel_size": 4, "stride": 3, "padding": 2,
                                        "ceil_mode": True, "count_include_pad": False}),
    OpCase("avg_pool1d", ((2, 8, 2),), {"kernel_size": 3, "stride": 2, "padding": 1,
                                        "ceil_mode": True}),
    # global pools
    OpCase("global_avg_pool", ((2, 5, 6, 3),)),
    OpCase("global_avg_pool", ((2, 7, 3),), {"keepdims": True}),
    OpCase("global_max_pool", ((2, 5, 6, 3),)),
    OpCase("global_max_pool", ((2, 7, 3),), {"keepdims": True}, ties=True),
]
