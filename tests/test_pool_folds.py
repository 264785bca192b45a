"""Max pooling of large unpadded windows (the NumPy path's reductions and folds that keep
each window's winning tap) against the loop twin: distinct values, ties (rounded values, windows of
zeros as after a ReLU, windows of -inf), NaN windows (left to the other paths) and an
infinite gradient, in 1-D, 2-D and 3-D, tiling, overlapping, dilated and with unread
trailing inputs."""

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import _fold_pool, reference
from handgrad.testing import assert_close

from pool_inputs import pool_input, upstream

pytestmark = pytest.mark.usefixtures("kernel_path")

GEOMETRIES = [
    (1, (2, 61, 3), {"kernel_size": 30, "stride": 29}),  # neighbours share a position
    (2, (2, 16, 24, 3), {"kernel_size": (8, 6)}),  # tiles
    (2, (1, 64, 64, 2), {"kernel_size": 10, "stride": 9}),  # adaptive 64 -> 7
    (2, (2, 13, 12, 2), {"kernel_size": 5, "stride": (4, 3)}),  # 3-position overlap
    (2, (2, 14, 11, 2), {"kernel_size": 5, "stride": 5, "dilation": (2, 1)}),  # unread
    (3, (1, 7, 9, 8, 2), {"kernel_size": 3, "stride": 2}),  # 27 taps
    # rows of LONG_ROWS values or more reduce: the first axis, a middle axis with keys,
    # the last axis with keys (many channels), one axis alone
    (2, (1, 64, 64, 8), {"kernel_size": 10, "stride": 9}),
    (3, (1, 7, 9, 8, 32), {"kernel_size": 3, "stride": 2}),
    (2, (1, 13, 12, 260), {"kernel_size": 5, "stride": (4, 3)}),
    (1, (2, 61, 300), {"kernel_size": 30, "stride": 29}),
    (2, (1, 34, 33, 2), {"kernel_size": (17, 16)}),  # 272 taps: keys of 16 bits
]


def _run(rank, x, dy, kwargs):
    name = f"max_pool{rank}d"
    y, indices, cache = getattr(ops, name)(x, return_indices=True, **kwargs)
    y_ref, indices_ref, cache_ref = getattr(reference, name)(x, return_indices=True, **kwargs)
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(indices, indices_ref)
    dx = getattr(ops, f"{name}_backward")(dy(y.shape), cache)
    dx_ref = getattr(reference, f"{name}_backward")(dy(y.shape), cache_ref)
    assert_close(dx, dx_ref, terms=4, scale=np.abs(dy(y.shape)).max(), what="dx")
    assert np.all(dx[dx_ref == 0] == 0)
    return cache


@pytest.mark.parametrize("rank, shape, kwargs", GEOMETRIES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("kind", ["distinct", "ties", "zeros", "minus_inf", "nan", "inf_dy"])
def test_large_windows_match_the_loop_twin(kernel_path, rank, shape, kwargs, dtype, kind):
    rng = np.random.default_rng(rank)
    x = pool_input(shape, kind, dtype, rng, tie_step=50)
    dy = upstream(np.prod(shape), kind, dtype, rng)

    cache = _run(rank, x, dy, kwargs)
    if kernel_path == "numpy":  # the folds ran unless a window holds a NaN
        assert (cache.tap is not None) == (kind != "nan")


def test_long_rows_reduce_and_short_rows_fold(monkeypatch):
    """(1, 7, 9, 8, 32), 3x3x3: the first two axes' rows (2304 and 256 values) reduce, the
    second with the first's keys; the last axis's (32 values) folds tap by tap."""
    x = np.random.default_rng(0).standard_normal((1, 7, 9, 8, 32))
    axes = ops.max_pool3d(x, 3, 2)[-1].axes
    calls = []
    for name in ("_reduce_axis", "_fold_axis"):
        original = getattr(_fold_pool, name)
        monkeypatch.setattr(_fold_pool, name, lambda *a, _f=original, _n=name: (
            calls.append((_n, a[1] is not None)), _f(*a))[1])
    _fold_pool.max_forward(x, axes)
    assert calls == [("_reduce_axis", False), ("_reduce_axis", True), ("_fold_axis", True)]


def test_only_large_unpadded_windows_fold():
    from handgrad.ops._args.windows import WindowAxis
    assert _fold_pool.applies((WindowAxis(64, 10, 9, 1, 0, 7),) * 2)
    assert _fold_pool.applies((WindowAxis(64, 5, 5, 1, 0, 12),) * 2)  # 25 taps, unread
    assert not _fold_pool.applies((WindowAxis(64, 4, 4, 1, 0, 16),) * 2)  # 16 taps
    assert not _fold_pool.applies((WindowAxis(64, 5, 4, 1, 1, 16),) * 2)  # padding
