"""The pure-NumPy depthwise kernels: with unit strides one einsum over a sliding-window
view per pass, else block by block (whole images, or rows of one image); every tiling
and both formulations must give the loop reference's forward and gradients. So must the
compiled kernels (tap by tap over the columns whose tap is inside the input)."""

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import _blocks
from handgrad.ops import reference as ref
from handgrad.ops._engine import dispatch as engine
from handgrad.testing import assert_close

# (op, x shape, w shape, kwargs): strides, dilations, uneven and cropping padding,
# channel multipliers, and the transposed convolutions that reuse the same kernels.
CASES = [
    ("conv2d", (3, 7, 6, 2), (3, 2, 1, 4),
     {"groups": 2, "stride": (2, 1), "dilation": (1, 2), "padding": ((1, 0), (2, 1))}),
    ("conv2d", (2, 9, 5, 3), (3, 3, 1, 3), {"groups": 3, "stride": 2}),
    ("conv1d", (3, 11, 2), (4, 1, 6), {"groups": 2, "padding": 3, "dilation": 2}),
    ("conv3d", (2, 4, 5, 3, 2), (2, 3, 2, 1, 2), {"groups": 2, "padding": 1}),
    ("conv_transpose2d", (2, 5, 4, 6), (3, 3, 1, 6),
     {"groups": 3, "stride": 2, "padding": 1, "output_padding": 1}),
    # unit strides: the einsum formulation, with cropping and over-wide padding
    ("conv2d", (2, 6, 7, 3), (3, 2, 1, 6), {"groups": 3, "padding": ((0, 3), (1, 0))}),
    ("conv2d", (2, 5, 5, 2), (2, 2, 1, 2), {"groups": 2, "padding": 3}),
    ("conv_transpose2d", (2, 5, 4, 6), (3, 3, 1, 6),
     {"groups": 3, "padding": 1, "dilation": 2, "output_padding": 1}),
]


# The compiled kernels (1-D and 2-D): also windows wider than the input, taps whose
# columns all fall outside it, and strides that skip past the padding.
COMPILED_CASES = [c for c in CASES if c[0] != "conv3d"] + [
    ("conv2d", (2, 3, 2, 4), (3, 3, 1, 4), {"groups": 4, "stride": 2, "dilation": 2,
                                            "padding": 2}),
    ("conv2d", (2, 8, 9, 4), (5, 3, 1, 4), {"groups": 4, "stride": (3, 2),
                                            "padding": ((0, 4), (3, 1))}),
    ("conv1d", (2, 10, 3), (3, 1, 3), {"groups": 3, "stride": 3, "padding": 4}),
]


@pytest.mark.parametrize("block_bytes", [1, 200, 1 << 19])
@pytest.mark.parametrize("op, x_shape, w_shape, kwargs", CASES)
def test_blocked_depthwise_matches_the_loops(monkeypatch, block_bytes, op, x_shape, w_shape,
                                             kwargs):
    monkeypatch.setattr(_blocks, "BLOCK_BYTES", block_bytes)
    _check_against_the_loops(op, x_shape, w_shape, kwargs, compiled=False)


@pytest.mark.skipif(not engine.available(), reason="numba is not installed")
@pytest.mark.parametrize("op, x_shape, w_shape, kwargs", COMPILED_CASES)
def test_compiled_depthwise_matches_the_loops(op, x_shape, w_shape, kwargs):
    _check_against_the_loops(op, x_shape, w_shape, kwargs, compiled=True)


def _check_against_the_loops(op, x_shape, w_shape, kwargs, compiled):
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    b = rng.standard_normal(w_shape[-2] * kwargs["groups"] if "transpose" in op
                            else w_shape[-1])
    with engine.use_compiled(compiled):
        y, cache = getattr(ops, op)(x, w, b, **kwargs)
        dy = rng.standard_normal(y.shape)
        grads = getattr(ops, op + "_backward")(dy, cache)
    y_ref, cache_ref = getattr(ref, op)(x, w, b, **kwargs)
    grads_ref = getattr(ref, op + "_backward")(dy, cache_ref)
    terms = int(np.prod(w_shape[:-2])) * max(w_shape[-2], w_shape[-1])
    assert_close(y, y_ref, terms=terms, what="y")
    for name, got, want in zip(("dx", "dw", "db"), grads, grads_ref):
        assert_close(got, want, terms=terms * int(np.prod(y.shape[:-1])), what=name)


@pytest.mark.parametrize("op, x_shape, w_shape, kwargs", [CASES[3], CASES[5]])
def test_unit_strides_take_the_einsum_formulation(monkeypatch, op, x_shape, w_shape, kwargs):
    """With unit strides and padding within the kernel's reach, neither pass of the
    NumPy path falls back to the tap-by-tap blocks."""
    from handgrad.ops import _depthwise

    def refuse(*args, **kwargs):
        raise AssertionError("the blocked tap loop ran")

    monkeypatch.setattr(_depthwise, "_gradient_passes", refuse)
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    with engine.use_compiled(False):
        y, cache = getattr(ops, op)(x, w, **kwargs)
        dx, dw, _ = getattr(ops, op + "_backward")(np.ones_like(y), cache)
    assert dx.shape == x.shape and dw.shape == w.shape
