"""float32 3x3 convolutions with unit strides by Winograd's F(2x2, 3x3)
(ops/_engine/winograd_taps.py): the forward and dx (the correlation of dy with the flipped
kernel) against the NumPy path, on tile grids that the output does not fill (odd sizes,
dilations that interleave the tiles), padding on one side only, narrow and wide output
blocks, 3-D convolutions (its depth taps accumulate), transposed convolutions, one and two
threads; which convolutions it takes; its rounding against float64."""

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import _block_threads
from handgrad.ops._engine import dispatch, winograd_taps
from handgrad.testing import assert_close

pytestmark = pytest.mark.skipif(not dispatch.available(), reason="numba is not installed")

GEOMETRIES = [  # x shape, weight shape (*K, C_in, C_out), conv keywords
    ((2, 9, 11, 16), (3, 3, 16, 16), {"padding": 1}),  # odd output: tiles cut at both edges
    ((2, 10, 7, 8), (3, 3, 8, 16), {"padding": 2, "dilation": 2}),
    ((1, 13, 9, 24), (3, 3, 24, 8), {"padding": (2, 1), "dilation": (1, 3)}),  # narrow outputs
    ((3, 12, 12, 16), (3, 3, 16, 32), {"padding": 0}),  # wide outputs, dx of 32 inputs
    ((2, 8, 6, 8), (3, 3, 8, 24), {"padding": "same", "dilation": 2}),
    ((3, 1, 1, 8), (3, 3, 8, 8), {"padding": 1}),  # one output: one tile, three unstored
    ((0, 6, 6, 16), (3, 3, 16, 16), {"padding": 1}),  # an empty batch
    ((2, 3, 4, 16), (3, 3, 16, 16), {"padding": 0}),  # the 1 x 2 output
]


@pytest.fixture
def loop_runs(monkeypatch):
    """What each call of the loop reported (True: every value it stored is finite)."""
    runs = []
    run = winograd_taps.run

    def spy(*args):
        runs.append(run(*args))
        return runs[-1]

    monkeypatch.setattr(winograd_taps, "run", spy)
    return runs


def _both_paths(conv, x, w, b, kwargs, loop_runs):
    """(y, dx, dw) on the compiled path, where the forward and dx run the loop, then on
    the NumPy path (im2col + GEMM)."""
    out = []
    for compiled in (True, False):
        with dispatch.use_compiled(compiled):
            y, cache = getattr(ops, conv)(x, w, b, **kwargs)
            dy = np.random.default_rng(7).standard_normal(y.shape).astype(x.dtype)
            dx, dw, _ = getattr(ops, f"{conv}_backward")(dy, cache)
        out.append((y, dx, dw))
    assert loop_runs == [True, True]  # the forward, then dx
    return out


def _inputs(x_shape, w_shape, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(x_shape).astype(np.float32),
            rng.standard_normal(w_shape).astype(np.float32),
            rng.standard_normal(w_shape[-1]).astype(np.float32))


@pytest.mark.parametrize("x_shape, w_shape, kwargs", GEOMETRIES)
def test_the_tiles_match_the_gemm(x_shape, w_shape, kwargs, loop_runs):
    x, w, b = _inputs(x_shape, w_shape, sum(x_shape))
    taps = 9 * (len(w_shape) - 3)
    (y, dx, dw), (y_ref, dx_ref, dw_ref) = _both_paths(f"conv{len(x_shape) - 2}d", x, w, b,
                                                     kwargs, loop_runs)
    assert_close(y, y_ref, terms=taps * w_shape[-2] + 1, what="y")  # taps x C_in, and b
    assert_close(dx, dx_ref, terms=taps * w_shape[-1], what="dx")  # taps x C_out
    assert_close(dw, dw_ref, terms=max(int(np.prod(y.shape[:-1])), 1), what="dw")


def test_3d_convolutions_sum_the_depth_taps(loop_runs):
    x, w, b = _inputs((2, 7, 6, 5, 16), (3, 3, 3, 16, 16), 3)
    (y, dx, _), (y_ref, dx_ref, _) = _both_paths("conv3d", x, w, b, {"padding": 1},
                                                 loop_runs)
    assert_close(y, y_ref, terms=27 * 16 + 1, what="y")
    assert_close(dx, dx_ref, terms=27 * 16, what="dx")


def test_a_transposed_convolution_takes_them_for_its_forward(loop_runs):
    x, w, _ = _inputs((2, 7, 9, 16), (3, 3, 8, 16), 4)  # (*K, C_out, C_in)
    (y, dx, _), (y_ref, dx_ref, _) = _both_paths("conv_transpose2d", x, w, None,
                                                 {"padding": 1}, loop_runs)
    assert_close(y, y_ref, terms=9 * 16, what="y")
    assert_close(dx, dx_ref, terms=9 * 8, what="dx")


def test_two_threads_give_the_same_bits(monkeypatch, loop_runs):
    """Each image's tiles are summed in the same order whichever thread takes it."""
    x, w, b = _inputs((6, 9, 10, 16), (3, 3, 16, 16), 5)
    monkeypatch.setattr(_block_threads, "MIN_HALF_BYTES", 0)
    results = []
    for threads in (1, 2):
        monkeypatch.setattr(_block_threads, "THREADS", threads)
        y, cache = ops.conv2d(x, w, b, padding=1, dilation=2)
        results.append((y, ops.conv2d_backward(np.cos(y), cache)[0]))
    assert loop_runs == [True] * 2 + [True] * 4  # one thread: y, dx; two: both in halves
    for one, two in zip(*results):
        np.testing.assert_array_equal(one, two)


@pytest.mark.parametrize("w_shape, groups, kwargs, dtype, taken", [
    ((3, 3, 16, 16), 1, {}, np.float32, True),
    ((3, 3, 16, 16), 1, {}, np.float64, False),  # float64 keeps the direct sums
    ((3, 3, 16, 16), 1, {"stride": 2}, np.float32, False),
    ((5, 5, 16, 16), 1, {}, np.float32, False),
    ((3, 3, 8, 16), 2, {}, np.float32, False),  # groups
    ((3, 3, 4, 16), 1, {}, np.float32, False),  # input channels not a multiple of 8
    ((3, 3, 16, 40), 1, {}, np.float32, False),  # past MAX_CHANNELS
    ((3, 16, 16), 1, {}, np.float32, False),  # 1-D
])
def test_which_convolutions_it_takes(w_shape, groups, kwargs, dtype, taken):
    x = np.zeros((1, *(8,) * (len(w_shape) - 2), w_shape[-2] * groups), dtype)
    _, cache = getattr(ops, f"conv{len(w_shape) - 2}d")(x, np.zeros(w_shape, dtype),
                                                       groups=groups, **kwargs)
    assert winograd_taps.takes(w_shape, groups, cache.axes, dtype) is taken


def test_its_rounding_is_within_the_direct_sums_bound(loop_runs):
    """Against float64: each output is 16 sums of C_in products combined by the transforms;
    the error stays within the bound of the direct sum of 9 * C_in products."""
    x, w, b = _inputs((4, 16, 16, 32), (3, 3, 32, 32), 6)
    y, _ = ops.conv2d(x, w, b, padding=1)
    exact, _ = ops.conv2d(x.astype(np.float64), w.astype(np.float64), b.astype(np.float64),
                          padding=1)
    assert loop_runs == [True]
    assert_close(y, exact, dtype=np.float32, terms=9 * 32 + 1, what="y")


@pytest.mark.parametrize("w_shape", [(3, 3, 16, 16), (3, 3, 32, 16)])
def test_an_inf_gives_the_direct_sums(w_shape, loop_runs):
    """An inf read by a tile turns into NaN through the transforms' differences; the
    convolution then takes the direct sums (the register loop, or im2col + GEMM where it
    does not take 32 inputs), which give inf where an output reads it."""
    x, w, b = _inputs((2, 9, 8, w_shape[-2]), w_shape, 8)
    x[1, 4, 3, 2] = np.inf
    outputs = []
    for compiled in (True, False):
        with dispatch.use_compiled(compiled):
            outputs.append(ops.conv2d(x, w, b, padding=1)[0])
    y, y_ref = outputs
    assert loop_runs == [False]  # the loop ran, saw the NaN, and the direct sums redid it
    np.testing.assert_array_equal(np.isposinf(y), np.isposinf(y_ref))
    np.testing.assert_array_equal(np.isneginf(y), np.isneginf(y_ref))
    assert not np.isnan(y).any() and np.isinf(y).any()
    finite = np.isfinite(y_ref)
    assert_close(y[finite], y_ref[finite], terms=9 * w_shape[-2] + 1, what="y")
