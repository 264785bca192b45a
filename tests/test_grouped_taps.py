"""Narrow convolutions' loops with their sums in registers (ops/_engine/grouped_taps.py):
the forward, dx (unit strides: the correlation of dy with the flipped kernel) and dw
against the NumPy path's im2col + GEMM, on the geometries a convolution takes: blocks
of eight pixels and their tails, strides, dilation, padding after > before, 1-D maps,
group widths that the weight-gradient loop leaves to the GEMM, an empty batch, dense
convolutions of few channels (one group), transposed convolutions (whose forward is
dx), and 3-D convolutions (the 2-D loops summed over the depth taps)."""

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops._args.windows import WindowAxis
from handgrad.ops._engine import dispatch, grouped_conv, grouped_taps
from handgrad.testing import assert_close

pytestmark = pytest.mark.skipif(not dispatch.available(), reason="numba is not installed")

GEOMETRIES = [  # x shape, weight shape (*K, Cg, C_y), conv keywords
    ((2, 10, 13, 32), (3, 3, 8, 32), {"padding": 1, "groups": 4}),  # tails of 5 pixels
    ((3, 9, 16, 16), (3, 3, 8, 16), {"padding": 2, "dilation": 2, "groups": 2}),
    ((2, 11, 12, 32), (3, 3, 16, 16), {"padding": 1, "stride": (1, 2), "groups": 2}),
    ((2, 8, 7, 24), (3, 3, 4, 48), {"padding": "same", "groups": 6}),  # width 4: dw by GEMM
    ((2, 7, 9, 16), (1, 3, 8, 16), {"padding": 0, "groups": 2}),
    ((0, 6, 6, 16), (3, 3, 8, 16), {"padding": 1, "groups": 2}),  # an empty batch
    ((2, 9, 13, 16), (3, 3, 16, 16), {"padding": 2, "dilation": 2, "groups": 1}),  # dense
    ((2, 8, 10, 8), (3, 3, 8, 32), {"padding": 1, "groups": 1}),  # float64 dx by GEMM
    ((3, 12, 11, 1), (5, 5, 1, 16), {"stride": 2, "groups": 1}),  # one channel: y alone
]


def _both_paths(x, w, b, dy_seed, conv, kwargs):
    """(y, dx, dw) of ``conv`` on the compiled path, then on the NumPy path."""
    out = []
    for compiled in (True, False):
        with dispatch.use_compiled(compiled):
            y, cache = getattr(ops, conv)(x, w, b, **kwargs)
            dy = np.random.default_rng(dy_seed).standard_normal(y.shape).astype(x.dtype)
            dx, dw, _ = getattr(ops, f"{conv}_backward")(dy, cache)
        out.append((y, dx, dw))
    return out


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", GEOMETRIES)
def test_the_register_loops_match_the_gemm(x_shape, w_shape, kwargs, dtype):
    rng = np.random.default_rng(sum(x_shape))
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[-1]).astype(dtype)
    groups, taps = kwargs["groups"], int(np.prod(w_shape[:-2]))
    assert grouped_taps.takes(w_shape, groups)
    (y, dx, dw), (y_ref, dx_ref, dw_ref) = _both_paths(x, w, b, 1, "conv2d", kwargs)
    assert_close(y, y_ref, terms=taps * w_shape[-2] + 1, what="y")  # taps x Cg, and b
    assert_close(dx, dx_ref, terms=taps * w_shape[-1] // groups, what="dx")  # taps x Og
    assert_close(dw, dw_ref, terms=max(int(np.prod(y.shape[:-1])), 1), what="dw")  # N x O


def test_1d_maps_are_one_row():
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((3, 21, 32)), rng.standard_normal((3, 8, 32))
    (y, dx, dw), (y_ref, dx_ref, dw_ref) = _both_paths(x, w, None, 2, "conv1d",
                                                     {"padding": 1, "groups": 4})
    assert_close(y, y_ref, terms=24, what="y")
    assert_close(dx, dx_ref, terms=24, what="dx")
    assert_close(dw, dw_ref, terms=3 * 21, what="dw")


@pytest.mark.parametrize("stride", [1, 2])
def test_transposed_convolutions_take_them_too(stride):
    """A grouped transposed convolution's forward is the convolution's dx (the register
    loop at unit strides) and its backward the convolution's forward and dw."""
    rng = np.random.default_rng(stride)
    x = rng.standard_normal((2, 7, 9, 16))
    w = rng.standard_normal((3, 3, 8, 16))  # (*K, C_out / groups, C_in): 2 groups of 8
    kwargs = {"stride": stride, "padding": 1, "groups": 2}
    (y, dx, dw), (y_ref, dx_ref, dw_ref) = _both_paths(x, w, None, 4, "conv_transpose2d",
                                                     kwargs)
    assert_close(y, y_ref, terms=72, what="y")
    assert_close(dx, dx_ref, terms=72, what="dx")
    assert_close(dw, dw_ref, terms=2 * 7 * 9, what="dw")


def _count_loop_calls(monkeypatch):
    calls = []
    for name in ("forward", "weight_grad"):
        original = getattr(grouped_conv, name)
        monkeypatch.setattr(grouped_conv, name, lambda *a, _f=original, _n=name: (
            calls.append(_n), _f(*a))[1])
    return calls


def test_the_register_loops_are_the_ones_that_ran(monkeypatch):
    calls = _count_loop_calls(monkeypatch)
    x, w = np.ones((2, 9, 9, 32)), np.ones((3, 3, 8, 32))
    with dispatch.use_compiled(True):
        y, cache = ops.conv2d(x, w, None, padding=1, groups=4)
        ops.conv2d_backward(np.ones_like(y), cache)
    assert calls == ["forward", "forward", "weight_grad"]  # y, dx, dw


def test_which_convolutions_the_loops_take():
    assert grouped_taps.takes((3, 3, 8, 32), 4)
    assert grouped_taps.takes_weight_grad((3, 3, 8, 32), 4)
    assert not grouped_taps.takes_weight_grad((3, 3, 4, 48), 6)  # width 4: GEMM dw
    assert not grouped_taps.takes((3, 3, 8, 12), 4)  # 3 outputs per group
    assert not grouped_taps.takes((3, 3, 1, 32), 32)  # depthwise: its own loops
    assert grouped_taps.takes((3, 3, 16, 16), 1)  # dense and narrow: one group
    assert grouped_taps.takes((5, 3, 2, 32), 1)
    assert not grouped_taps.takes((3, 3, 16, 48), 1)  # dense, many outputs: the GEMM
    assert not grouped_taps.takes((3, 3, 32, 32), 1)  # dense and wide: the GEMM
    assert grouped_taps.takes((5, 5, 1, 16), 1)  # one input channel (dx, dw: the GEMM)
    assert not grouped_taps.takes_weight_grad((5, 5, 1, 16), 1)
    assert not grouped_taps.takes((3, 3, 32, 64), 2)  # groups wider than 16
    assert not grouped_taps.takes((7, 7, 8, 32), 4)  # 49 taps
    assert grouped_taps.takes((3, 3, 3, 16, 16), 1)  # 3-D: 9 taps per plane
    assert not grouped_taps.takes((1, 7, 7, 8, 32), 4)


GEOMETRIES_3D = [  # x shape, weight shape (*K, Cg, C_y), conv3d keywords
    ((2, 6, 7, 9, 16), (3, 3, 3, 16, 16), {"padding": 1, "groups": 1}),
    ((2, 5, 7, 10, 16), (3, 3, 3, 8, 16), {"padding": (2, 1, 0), "dilation": (2, 1, 1),
                                            "groups": 2}),  # depth taps reading no plane
    ((3, 4, 7, 9, 8), (2, 3, 3, 8, 8), {"padding": 0, "stride": (1, 2, 1), "groups": 1}),
    ((1, 3, 6, 6, 16), (5, 1, 3, 8, 16), {"padding": (4, 0, 1), "groups": 2}),
]


@pytest.mark.parametrize("x_shape, w_shape, kwargs", GEOMETRIES_3D)
def test_3d_convolutions_sum_the_loops_over_the_depth_taps(x_shape, w_shape, kwargs):
    rng = np.random.default_rng(sum(x_shape))
    x, w = rng.standard_normal(x_shape), rng.standard_normal(w_shape)
    b = rng.standard_normal(w_shape[-1])
    (y, dx, dw), (y_ref, dx_ref, dw_ref) = _both_paths(x, w, b, 5, "conv3d", kwargs)
    taps = int(np.prod(w_shape[:-2]))
    assert_close(y, y_ref, terms=taps * w_shape[-2] + 1, what="y")
    assert_close(dx, dx_ref, terms=taps * w_shape[-1] // kwargs["groups"], what="dx")
    assert_close(dw, dw_ref, terms=max(int(np.prod(y.shape[:-1])), 1), what="dw")


def test_3d_convolutions_run_the_loops_with_unit_depth_strides_only(monkeypatch):
    calls = _count_loop_calls(monkeypatch)
    x, w = np.ones((2, 5, 6, 6, 16)), np.ones((3, 3, 3, 16, 16))
    with dispatch.use_compiled(True):
        y, cache = ops.conv3d(x, w, None, padding=1)
        ops.conv3d_backward(np.ones_like(y), cache)
        assert calls == ["forward", "forward", "weight_grad"]  # y, dx, dw
        y, cache = ops.conv3d(x, w, None, padding=1, stride=(2, 1, 1))
        ops.conv3d_backward(np.ones_like(y), cache)
    assert calls == ["forward", "forward", "weight_grad"]  # the GEMM took the strided one


def test_depth_slabs_pair_the_planes_each_tap_reads():
    depth = WindowAxis(size_in=5, kernel=3, stride=1, dilation=2, pad_before=2, size_out=5)
    assert grouped_conv.depth_slabs(depth) == [
        (0, slice(0, 3), slice(2, 5)),  # output plane o reads input plane o - 2
        (1, slice(0, 5), slice(0, 5)),
        (2, slice(2, 5), slice(0, 3))]
    beyond = WindowAxis(size_in=2, kernel=5, stride=1, dilation=1, pad_before=4, size_out=2)
    assert [kd for kd, _, _ in grouped_conv.depth_slabs(beyond)] == [3, 4]


def test_dense_backward_builds_no_transposed_weight(monkeypatch):
    """The dx test looks at the weight's shape first: the backward of a convolution too
    wide for the loops never flips its weight for them."""
    monkeypatch.setattr(grouped_taps, "transposed_weight", None)  # would raise if called
    x, w = np.ones((2, 6, 6, 32)), np.ones((3, 3, 32, 32))
    with dispatch.use_compiled(True):
        y, cache = ops.conv2d(x, w, None, padding=1)
        dx, _, _ = ops.conv2d_backward(np.ones_like(y), cache)
    assert dx.shape == x.shape


def test_the_transposed_weight_flips_and_swaps_each_group():
    w = np.arange(2 * 3 * 4 * 6.0).reshape(2, 3, 4, 6)  # 2 groups: Cg 4, Og 3
    w_t = grouped_taps.transposed_weight(w, 2)
    assert w_t.shape == grouped_taps.transposed_shape(w.shape, 2) == (2, 3, 3, 8)
    for kh, kw, j, g, c in np.ndindex(2, 3, 3, 2, 4):
        assert w_t[kh, kw, j, g * 4 + c] == w[1 - kh, 2 - kw, c, g * 3 + j]


@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize("x_shape, w_shape, kwargs", [
    ((2, 9, 13, 16), (3, 3, 16, 16), {"padding": 2, "dilation": 2}),  # tails of 1 pixel
    ((2, 8, 10, 8), (3, 3, 8, 32), {"padding": 1, "stride": (1, 2)}),  # two blocks of 16
    ((2, 6, 7, 32), (3, 3, 16, 32), {"padding": 1, "groups": 2}),
])
def test_the_wide_float32_loop_gives_the_eight_lane_bits(x_shape, w_shape, kwargs,
                                                        accumulate):
    """Four pixels by 16 channels add the same products in the same order as eight by
    eight (from the bias, or from y's sums so far for a 3-D convolution's planes)."""
    rng = np.random.default_rng(sum(x_shape))
    x = rng.standard_normal(x_shape).astype(np.float32)
    w, b = rng.standard_normal(w_shape).astype(np.float32), np.ones(w_shape[-1], np.float32)
    groups = kwargs.get("groups", 1)
    assert grouped_taps.takes_wide(x.dtype, w_shape[-1] // groups)
    _, call = ops.conv2d(x, w, b, **kwargs)
    g = dispatch.geometry_2d(call.axes)
    taps = np.ascontiguousarray(w.reshape(-1, w_shape[-1]))
    start = rng.standard_normal((x_shape[0], *(a.size_out for a in call.axes), w_shape[-1]))
    outs = []
    for wide in (True, False):
        y, pad = start.astype(np.float32), np.zeros(dispatch.padded_image(call.axes, x_shape[-1]),
                                                    np.float32)
        grouped_taps.grouped_kernel(*w_shape[:2], w_shape[-2], accumulate, wide)(x, taps, g, b,
                                                                                y, pad)
        outs.append(y)
    np.testing.assert_array_equal(*outs)


def test_float32_takes_the_wide_loop_where_the_outputs_per_group_allow():
    assert grouped_taps.takes_wide(np.dtype(np.float32), 16)
    assert grouped_taps.takes_wide(np.dtype(np.float32), 32)
    assert not grouped_taps.takes_wide(np.dtype(np.float32), 8)
    assert not grouped_taps.takes_wide(np.dtype(np.float64), 16)
