"""The depthwise loops written out per kernel size (ops/_engine/unrolled_taps.py): the
forward is register_taps's bits; the one-pass backward of "same" convolutions gives dx in
the flipped forward's bits and dw as the row loops to rounding, the same dw bits without
dx; which geometries each takes."""

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops._engine import dispatch, register_taps, unrolled_taps
from handgrad.testing import tolerance

pytestmark = pytest.mark.skipif(not dispatch.available(), reason="numba is not installed")

SAME = [  # x shape, kernel, conv keywords: unit strides, output the input's size
    ((3, 9, 10, 8), (3, 3), {"padding": 1}),
    ((2, 11, 9, 13), (3, 3), {"padding": 1}),  # 8 channels in registers, 5 scalar
    ((2, 12, 12, 24), (3, 3), {"padding": 2, "dilation": 2}),
    ((2, 8, 7, 7), (2, 4), {"padding": "same"}),  # padding after > before, no block of 8
    ((2, 6, 6, 17), (1, 1), {}),
    ((3, 1, 20, 16), (1, 3), {"padding": (0, 1)}),  # as a 1-D map is run: one row
]


def _case(x_shape, kernel, kwargs, dtype):
    rng = np.random.default_rng(sum(x_shape) + len(kernel))
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal((*kernel, 1, x_shape[-1])).astype(dtype)
    with dispatch.use_compiled(False):
        y, call = ops.conv2d(x, w, groups=x_shape[-1], **kwargs)
    return x, w, rng.standard_normal(y.shape).astype(dtype), call


def _run(x, w, dy, call, with_dx=True):
    """(dx, rows (T, C)) of the loop on the whole batch."""
    g, channels = dispatch.geometry_2d(call.axes), x.shape[-1]
    flipped = np.ascontiguousarray(w.reshape(-1, channels)[::-1])
    pad = np.zeros(dispatch.padded_image(call.axes, channels), x.dtype)
    rows, dx = np.zeros(flipped.shape, x.dtype), np.zeros_like(x)
    unrolled_taps.backward_kernel(*w.shape[:2], with_dx)(x, flipped, dy, g, dx, rows, pad,
                                                      pad.copy())
    return dx, rows


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_shape, kernel, kwargs", SAME)
def test_dx_is_the_flipped_forward_and_dw_the_row_loops_to_rounding(x_shape, kernel, kwargs,
                                                                    dtype):
    x, w, dy, call = _case(x_shape, kernel, kwargs, dtype)
    assert unrolled_taps.takes(dispatch.geometry_2d(call.axes))
    dx, rows = _run(x, w, dy, call)
    flipped_axes = ops._depthwise.flipped_axes(call.axes)
    with dispatch.use_compiled(True):
        flipped_forward = dispatch.depthwise(dy, w[::-1, ::-1], flipped_axes)
    np.testing.assert_array_equal(dx, flipped_forward)
    with dispatch.use_compiled(False):
        numpy_dw = ops.conv2d_backward(dy, call)[1]
        _, magnitude_call = ops.conv2d(np.abs(x), w, groups=x_shape[-1], **kwargs)
        magnitude = ops.conv2d_backward(np.abs(dy), magnitude_call)[1]  # sum |x| |dy|
    terms = dy.shape[0] * dy.shape[1] * dy.shape[2]
    bound = tolerance(dtype, terms=terms) * magnitude  # per weight: its own sum of |terms|
    assert (np.abs(rows.reshape(w.shape) - numpy_dw) <= bound).all()
    dx_alone, rows_alone = _run(x, w, dy, call, with_dx=False)
    np.testing.assert_array_equal(rows_alone, rows)
    assert not dx_alone.any()  # without dx, dx was not written


def test_nan_and_inf_reach_only_what_reads_them():
    """An inf in x reaches only the taps that read it (of its channel), a NaN in dy every
    tap of its channel and only its window of dx."""
    x, w, dy, call = _case((1, 6, 6, 8), (3, 3), {"padding": 1}, np.float64)
    x[0, 0, 0, 0] = np.inf  # read by the taps (kh, kw) <= (1, 1) of channel 0 only
    dy[0, 5, 5, 1] = np.nan  # dx[.., 4:6, 4:6, 1] reads it
    dx, rows = _run(x, w, dy, call)
    rows = rows.reshape(3, 3, 8)
    assert np.isnan(rows[..., 1]).all() and np.isfinite(rows[..., 2:]).all()
    assert not np.isfinite(rows[:2, :2, 0]).any()
    assert np.isfinite(rows[2, :, 0]).all() and np.isfinite(rows[:, 2, 0]).all()
    bad = ~np.isfinite(dx[0])
    assert bad[4:, 4:, 1].all() and bad.sum() == 4


@pytest.mark.parametrize("kwargs, takes", [
    ({"padding": 1}, True),
    ({"padding": 1, "stride": 2}, False),  # strided: register_taps's rows
    ({"padding": 0}, False),  # the output smaller than the input
    ({"padding": 2}, False),  # larger
    ({"padding": 2, "kernel": (5, 5)}, False),  # over MAX_TAPS (its compile time)
    ({"padding": (0, 4), "kernel": (1, 9)}, True),
])
def test_which_convolutions_it_takes(kwargs, takes):
    kernel = kwargs.pop("kernel", (3, 3))
    _, _, _, call = _case((2, 8, 8, 8), kernel, kwargs, np.float64)
    assert unrolled_taps.takes(dispatch.geometry_2d(call.axes)) is takes


def test_the_op_runs_it_for_a_same_convolution(monkeypatch):
    """conv2d_backward of a depthwise 3x3 with padding 1 calls this loop, with dx and
    without (a first layer)."""
    calls = []
    kernel = unrolled_taps.backward_kernel

    def spy(kernel_h, kernel_w, with_dx=True):
        calls.append((kernel_h, kernel_w, with_dx))
        return kernel(kernel_h, kernel_w, with_dx)

    monkeypatch.setattr(unrolled_taps, "backward_kernel", spy)
    x, w, dy, call = _case((2, 8, 8, 16), (3, 3), {"padding": 1}, np.float32)
    with dispatch.use_compiled(True):
        _, call = ops.conv2d(x, w, groups=16, padding=1)
        ops.conv2d_backward(dy, call)
        ops.conv2d_backward(dy, call, input_grad=False)
    assert calls == [(3, 3, True), (3, 3, False)]


FORWARD = [  # geometries of up to 9 taps, strided ones too
    ((2, 11, 9, 13), (3, 3), {"padding": 1, "stride": 2}),
    ((2, 12, 12, 24), (3, 3), {"padding": 2, "dilation": 2}),
    ((2, 8, 7, 7), (2, 4), {"padding": "same"}),
    ((2, 7, 9, 16), (3, 1), {"stride": (2, 1)}),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_shape, kernel, kwargs", FORWARD)
def test_the_forward_gives_register_taps_bits(x_shape, kernel, kwargs, dtype):
    """The same sums in the same order (bias first, then the taps in (kh, kw) order) as
    register_taps's loop, which reloads each weight per pixel."""
    x, w, _, call = _case(x_shape, kernel, kwargs, dtype)
    b = np.linspace(-1, 1, x_shape[-1], dtype=dtype)
    g, channels = dispatch.geometry_2d(call.axes), x_shape[-1]
    assert unrolled_taps.takes_forward(g)
    taps, pad = w.reshape(-1, channels), np.zeros(dispatch.padded_image(call.axes, channels),
                                                  dtype)
    y, y_registers = (np.empty((x_shape[0], *(a.size_out for a in call.axes), channels), dtype)
                      for _ in range(2))
    unrolled_taps.forward_kernel(*kernel)(x, taps, g, b, y, pad)
    register_taps.depthwise_kernel(*kernel)(x, taps, g, b, y_registers, pad)
    np.testing.assert_array_equal(y, y_registers)


@pytest.mark.parametrize("kernel, unrolled", [((3, 3), True), ((5, 5), False)])
def test_the_op_takes_the_unrolled_forward_up_to_nine_taps(monkeypatch, kernel, unrolled):
    calls = []
    for module in (unrolled_taps, register_taps):
        name = "forward_kernel" if module is unrolled_taps else "depthwise_kernel"
        original = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *size, original=original, module=module:
                            calls.append(module) or original(*size))
    x, w, _, _ = _case((2, 8, 8, 8), kernel, {}, np.float32)
    with dispatch.use_compiled(True):
        ops.conv2d(x, w, groups=8, padding=kernel[0] // 2)
    assert calls == [unrolled_taps if unrolled else register_taps]
