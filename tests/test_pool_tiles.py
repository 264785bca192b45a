"""Pooling of windows that tile the input against the loop twin: max pooling (the NumPy
path's one-comparison backward) with distinct values, ties, NaN windows and an infinite
gradient, average pooling (reductions of a view, a broadcast copy back) with a divisor
override and kernels of one, in 1-D, 2-D and 3-D; and geometries that do not tile are
left to the other paths."""

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import _fold_pool, _tile_pool, reference
from handgrad.ops._args.windows import WindowAxis
from handgrad.testing import assert_close

from pool_inputs import pool_input, upstream

pytestmark = pytest.mark.usefixtures("kernel_path")

TILED = [
    (1, (2, 8, 3), {"kernel_size": 2}),
    (2, (2, 6, 4, 3), {"kernel_size": 2}),
    (2, (1, 6, 6, 2), {"kernel_size": (3, 2)}),
    (3, (1, 4, 6, 4, 2), {"kernel_size": 2}),
]


def _both(rank, x, dy, kwargs):
    name = f"max_pool{rank}d"
    y, cache = getattr(ops, name)(x, **kwargs)
    y_ref, cache_ref = getattr(reference, name)(x, **kwargs)
    np.testing.assert_array_equal(y, y_ref)
    dx = getattr(ops, f"{name}_backward")(dy(y.shape), cache)
    dx_ref = getattr(reference, f"{name}_backward")(dy(y.shape), cache_ref)
    np.testing.assert_array_equal(dx, dx_ref)  # each dx entry is one dy entry or 0


@pytest.mark.parametrize("rank, shape, kwargs", TILED)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["distinct", "ties", "nan", "inf_dy"])
def test_tiled_windows_match_the_loop_twin(rank, shape, kwargs, dtype, kind):
    rng = np.random.default_rng(rank)
    x = pool_input(shape, kind, dtype, rng, tie_step=7)
    dy = upstream(np.prod(shape), kind, dtype, rng)

    _both(rank, x, dy, kwargs)


def test_only_exact_tilings_take_the_tiled_path():
    assert _tile_pool.tiles((WindowAxis(6, 2, 2, 1, 0, 3), WindowAxis(6, 3, 3, 1, 0, 2)))
    assert not _tile_pool.tiles((WindowAxis(7, 2, 2, 1, 0, 3),))  # an unread last row
    assert not _tile_pool.tiles((WindowAxis(6, 2, 2, 1, 1, 4),))  # padding
    assert not _tile_pool.tiles((WindowAxis(6, 3, 2, 1, 0, 2),))  # overlapping
    assert not _tile_pool.tiles((WindowAxis(8, 2, 2, 2, 0, 4),))  # dilated: gaps, padding


def test_dilated_windows_of_the_tiles_size_are_not_tiles():
    """kernel 2, stride 2, dilation 2, ceil_mode on 8 positions: 4 outputs, as many as
    tiles would have, but windows (0, 2), (2, 4), .. that overlap the next (the tiled
    path once took them for (0, 1), (2, 3), ..: a wrong answer)."""
    rng = np.random.default_rng(5)
    x = rng.permutation(2 * 8 * 8 * 3).reshape(2, 8, 8, 3).astype(np.float64)
    kwargs = {"kernel_size": 2, "stride": 2, "dilation": 2, "ceil_mode": True}
    y, cache = ops.max_pool2d(x, **kwargs)
    y_ref, cache_ref = reference.max_pool2d(x, **kwargs)
    np.testing.assert_array_equal(y, y_ref)
    dy = rng.standard_normal(y.shape)
    # overlapping windows: an input's dx sums up to 4 dy entries, in another order
    assert_close(ops.max_pool2d_backward(dy, cache), reference.max_pool2d_backward(dy, cache_ref),
                 terms=4, what="dx")


def test_a_nan_window_and_a_tied_window_do_not_make_up_for_each_other():
    """The NaN window has no mark (NaN != NaN), the tied one two: the count of marks was
    right and dx wrong (the NaN window's dy lost, the tied one's given twice)."""
    x = -np.arange(16.0).reshape(1, 4, 4, 1)
    x[0, 0, 0, 0] = np.nan
    x[0, 0, 2, 0] = x[0, 1, 3, 0] = 1.0  # two maxima in the second window
    dy = np.arange(1.0, 5.0).reshape(1, 2, 2, 1)
    _, cache = ops.max_pool2d(x, 2)
    _, cache_ref = reference.max_pool2d(x, 2)
    dx = ops.max_pool2d_backward(dy, cache)
    np.testing.assert_array_equal(dx, reference.max_pool2d_backward(dy, cache_ref))
    assert dx[0, 0, 0, 0] == 1.0 and dx[0, 0, 2, 0] == 2.0 and dx[0, 1, 3, 0] == 0.0


def test_ties_fall_back_to_the_first_maximum():
    x = np.zeros((1, 2, 2, 1))
    assert _tile_pool.max_backward(np.ones((1, 1, 1, 1)), x, np.zeros((1, 1, 1, 1)),
                                   (WindowAxis(2, 2, 2, 1, 0, 1),) * 2) is None
    _, cache = ops.max_pool2d(x, 2)
    np.testing.assert_array_equal(ops.max_pool2d_backward(np.ones((1, 1, 1, 1)), cache),
                                  [[[[1.0], [0.0]], [[0.0], [0.0]]]])


SUMMED = [
    *TILED,
    (2, (3, 8, 8, 5), {"kernel_size": 8}),  # one window per image: adaptive 8 -> 1
    (2, (2, 6, 4, 3), {"kernel_size": (1, 2)}),
    (3, (2, 3, 4, 6, 2), {"kernel_size": (1, 2, 3), "divisor_override": 5}),
    (2, (0, 4, 4, 3), {"kernel_size": 2}),  # an empty batch
]


@pytest.mark.parametrize("rank, shape, kwargs", SUMMED)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tiled_sums_match_the_loop_twin(rank, shape, kwargs, dtype):
    rng = np.random.default_rng(len(shape) + sum(shape))
    x = rng.standard_normal(shape).astype(dtype)
    name = f"avg_pool{rank}d"
    y, cache = getattr(ops, name)(x, **kwargs)
    y_ref, cache_ref = getattr(reference, name)(x, **kwargs)
    taps = int(np.prod([a.kernel for a in cache.axes]))
    assert _tile_pool.tiles(cache.axes)
    assert_close(y, y_ref, terms=taps, what="y")
    dy = rng.standard_normal(y.shape).astype(dtype)
    dx = getattr(ops, f"{name}_backward")(dy, cache)
    assert dx.shape == x.shape and dx.dtype == x.dtype and dx.flags.c_contiguous
    assert_close(dx, getattr(reference, f"{name}_backward")(dy, cache_ref), terms=1, what="dx")



UNPADDED = [  # windows that read no padding but do not tile: the forward's reductions
    (1, (2, 9, 3), {"kernel_size": 3, "stride": 1}),  # overlapping
    (2, (2, 64, 64, 3), {"kernel_size": 10, "stride": 9}),  # adaptive 64 -> 7's windows
    (2, (1, 9, 11, 2), {"kernel_size": (3, 2), "stride": (2, 3)}),  # gaps, unread tails
    (3, (1, 7, 6, 8, 2), {"kernel_size": (2, 3, 2), "stride": (1, 2, 3)}),
]


@pytest.mark.parametrize("rank, shape, kwargs", UNPADDED)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unpadded_window_sums_match_the_loop_twin(rank, shape, kwargs, dtype):
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape).astype(dtype)
    name = f"avg_pool{rank}d"
    y, cache = getattr(ops, name)(x, **kwargs)
    assert _fold_pool.unpadded(cache.axes) and not _tile_pool.tiles(cache.axes)
    y_ref, cache_ref = getattr(reference, name)(x, **kwargs)
    taps = int(np.prod([a.kernel for a in cache.axes]))
    assert_close(y, y_ref, terms=taps, what="y")
    dy = rng.standard_normal(y.shape).astype(dtype)
    assert_close(getattr(ops, f"{name}_backward")(dy, cache),
                 getattr(reference, f"{name}_backward")(dy, cache_ref), terms=taps, what="dx")


def test_the_window_view_steps_by_the_dilation():
    """The first axis's reduction reads rows {0, 3, 6} and {2, 5, 8} (dilation 3,
    stride 2), the last axis sums both columns."""
    x = np.arange(18.0).reshape(1, 9, 2, 1)
    axes = (WindowAxis(9, 3, 2, 3, 0, 2), WindowAxis(2, 2, 2, 1, 0, 1))
    assert _fold_pool.unpadded(axes)
    rows = x[0, :, :, 0].sum(axis=1)
    np.testing.assert_array_equal(_tile_pool.sum_forward(x, axes)[0, :, 0, 0],
                                  [rows[[0, 3, 6]].sum(), rows[[2, 5, 8]].sum()])
