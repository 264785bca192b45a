"""Interpolation: torch's argument rules as clear errors, the export refusal of 'area',
and the backward as the derivative where torch's is not."""

import re

import numpy as np
import pytest

from handgrad import layers as L
from handgrad import ops
from handgrad.model import Sequential
from handgrad.ops import reference
from handgrad.testing import assert_close

from tolerances import linear_op_bounds, op_bounds

X2 = np.zeros((1, 4, 5, 2))


@pytest.mark.parametrize("x, kwargs, error, words", [
    (X2, {}, ValueError, "exactly one of 'size' and 'scale_factor'"),
    (X2, {"size": 3, "scale_factor": 2}, ValueError, "exactly one"),
    (X2, {"size": 3, "align_corners": True}, ValueError, "interpolating modes"),
    (X2, {"size": 3, "mode": "area", "align_corners": False}, ValueError, "'area'"),
    (X2, {"size": 3, "mode": "linear"}, ValueError, "mode 'linear' takes a 3-D input"),
    (np.zeros((1, 4, 2)), {"size": 3, "mode": "bicubic"}, ValueError, "4-D input"),
    (X2, {"size": 3, "mode": "cubic"}, ValueError, "'mode' must be one of"),
    (X2, {"size": (3, 4, 5)}, TypeError, "'size'"),
    (X2, {"size": 0}, ValueError, "'size'"),
    (X2, {"scale_factor": -1.0}, ValueError, "positive number"),
    (X2, {"scale_factor": (2, 2, 2)}, ValueError, "tuple of 2"),
    (X2, {"scale_factor": 0.1}, ValueError, "at least 1"),
    (X2, {"size": 3, "recompute_scale_factor": True}, ValueError, "explicit 'size'"),
    (X2, {"size": 3, "mode": "bilinear", "align_corners": 1}, TypeError, "'align_corners'"),
    (np.zeros((1, 0, 5, 2)), {"size": 3}, ValueError, "empty axis"),
    (np.zeros((4, 5)), {"size": 3}, ValueError, "'x' must be a 3-D or 4-D or 5-D array"),
])
def test_bad_arguments_are_named(x, kwargs, error, words):
    with pytest.raises(error, match=re.escape(words)):
        ops.interpolate(x, **kwargs)
    with pytest.raises(error):
        reference.interpolate(x, **kwargs)


def test_layer_validates_at_construction_and_small_factors_are_valid():
    with pytest.raises(ValueError, match="'mode'"):
        L.Upsample(size=3, mode="cubic")
    layer = L.Upsample(scale_factor=0.05)  # valid: it needs inputs of 20 or more
    assert layer.forward(np.ones((1, 40, 20, 1)), training=False).shape == (1, 2, 1, 1)


def test_area_is_refused_by_the_onnx_export():
    pytest.importorskip("onnx")
    from handgrad.io import export_onnx
    model = Sequential([L.Upsample(size=2, mode="area")], input_shape=(4, 4, 1))
    with pytest.raises(ValueError, match="'area' has no exact ONNX Resize form"):
        export_onnx(model, None, (4, 4, 1))


def test_backward_is_the_derivative_where_torch_copies():
    """torch's bicubic backward copies dy when the sizes are kept, although its forward
    (with a scale factor) is not a copy; ours is the transpose of the forward map."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, 3, 1))
    y, cache = ops.interpolate(x, scale_factor=1.3, mode="bicubic")
    assert y.shape == x.shape and not np.allclose(y, x)
    dy = rng.standard_normal(y.shape)
    dx = ops.interpolate_backward(dy, cache)
    jacobian = np.stack([ops.interpolate(e.reshape(x.shape), scale_factor=1.3,
                                         mode="bicubic")[0].ravel()
                         for e in np.eye(x.size)], axis=1)
    np.testing.assert_allclose(dx.ravel(), jacobian.T @ dy.ravel(), rtol=1e-12, atol=1e-14)
    assert not np.allclose(dx, dy)


@pytest.mark.parametrize("path", ["bands", "sliced", "gathered", "by_position"])
@pytest.mark.parametrize("mode, align, scale", [
    ("bilinear", False, 0.5), ("bilinear", True, 1.5), ("bicubic", False, 2),
    ("nearest", None, 1.5), ("nearest", None, (2, 1.5)), ("area", None, 0.5)])
def test_every_pass_matches_the_loop_twin(kernel_path, monkeypatch, path, mode, align, scale):
    """The NumPy passes, forward and backward (the transposed taps), against the loop twin:
    banded matrix products (weighted maps, finite values), or the exact taps (every map
    when the values are not finite: strided slices where an unweighted map's taps are
    affine in runs, one output position at a time above ``SLAB`` values per position,
    whole-array gathers); and the compiled pass. Each NumPy case must take its pass
    (slices and positions exist for unweighted maps of several taps: nearest x2's
    backward beside a non-integer axis)."""
    from handgrad.ops import resample

    if path != "bands":
        monkeypatch.setattr(resample, "finite", lambda xp, x: False)
    monkeypatch.setattr(resample, "SLAB", 1 if path == "by_position" else 10**9)
    affine_plan = resample._affine_plan
    monkeypatch.setattr(resample, "_affine_plan", lambda index, n: affine_plan(index, n)
                        if path == "sliced" else None)
    taken = set()

    def spy(name, run):
        return lambda *args, **kwargs: taken.add(name) or run(*args, **kwargs)

    def spoiled_trial(*args, **kwargs):
        """Where the taps must give the result, the products' result is NaN: were a trial
        product (an axis that shrinks: its result checked after) kept, y or dx would be."""
        taken.add("band_pass")
        result = band_pass(*args, **kwargs)
        result[...] = np.nan
        return result

    band_pass = resample.band_pass
    for name in ("_sliced", "_by_position", "_gathered"):
        monkeypatch.setattr(resample, name, spy(name, getattr(resample, name)))
    monkeypatch.setattr(resample, "band_pass",
                        spy("band_pass", band_pass) if path == "bands" else spoiled_trial)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 12, 12, 3)).astype(np.float32)  # runs long enough to slice
    kwargs = {"scale_factor": scale, "mode": mode, "align_corners": align}
    y, cache = ops.interpolate(x, **kwargs)
    y_ref, cache_ref = reference.interpolate(x, **kwargs)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    (terms, scale_y), (terms_dx, scale_dx) = linear_op_bounds("interpolate", [x], dy, kwargs)
    assert y.dtype == np.float32 and y.shape == y_ref.shape
    assert_close(y, y_ref, dtype=np.float32, terms=terms, scale=scale_y, what="y")
    dx = ops.interpolate_backward(dy, cache)
    assert dx.dtype == np.float32
    assert_close(dx, reference.interpolate_backward(dy, cache_ref), dtype=np.float32,
                 terms=terms_dx, scale=scale_dx, what="dx")
    expected = {"bands": "band_pass"}.get(path, "_" + path)
    if kernel_path == "compiled":
        assert not taken
    elif path in ("bands", "gathered") or scale == (2, 1.5):
        # another path may show band_pass too: where an axis shrinks the products run
        # first, as a trial (spoiled above, so y and dx show that the taps redid it)
        assert expected in taken, taken


@pytest.mark.parametrize("mode, shape, kwargs", [
    ("linear", (3, 11, 5), {"size": 29}),
    ("nearest", (2, 13, 1), {"size": 6}),
    ("bilinear", (3, 7, 9, 5), {"size": (29, 4), "align_corners": True}),
    ("bicubic", (2, 9, 6, 3), {"scale_factor": (0.7, 2.5)}),
    ("area", (2, 17, 10, 4), {"size": (5, 3)}),
    ("nearest-exact", (2, 5, 8, 2), {"size": (11, 3)}),
    ("trilinear", (2, 5, 4, 7, 3), {"size": (9, 11, 2)}),
    ("nearest", (1, 3, 5, 4, 2), {"size": (7, 2, 9)}),
    ("nearest", (2, 4, 5, 3), {"scale_factor": 2}),
    ("nearest", (1, 2, 3, 2, 2), {"size": (4, 9, 2)}),
    ("bilinear", (0, 3, 4, 2), {"size": 5}), ("area", (0, 6, 2), {"size": 3})])
def test_one_pass_over_every_axis_matches_the_loop_twin(kernel_path, mode, shape, kwargs):
    """The compiled pass maps every axis at once (1-D and 2-D viewed as 3-D, rows cut into
    blocks): each rank and mode, up and down, odd sizes and rows of 1 to 5 channels,
    float32 and float64, forward and backward (the transposed taps) on both paths."""
    rng = np.random.default_rng(2)
    for dtype in (np.float32, np.float64):
        x = rng.standard_normal(shape).astype(dtype)
        call = {"mode": mode, **kwargs}
        y, cache = ops.interpolate(x, **call)
        y_ref, cache_ref = reference.interpolate(x, **call)
        dy = rng.standard_normal(y.shape).astype(dtype)
        (terms, scale_y), (terms_dx, scale_dx) = op_bounds("interpolate", [x], dy, call)
        assert y.dtype == dtype and y.shape == y_ref.shape
        assert_close(y, y_ref, dtype=dtype, terms=terms, scale=scale_y, what="y")
        assert_close(ops.interpolate_backward(dy, cache),
                     reference.interpolate_backward(dy, cache_ref), dtype=dtype,
                     terms=terms_dx, scale=scale_dx, what="dx")


@pytest.mark.parametrize("mode", ["nearest", "bilinear", "area"])
def test_a_tap_of_weight_zero_reads_nothing(mode):
    """An inf in dy reaches only the inputs that read it with a nonzero weight: the
    compiled pass skips taps of weight 0 (the transposed map's padding) and zeroes the
    inputs no output reads, where 0 * inf would have given NaN."""
    from handgrad.ops._engine import dispatch

    if not dispatch.available():
        pytest.skip("numba is not installed: the compiled kernels are not available")
    x = np.random.default_rng(3).standard_normal((1, 6, 12, 2))
    with dispatch.use_compiled(True):
        y, cache = ops.interpolate(x, size=(3, 5), mode=mode)
        dy = np.ones_like(y)
        finite = ops.interpolate_backward(dy, cache)
        dy[0, 1, 2, 0] = np.inf
        dx = ops.interpolate_backward(dy, cache)
    reached = np.isinf(dx)
    assert reached.any() and not np.isnan(dx).any()
    np.testing.assert_array_equal(dx[~reached], finite[~reached])
    if mode == "nearest":  # half the inputs are read by no output: exactly zero
        assert (finite == 0).any() and (dx[finite == 0] == 0).all()
