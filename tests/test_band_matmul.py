"""The NumPy resampling passes of weighted maps as banded matrix products: the blocks
cover the matrix, every weighted mode takes them and matches the loop twin, non-finite
values fall back to the exact taps, and two threads give one thread's bits."""

import threading

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import _band_matmul, _block_threads, _resample_blocks, reference, resample
from handgrad.ops._axis_map import _axis_matrix
from handgrad.ops._engine import dispatch
from handgrad.testing import assert_close

from tolerances import op_bounds


@pytest.mark.parametrize("m, b, rows", [(64, 2048, 4), (64, 64, 4), (64, 32, 8), (64, 4, 64),
                                        (6, 1, 6), (1, 1, 1)])
def test_block_rows_grow_until_a_product_has_enough_values(m, b, rows):
    assert _band_matmul.block_rows(m, b) == rows


@pytest.mark.parametrize("mode, n, m, scale, align", [
    ("bilinear", 32, 64, 2.0, True), ("bilinear", 7, 3, None, False),
    ("bicubic", 5, 13, None, False), ("area", 17, 5, None, None), ("nearest", 12, 2, None, None)])
@pytest.mark.parametrize("rows", [1, 4, 5, 64])
def test_the_blocks_cover_the_matrix_and_read_only_its_band(mode, n, m, scale, align, rows):
    """Stacked, the blocks are M (and M^T) exactly; each block's first and last input
    columns hold a weight (it reads no input it does not need); a block of rows that read
    nothing (nearest's M^T: inputs no output reads) reads no input and writes zeros."""
    a = resample.axis_map(mode, n, m, scale, align, np.dtype(np.float64), 2)
    matrix = _axis_matrix(a.index, a.weight, n, np.float64)
    for full in (matrix, matrix.T):
        blocks = _band_matmul.bands(full, rows)
        rebuilt = np.zeros_like(full)
        assert [b[0] for b in blocks] == list(range(0, full.shape[0], rows))
        for o0, o1, i0, i1, block in blocks:
            assert not block.flags.writeable and block.shape == (o1 - o0, i1 - i0)
            rebuilt[o0:o1, i0:i1] = block
            assert block.size == 0 or (block[:, 0].any() and block[:, -1].any())
        np.testing.assert_array_equal(rebuilt, full)
        x = np.random.default_rng(0).standard_normal((2, full.shape[1], 3, 2))
        y = _band_matmul.band_pass(np, x, 1, blocks)
        np.testing.assert_allclose(y, np.einsum("oi,aibc->aobc", full, x), rtol=1e-13,
                                   atol=1e-15)


def test_an_axis_map_keeps_its_blocks_per_direction_and_block_size():
    """``AxisMap.bands`` cuts M (or M^T) into blocks of ``block_rows`` outputs for the
    values per position, once: two sizes that pick the same rows share the blocks."""
    a = resample.axis_map("bilinear", 32, 64, 2.0, False, np.dtype(np.float32), 2)
    forward, backward = a.bands(False, 32), a.bands(True, 32)
    assert [b[1] - b[0] for b in forward] == [8] * 8  # 64 outputs, 8 rows at 32 values
    assert [b[1] - b[0] for b in backward] == [8] * 4  # M^T: 32 outputs
    assert a.bands(False, 40) is forward and a.bands(False, 2048) is not forward


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("mode, shape, kwargs", [
    ("linear", (2, 9, 5), {"scale_factor": 4}), ("linear", (2, 9, 5), {"size": 4}),
    ("bilinear", (2, 5, 7, 3), {"scale_factor": 3, "align_corners": True}),
    ("bilinear", (1, 8, 6, 2), {"scale_factor": (2, 3)}),
    ("bicubic", (2, 6, 5, 3), {"scale_factor": (0.7, 2.5)}),
    ("area", (2, 17, 10, 4), {"size": (5, 3)}),
    ("trilinear", (1, 3, 4, 5, 2), {"scale_factor": 2, "align_corners": True})])
def test_weighted_maps_take_the_banded_products_both_ways(monkeypatch, mode, shape, kwargs,
                                                          dtype):
    """With finite values every weighted mode, up and down, runs forward and backward on
    the banded products alone (never the taps) and matches the loop twin."""
    def refuse(*args, **kwargs):
        raise AssertionError("the taps were taken")

    monkeypatch.setattr(resample, "_taps", refuse)
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(dtype)
    call = {"mode": mode, **kwargs}
    with dispatch.use_compiled(False):
        y, cache = ops.interpolate(x, **call)
        dy = rng.standard_normal(y.shape).astype(dtype)
        dx = ops.interpolate_backward(dy, cache)
    y_ref, cache_ref = reference.interpolate(x, **call)
    (terms, scale_y), (terms_dx, scale_dx) = op_bounds("interpolate", [x], dy, call)
    assert y.dtype == dx.dtype == dtype
    assert_close(y, y_ref, dtype=dtype, terms=terms, scale=scale_y, what="y")
    assert_close(dx, reference.interpolate_backward(dy, cache_ref), dtype=dtype,
                 terms=terms_dx, scale=scale_dx, what="dx")


def _reach(values, run):
    """Where ``run`` (a linear map with weights >= 0) carries the marked ``values``: the
    map of their indicator is positive exactly where a nonzero weight reads one."""
    return run(np.where(np.isfinite(values), 0.0, 1.0)) > 0


@pytest.mark.parametrize("mode, kwargs", [
    ("bilinear", {"scale_factor": 2, "align_corners": False}),
    ("bilinear", {"size": (7, 5), "align_corners": True}),
    ("area", {"size": (3, 4)}), ("nearest", {"size": (9, 2)})])
def test_a_nan_or_inf_reaches_only_the_outputs_that_read_it(monkeypatch, mode, kwargs):
    """One image per block: the block holding a NaN (forward) or an inf (backward) takes
    the exact taps, where a tap of weight 0 reads nothing; the values nothing non-finite
    reaches are those of the same block without it, and the other blocks' (banded
    products) are the bits of the all-finite call."""
    monkeypatch.setattr(_resample_blocks, "RESAMPLE_BLOCK_BYTES", 1)
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 6, 5, 2))
    dirty = x.copy()
    dirty[1, 2, 2, 0] = np.nan  # a position nearest reads
    call = {"mode": mode, **kwargs}
    with dispatch.use_compiled(False):
        y_clean, cache = ops.interpolate(x, **call)
        y, _ = ops.interpolate(dirty, **call)
        dy = rng.standard_normal(y.shape)
        dy_dirty = dy.copy()
        dy_dirty[2, 1, 1, 1] = np.inf
        dx_clean = ops.interpolate_backward(dy, cache)
        dx = ops.interpolate_backward(dy_dirty, cache)
        zeroed = np.nan_to_num(dirty, nan=0.0)
        reach_y = _reach(dirty, lambda v: ops.interpolate(v, **call)[0])
        reach_dx = _reach(dy_dirty, lambda v: ops.interpolate_backward(v, cache))
        y_zeroed, _ = ops.interpolate(zeroed, **call)
    np.testing.assert_array_equal(np.isnan(y), reach_y)
    np.testing.assert_array_equal(np.isinf(dx), reach_dx)
    assert reach_y.any() and reach_dx.any() and not np.isnan(dx).any()
    for image in (0, 2):
        np.testing.assert_array_equal(y[image], y_clean[image])
    for image in (0, 1):
        np.testing.assert_array_equal(dx[image], dx_clean[image])
    (terms, scale), _ = op_bounds("interpolate", [zeroed], dy, call)
    kept = ~reach_y
    assert_close(y[kept], y_zeroed[kept], dtype=np.float64,
                 terms=terms[kept] if np.ndim(terms) else terms,
                 scale=scale[kept] if np.ndim(scale) else scale, what="y")


def test_two_threads_give_one_threads_bits(monkeypatch):
    """Blocks of one image on two threads call BLAS side by side (the worker thread runs
    some of the products): the same products per image, so the same bits as one thread."""
    monkeypatch.setattr(_resample_blocks, "RESAMPLE_BLOCK_BYTES", 1)
    threads = set()

    def band_pass(*args, **kwargs):
        threads.add(threading.current_thread().name)
        return _band_matmul.band_pass(*args, **kwargs)

    monkeypatch.setattr(resample, "band_pass", band_pass)
    x = np.random.default_rng(5).standard_normal((6, 16, 16, 64))
    results = []
    for count in (1, 2):
        monkeypatch.setattr(_block_threads, "THREADS", count)
        with dispatch.use_compiled(False):
            y, cache = ops.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
            dx = ops.interpolate_backward(np.cos(y), cache)
        results.append((y, dx))
    assert len(threads) == 2, threads
    for one, two in zip(*results):
        np.testing.assert_array_equal(one, two)
