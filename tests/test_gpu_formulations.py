"""The CuPy formulations of the window kernels and of embedding_bag's max, run here with
NumPy standing in for CuPy, against the NumPy path (their loop twins' reference): so a
machine without a GPU checks the math that the device runs."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops._args.windows import WindowAxis

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
def test_strided_im2col_and_sliced_col2im_match_the_gather(axes, groups, channels):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, *(a.size_in for a in axes), channels))
    cols = gather.im2col(np, x, axes, groups)
    np.testing.assert_array_equal(gather._strided_im2col(np, x, axes, groups), cols)
    a = rng.standard_normal((groups, cols.shape[1], 3))
    b = rng.standard_normal((groups, 3, cols.shape[2]))
    expected = gather.col2im_matmul(np, a, b, x.shape, axes, groups)
    got = gather._sliced_col2im(np, a @ b, x.shape, axes, groups)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kwargs", [dict(kernel_size=3, stride=2, padding=1),
                                    dict(kernel_size=2, stride=2),
                                    dict(kernel_size=3, stride=1, dilation=2, padding=1),
                                    dict(kernel_size=3, stride=2, ceil_mode=True)])
@pytest.mark.parametrize("nan", [False, True])
def test_window_max_matches_max_pool2d_with_ties_and_nan(kwargs, nan):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 9, 10, 3))
    x[1, 4, 4, 0] = x[1, 4, 5, 0]  # a tie: the first tap wins
    if nan:
        x[0, 2, 3, 1] = x[0, 3, 3, 1] = np.nan  # two NaNs in a window: the last wins
    y, cache = ops.max_pool2d(x, **kwargs)
    got, tap = window_pool.window_max(np, x, cache.axes)
    np.testing.assert_array_equal(got, y)
    dy = rng.standard_normal(y.shape)
    dx = window_pool.window_max_backward(np, dy, tap, x.shape, cache.axes, x.dtype)
    np.testing.assert_allclose(dx, ops.max_pool2d_backward(dy, cache), rtol=1e-12, atol=0)


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
