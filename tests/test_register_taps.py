"""The depthwise loops with their sums in registers (ops/_engine/register_taps.py): the
forward and the weight-gradient rows are the row loops' bits, dx agrees to rounding, on
every geometry a convolution takes."""

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops._engine import dispatch, register_taps
from handgrad.testing import tolerance

pytestmark = pytest.mark.skipif(not dispatch.available(), reason="numba is not installed")

GEOMETRIES = [  # x shape, kernel, conv keywords (channel counts around the blocks of 8)
    ((3, 9, 10, 8), (3, 3), {"padding": 1}),
    ((2, 11, 9, 13), (5, 5), {"padding": 2, "stride": 2}),
    ((2, 12, 12, 24), (3, 3), {"padding": 2, "dilation": 2}),
    ((2, 8, 7, 7), (2, 4), {"padding": "same"}),  # padding after > before
    ((2, 7, 9, 2), (3, 1), {"padding": 0, "stride": (2, 1)}),
    ((2, 6, 6, 17), (1, 1), {}),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_shape, kernel, kwargs", GEOMETRIES)
def test_the_register_kernel_gives_the_row_loops_bits(x_shape, kernel, kwargs, dtype):
    rng = np.random.default_rng(sum(x_shape))
    x = rng.standard_normal(x_shape).astype(dtype)
    channels = x_shape[-1]
    w = rng.standard_normal((*kernel, 1, channels)).astype(dtype)
    b = rng.standard_normal(channels).astype(dtype)
    with dispatch.use_compiled(True):
        y, call = ops.conv2d(x, w, b, groups=channels, **kwargs)
    np.testing.assert_array_equal(y, _row_loops(x, w, b, call.axes))


def _row_loops(x, w, b, axes):
    """The depthwise forward by the row loops of ops/_engine/kernels.py."""
    channels = w.shape[-1]
    y = np.empty((x.shape[0], *(a.size_out for a in axes), channels), x.dtype)
    source = dispatch.as_2d(dispatch._per_output_channel(x, channels))
    dispatch.kernels.serial.depthwise(source, w.reshape(-1, channels),
                                      dispatch.geometry_2d(axes), b, dispatch.as_2d(y))
    return y


@pytest.mark.parametrize("multiplier, length", [(2, 15), (3, 40)])
def test_channel_multipliers_and_1d_maps(multiplier, length):
    """Each output channel reads input channel co // multiplier; 1-D maps are one row."""
    rng = np.random.default_rng(length)
    x = rng.standard_normal((3, length, 4))
    w = rng.standard_normal((3, 1, 4 * multiplier))
    b = rng.standard_normal(4 * multiplier)
    with dispatch.use_compiled(True):
        y, call = ops.conv1d(x, w, b, padding=1, groups=4)
    np.testing.assert_array_equal(y, _row_loops(x, w, b, call.axes))


def test_a_single_large_image_keeps_the_parallel_row_loops(monkeypatch):
    """One image of 2 MB or more cannot be halved: numba's parallel loops take it, not
    one core."""
    called = []
    monkeypatch.setattr(dispatch.kernels, "depthwise",
                        lambda *args: called.append(args[0].shape))
    x = np.zeros((1, 96, 96, 32))  # 2.25 MB of output
    with dispatch.use_compiled(True):
        ops.conv2d(x, np.zeros((3, 3, 1, 32)), padding=1, groups=32)
    assert called == [(1, 96, 96, 32)]


def _backward_case(x_shape, kernel, kwargs, dtype):
    """x, y, dy, the window axes and the taps' weights (T, C) of a depthwise case."""
    rng = np.random.default_rng(sum(x_shape) + 1)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal((*kernel, 1, x_shape[-1])).astype(dtype)
    y, call = ops.conv2d(x, w, groups=x_shape[-1], **kwargs)
    dy = rng.standard_normal(y.shape).astype(dtype)
    return x, y, dy, call.axes, w.reshape(-1, x_shape[-1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("x_shape, kernel, kwargs", GEOMETRIES)
def test_the_backward_kernel_gives_the_fused_loops_rows_and_dx(x_shape, kernel, kwargs, dtype):
    """dx and the dw rows in one pass: the rows (per output column and tap, summed over
    the images and output rows) are the fused row loop's bit for bit, with dx or without;
    dx adds the same products in another order (each output pixel's taps in turn, where
    the row loop sweeps a row per tap), so it agrees to rounding."""
    x, y, dy, axes, taps = _backward_case(x_shape, kernel, kwargs, dtype)
    g = dispatch.geometry_2d(axes)
    fused, fused_dx = np.empty((1, taps.shape[0], *y.shape[2:]), dtype), np.empty_like(x)
    dispatch.kernels.serial.depthwise_backward(x, taps, dy, g, fused_dx, fused, True)
    pad = np.zeros(dispatch.padded_image(axes, x_shape[-1]), dtype)
    for with_dx in (True, False):
        rows, dx = np.zeros((y.shape[2], *taps.shape), dtype), np.zeros_like(x)
        register_taps.backward_kernel(*kernel, with_dx)(x, taps, dy, g, dx, rows, pad,
                                                         pad.copy())
        np.testing.assert_array_equal(rows, fused[0].transpose(1, 0, 2))
    assert not dx.any()  # without dx, dx was not written
    register_taps.backward_kernel(*kernel)(x, taps, dy, g, dx, rows, pad, pad.copy())
    bound = tolerance(dtype, terms=taps.shape[0],
                      scale=taps.shape[0] * np.abs(dy).max() * np.abs(taps).max())
    assert np.abs(dx - fused_dx).max() <= bound


def test_a_first_layer_takes_dw_alone_with_the_same_bits():
    """Without dx (an input nobody differentiates) the rows kernel runs without its dx
    part; dw is the bits of the full backward's."""
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((4, 12, 12, 16)), rng.standard_normal((3, 3, 1, 16))
    _, _, dx, dw, dw_alone = _compiled_step(x, w, padding=1)
    assert dx is not None
    np.testing.assert_array_equal(dw_alone, dw)


def _compiled_step(x, w, **kwargs):
    """(y, call, dx, dw, dw alone) of a depthwise conv2d on the compiled path, dy = cos y."""
    with dispatch.use_compiled(True):
        y, call = ops.conv2d(x, w, groups=x.shape[-1], **kwargs)
        dx, dw, _ = ops.conv2d_backward(np.cos(y), call)
        no_dx, dw_alone, _ = ops.conv2d_backward(np.cos(y), call, input_grad=False)
    assert no_dx is None
    return y, call, dx, dw, dw_alone


def test_kernels_over_25_taps_keep_the_row_loops(monkeypatch):
    """A 7x7 depthwise kernel (ConvNeXt's) runs the row loops, forward and backward: the
    register loops' unrolled code is slower there."""
    def refuse(*args):
        raise AssertionError("a register kernel for a 7x7 kernel")

    monkeypatch.setattr(register_taps, "depthwise_kernel", refuse)
    monkeypatch.setattr(register_taps, "backward_kernel", refuse)
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((2, 9, 9, 8)), rng.standard_normal((7, 7, 1, 8))
    y, call, dx, dw, dw_alone = _compiled_step(x, w, padding=3)
    np.testing.assert_array_equal(y, _row_loops(x, w, np.zeros(8), call.axes))
    np.testing.assert_array_equal(dw_alone, dw)
    with dispatch.use_compiled(False):
        numpy_dx = ops.conv2d_backward(np.cos(y), call)[0]
    bound = tolerance(np.float64, terms=49, scale=49 * np.abs(w).max())  # |dy| = |cos| <= 1
    assert np.abs(dx - numpy_dx).max() <= bound
