"""The CuPy formulations of the window kernels and of embedding_bag's max, run here with
NumPy standing in for CuPy, against the NumPy path (their loop twins' reference): so a
machine without a GPU checks the math that the device runs."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from handgrad import ops
from handgrad._device import to_device, to_host
from handgrad.ops._args.windows import WindowAxis
from handgrad.ops._pool_indices import tap_indices
from handgrad.testing import assert_close

gather = importlib.import_module("handgrad.ops._gather")
window_pool = importlib.import_module("handgrad.ops._window_pool")
bags = importlib.import_module("handgrad.ops.embedding_bag")


def _axis(size, kernel, stride, dilation, pad):
    out = (size + 2 * pad - (kernel - 1) * dilation - 1) // stride + 1
    return WindowAxis(size, kernel, stride, dilation, pad, out)


GEOMETRIES = [((_axis(9, 3, 1, 1, 1), _axis(8, 3, 2, 1, 1)), 1, 4),
              ((_axis(10, 5, 2, 1, 2),), 2, 4),
              ((_axis(11, 3, 1, 2, 2), _axis(7, 2, 2, 1, 0)), 4, 8),
              ((_axis(7, 3, 3, 1, 0),), 1, 3)]  # the last input column unread


@pytest.mark.parametrize("axes, groups, channels", GEOMETRIES)
def test_strided_im2col_and_sliced_col2im_match_the_cpu_take(axes, groups, channels):
    """The GPU's im2col (one strided-view copy) and col2im (per-tap slice-adds) against
    the CPU's ``take`` formulation (:class:`TakeWindows`, the whole batch as one chunk)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, *(a.size_in for a in axes), channels))
    cols = gather.im2col(np, x, axes, groups)  # the strided view's copy
    per_group = channels // groups
    scratch = np.empty(cols.size + per_group)  # the CPU scatter's zero row follows cols
    cpu_cols = scratch[:cols.size].reshape(cols.shape)
    windows = gather.TakeWindows(axes, groups)
    windows.gather(x, cpu_cols)
    np.testing.assert_array_equal(cols, cpu_cols)
    a = rng.standard_normal((groups, cols.shape[1], 3))
    b = rng.standard_normal((groups, 3, cols.shape[2]))
    got = gather.col2im_matmul(np, a, b, x.shape, axes, groups)
    np.matmul(a, b, out=cpu_cols)
    expected = np.zeros(x.shape)
    windows.scatter(expected, cpu_cols, scratch)
    taps = int(np.prod([axis.kernel for axis in axes]))  # a position sums <= taps products
    assert_close(got, expected, dtype=np.float64, terms=taps * a.shape[-1])


@pytest.mark.parametrize("kwargs", [dict(kernel_size=3, stride=2, padding=1),
                                    dict(kernel_size=2, stride=2),
                                    dict(kernel_size=3, stride=1, dilation=2, padding=1),
                                    dict(kernel_size=3, stride=2, ceil_mode=True)])
@pytest.mark.parametrize("nan", [False, True])
def test_window_max_matches_max_pool2d_with_ties_and_nan(kwargs, nan):
    """y, the indices the winning taps give (the GPU's return_indices) and dx."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 9, 10, 3))
    x[1, 4, 4, 0] = x[1, 4, 5, 0]  # a tie: the first tap wins
    if nan:
        x[0, 2, 3, 1] = x[0, 3, 3, 1] = np.nan  # two NaNs in a window: the last wins
    y, cache = ops.max_pool2d(x, **kwargs)
    got, tap = window_pool.window_max(np, x, cache.axes)
    np.testing.assert_array_equal(got, y)
    _, indices, _ = ops.max_pool2d(x, return_indices=True, **kwargs)  # torch's indices
    np.testing.assert_array_equal(tap_indices(tap, cache.axes, x.shape), indices)
    dy = rng.standard_normal(y.shape)
    dx = window_pool.window_max_backward(np, dy, tap, x.shape, cache.axes, x.dtype)
    # a position takes the dy of every window it wins (at most kernel_size**2 of them)
    assert_close(dx, ops.max_pool2d_backward(dy, cache), dtype=x.dtype,
                 terms=kwargs["kernel_size"] ** 2)


class _NoReduceat:
    """An array module without ``reduceat`` (as CuPy): embedding_bag takes its padded
    reduction."""

    arange, full = staticmethod(np.arange), staticmethod(np.full)


def test_segment_max_without_reduceat_matches_reduceat():
    rng = np.random.default_rng(2)
    bag = np.sort(rng.integers(0, 6, 40))
    starts, run = bags._segments(np, bag)
    values = rng.standard_normal((40, 5))
    values[3, 1] = np.nan
    for ufunc, fill in ((np.maximum, -np.inf), (np.minimum, 40)):
        np.testing.assert_array_equal(
            bags._segment_reduce(_NoReduceat, ufunc, values, starts, run, fill),
            ufunc.reduceat(values, starts, axis=0))


# ---------------------------------------------------------------- batch norm
stats = importlib.import_module("handgrad.ops._channel_stats")


@pytest.mark.parametrize("rows, cols", [(400 * 1024, 64), (5120, 32), (97, 3), (12, 1),
                                        (1, 5), (6, 40000)])
def test_two_stage_row_blocks_divide_the_rows(rows, cols):
    blocks = stats.row_blocks(rows, cols)
    assert rows % blocks == 0 and 1 <= blocks <= max(1, rows // 16)
    assert blocks == 1 or blocks * cols <= 32768
    if rows == 400 * 1024:  # a ResNet map: enough first-stage outputs to fill a GPU
        assert blocks * cols >= 16384


@pytest.mark.parametrize("shape", [(64, 5), (8, 6, 7), (4, 12, 10, 16), (0, 3, 4)])
def test_leading_sum_matches_the_sum(shape):
    a = np.random.default_rng(3).standard_normal(shape)
    for lead in range(len(shape)):
        expected = a.sum(axis=tuple(range(lead)))
        got = stats.leading_sum(np, a, lead)
        assert got.shape == expected.shape
        assert_close(got, expected, dtype=a.dtype, terms=max(1, a[..., 0].size))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", [(6, 5), (4, 9, 3), (3, 7, 6, 8)])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_device_path_matches_numpy(numpy_as_cupy, dtype, shape, affine):
    """ops.batch_norm with CuPy's branch (two-stage sums, the fused passes' twins) against
    the NumPy path: y, dx, dgamma, dbeta, the running statistics, in training and eval."""
    rng = np.random.default_rng(4)
    channels = shape[-1]
    x = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    gamma, beta = (rng.standard_normal(channels).astype(dtype) for _ in range(2))
    params = (gamma, beta) if affine else (None, None)
    for training in (True, False):
        host_stats = [np.full(channels, 0.5, dtype), np.full(channels, 2.0, dtype)]
        dev_stats = [to_device(s, "cuda") for s in host_stats]
        y, cache = ops.batch_norm(x, *params, *host_stats, training=training)
        dev = [None if p is None else to_device(p, "cuda") for p in params]
        y_dev, cache_dev = ops.batch_norm(to_device(x, "cuda"), *dev, *dev_stats,
                                          training=training)
        assert type(y_dev) is not np.ndarray  # the device path
        terms = x.size // channels
        assert_close(to_host(y_dev), y, dtype=dtype, terms=terms, what="y")
        start = (0.5, 2.0)
        for got, want, first in zip(dev_stats, host_stats, start):
            assert_close(to_host(got), want, dtype=dtype, terms=terms, what="running")
            assert (want != first).all() == training  # updated in training, kept in eval
        grads = ops.batch_norm_backward(dy, cache)
        grads_dev = ops.batch_norm_backward(to_device(dy, "cuda"), cache_dev)
        for name, got, want in zip(("dx", "dgamma", "dbeta"), grads_dev, grads):
            assert (got is None) == (want is None), name
            if want is not None:
                assert_close(to_host(got), want, dtype=dtype, terms=terms, what=name)


@pytest.mark.parametrize("op, x_shape, kwargs", [
    ("interpolate", (2, 5, 4, 3), dict(scale_factor=2, mode="nearest")),
    ("interpolate", (2, 5, 4, 3), dict(scale_factor=2, mode="bilinear", align_corners=False)),
    ("interpolate", (2, 5, 4, 3), dict(scale_factor=3, mode="bilinear", align_corners=True)),
    ("interpolate", (2, 3, 4, 2, 3), dict(scale_factor=2, mode="trilinear")),
    ("pad", (2, 5, 4, 3), dict(padding=((2, 1), (1, 2)), mode="reflect")),
    ("pad", (2, 5, 4, 3), dict(padding=((2, 1), (1, 2)), mode="replicate")),
    ("adaptive_avg_pool2d", (2, 8, 6, 3), dict(output_size=(4, 3))),
])
def test_resampling_device_path_matches_numpy(numpy_as_cupy, op, x_shape, kwargs):
    """The CuPy branches of the resampling, padding and adaptive average pooling kernels
    (whole batch, no NumPy-only blocks) against the NumPy path, forward and backward.
    (Adaptive max pooling with tiling bins is the max pooling, whose CuPy branch
    :func:`test_window_max_matches_max_pool2d_with_ties_and_nan` checks.)"""
    rng = np.random.default_rng(6)
    x = rng.standard_normal(x_shape)
    y, cache = getattr(ops, op)(x, **kwargs)
    y_dev, cache_dev = getattr(ops, op)(to_device(x, "cuda"), **kwargs)
    assert type(y_dev) is not np.ndarray  # the device path
    dy = rng.standard_normal(y.shape)
    dx = getattr(ops, op + "_backward")(dy, cache)
    dx_dev = getattr(ops, op + "_backward")(to_device(dy, "cuda"), cache_dev)
    assert_close(to_host(y_dev), y, dtype=np.float64, terms=8, what="y")
    assert_close(to_host(dx_dev), dx, dtype=np.float64, terms=8, what="dx")


@pytest.mark.parametrize("kwargs", [dict(padding=1, groups=3),  # unit strides: merged rows
                                    dict(stride=2, dilation=2, padding=2, groups=3)])
def test_depthwise_device_path_matches_numpy(numpy_as_cupy, kwargs):
    """The CuPy branch of depthwise convolution (a multiply-add per tap over the whole
    output; the gradients by the blocked passes) against the NumPy path."""
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((2, 7, 6, 3)), rng.standard_normal((3, 3, 1, 6))
    y, cache = ops.conv2d(x, w, **kwargs)
    y_dev, cache_dev = ops.conv2d(to_device(x, "cuda"), to_device(w, "cuda"), **kwargs)
    assert type(y_dev) is not np.ndarray  # the device path
    dy = rng.standard_normal(y.shape)
    grads = ops.conv2d_backward(dy, cache)
    grads_dev = ops.conv2d_backward(to_device(dy, "cuda"), cache_dev)
    assert_close(to_host(y_dev), y, dtype=np.float64, terms=9, what="y")
    terms = 9 * y[..., 0].size
    for name, got, want in zip(("dx", "dw"), grads_dev, grads):
        assert_close(to_host(got), want, dtype=np.float64, terms=terms, what=name)
