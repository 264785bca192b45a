"""Adaptive pooling, max pooling indices and max unpooling beyond the op table: PyTorch's
indices (ties, NaN, padding), a graph MaxPool -> MaxUnpool against torch, save/load, and
the errors."""

import numpy as np
import pytest

import handgrad as hg
from handgrad import io, ops
from handgrad import layers as L
from handgrad.model import Sequential
from handgrad.ops import pooling_extra, reference
from handgrad.ops._args.adaptive import adaptive_bins
from handgrad.testing import assert_close

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _first(x):
    return torch.tensor(x).movedim(-1, 1)


def _last(t):
    return t.detach().movedim(1, -1).numpy()


def _ties_and_nans(shape, seed):
    x = np.random.default_rng(seed).integers(-2, 3, shape).astype(np.float64)
    x.reshape(-1)[:: 7] = np.nan
    return x


@pytest.mark.parametrize("op, shape, kwargs", [
    ("max_pool2d", (2, 7, 8, 3), {"kernel_size": 3, "stride": 2, "padding": 1,
                                  "ceil_mode": True}),
    ("max_pool2d", (2, 6, 6, 2), {"kernel_size": 2}),
    ("max_pool1d", (2, 11, 3), {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2}),
    ("max_pool3d", (2, 5, 6, 7, 3), {"kernel_size": (3, 2, 2), "stride": (2, 1, 2),
                                     "padding": 1, "dilation": (1, 2, 1), "ceil_mode": True}),
    ("adaptive_max_pool2d", (2, 7, 5, 3), {"output_size": (3, 4)}),
    ("adaptive_max_pool1d", (2, 9, 3), {"output_size": 4}),
    ("adaptive_max_pool3d", (2, 5, 7, 6, 2), {"output_size": (3, 2, 4)}),
    ("adaptive_max_pool3d", (1, 3, 2, 4, 3), {"output_size": (4, None, 3)}),
    ("adaptive_max_pool2d", (2, 10, 6, 3), {"output_size": (4, 4)}),
    # bins that tile the input: run as a max pooling with kernel = stride
    ("adaptive_max_pool2d", (2, 8, 6, 3), {"output_size": (4, 3)}),
    ("adaptive_max_pool1d", (2, 9, 3), {"output_size": 3}),
    ("adaptive_max_pool3d", (2, 4, 6, 2, 2), {"output_size": (2, 3, 1)}),
])
@pytest.mark.parametrize("nan", [False, True])
def test_indices_are_torchs(kernel_path, op, shape, kwargs, nan):
    x = _ties_and_nans(shape, len(op)) if nan else \
        np.random.default_rng(0).integers(-2, 3, shape).astype(np.float64)
    y, indices, _ = getattr(ops, op)(x, return_indices=True, **kwargs)
    _, twin_indices, _ = getattr(reference, op)(x, return_indices=True, **kwargs)
    y_torch, i_torch = getattr(F, op)(_first(x), return_indices=True, **kwargs)
    assert indices.dtype == np.int64
    assert np.array_equal(indices, _last(i_torch))
    assert np.array_equal(twin_indices, indices)
    assert np.array_equal(y, _last(y_torch), equal_nan=True)


UNIFORM = [  # every axis's bins are a pooling's windows [o*s, o*s + k)
    (1, (2, 9, 3), 3),  # 9 -> 3: kernel = stride = 3 (tiles)
    (1, (2, 15, 3), 7),  # 15 -> 7: kernel 3, stride 2
    (2, (2, 8, 6, 3), (4, 3)),
    (2, (2, 29, 10, 2), (7, 5)),  # 29 -> 7: kernel 5, stride 4; 10 -> 5 tiles
    (2, (1, 64, 64, 2), (7, 8)),  # the benchmark's 64 -> 7 (kernel 10, stride 9), 64 -> 8
    (3, (2, 4, 6, 2, 2), (2, 3, 1)),
    (3, (1, 9, 4, 11, 2), (4, 2, 2)),  # 9 -> 4: kernel 3, stride 2; 11 -> 2: 6, 5
]
NOT_UNIFORM = [(1, (2, 64, 2), 6), (2, (2, 10, 6, 3), (4, 4)),
               (2, (2, 15, 9, 2), (7, 5)),  # 15 -> 7 is a pooling's, 9 -> 5 is not
               (1, (2, 1001, 2), 3)]  # bins of 334 taps


def test_which_bins_are_a_poolings_windows():
    windows = lambda *sizes: pooling_extra._pooling_windows(  # noqa: E731
        tuple(adaptive_bins(n, m) for n, m in sizes))
    assert windows((64, 8), (64, 7)) == ((8, 10), (8, 9))
    assert windows((5, 1), (1, 1), (15, 7)) == ((5, 1, 3), (5, 1, 2))
    assert windows((64, 6)) is None  # starts 0, 10, 21, ..: not one stride
    assert windows((10, 3)) == ((4,), (3,))
    assert windows((64, 7), (10, 4)) is None  # one axis is enough to refuse
    assert windows((3, 7)) is None  # more outputs than inputs: a stride of 0
    assert windows((4, 4)) == ((1,), (1,))


def _general(monkeypatch, run):
    """``run()`` with every bin taken for irregular: the general path's answer."""
    with monkeypatch.context() as patch:
        patch.setattr(pooling_extra, "_pooling_windows", lambda bins: None)
        return run()


@pytest.mark.parametrize("rank, shape, size", UNIFORM + NOT_UNIFORM)
@pytest.mark.parametrize("kind", ["max", "avg"])
def test_uniform_bins_run_as_a_pooling(kernel_path, monkeypatch, kind, rank, shape, size):
    """Bins that are a pooling's windows run as that op (cache ``inner``) with the
    general path's (bin matrices, resampling, the separable maxima), the loop twin's and
    torch's values, gradient and indices; ties and NaNs (the first maximum, the last NaN)
    included. Other bins keep the general path."""
    op = f"adaptive_{kind}_pool{rank}d"
    x = _ties_and_nans(shape, rank) if kind == "max" else \
        np.random.default_rng(rank).standard_normal(shape)
    extra = {"return_indices": True} if kind == "max" else {}
    y, *indices, cache = getattr(ops, op)(x, size, **extra)
    uniform = (rank, shape, size) in UNIFORM
    assert (cache.inner is not None) == uniform
    dy = np.random.default_rng(1).standard_normal(y.shape)
    dx = getattr(ops, op + "_backward")(dy, cache)

    def general():
        y, *indices, cache = getattr(ops, op)(x, size, **extra)
        return y, indices, getattr(ops, op + "_backward")(dy, cache)

    y_general, indices_general, dx_general = _general(monkeypatch, general)
    y_ref, *_, cache_ref = getattr(reference, op)(x, size, **extra)
    dx_ref = getattr(reference, op + "_backward")(dy, cache_ref)
    y_torch, *i_torch = getattr(F, op)(_first(x), size, **extra) if extra else \
        (getattr(F, op)(_first(x), size),)
    for twin, twin_dx in ((y_general, dx_general), (y_ref, dx_ref)):
        if kind == "max":  # one value per bin, overlapping bins add up to 2 ** rank dy
            assert np.array_equal(y, twin, equal_nan=True)
            assert_close(dx, twin_dx, terms=2 ** rank, what="dx")
        else:
            assert_close(y, twin, terms=x.size // y.size + 1, scale=np.abs(x).max(), what="y")
            assert_close(dx, twin_dx, terms=2 ** rank, scale=np.abs(dy).max(), what="dx")
    if kind == "max":
        assert np.array_equal(y, _last(y_torch), equal_nan=True)
        assert np.array_equal(indices[0], _last(i_torch[0]))
        assert np.array_equal(indices_general[0], indices[0])
    else:
        assert_close(y, _last(y_torch), terms=x.size // y.size + 1, scale=np.abs(x).max())


def test_indices_do_not_change_the_values_or_the_gradient():
    x = np.random.default_rng(1).standard_normal((2, 7, 6, 2))
    y, cache = ops.max_pool2d(x, 3, 2, 1)
    y2, _, cache2 = ops.max_pool2d(x, 3, 2, 1, return_indices=True)
    dy = np.ones_like(y)
    assert np.array_equal(y, y2)
    assert np.array_equal(ops.max_pool2d_backward(dy, cache), ops.max_pool2d_backward(dy, cache2))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_graph_pool_unpool_matches_torch(dtype):
    inp = hg.Input((7, 8, 3))
    pooled, indices = L.MaxPool2D(3, 2, padding=1, return_indices=True)(inp)
    restored = L.MaxUnpool2D(3, 2, padding=1, output_size=(7, 8))([pooled, indices])
    small = L.AdaptiveMaxPool2D((2, 3))(restored)
    model = hg.Model(inp, [restored, small], seed=0, dtype=dtype)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 7, 8, 3)).astype(dtype)
    out, out_small = model.forward(x)
    d_out, d_small = (rng.standard_normal(a.shape).astype(dtype) for a in (out, out_small))
    dx = model.backward([d_out, d_small])

    t = _first(x).requires_grad_()
    p, i = F.max_pool2d(t, 3, 2, 1, return_indices=True)
    r = F.max_unpool2d(p, i, 3, 2, 1, output_size=(7, 8))
    s = F.adaptive_max_pool2d(r, (2, 3))
    ((r * _first(d_out)).sum() + (s * _first(d_small)).sum()).backward()
    for ours, theirs in ((out, r), (out_small, s), (dx, t.grad)):
        assert ours.dtype == dtype
        assert_close(ours, _last(theirs), dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_graph_pool_unpool_3d_matches_torch(dtype):
    inp = hg.Input((5, 6, 7, 2))
    pooled, indices = L.MaxPool3D((2, 3, 2), (2, 2, 1), padding=(1, 1, 0),
                                  return_indices=True)(inp)
    restored = L.MaxUnpool3D((2, 3, 2), (2, 2, 1), padding=(1, 1, 0),
                             output_size=(5, 6, 7))([pooled, indices])
    small, where = L.AdaptiveMaxPool3D((2, 4, 3), return_indices=True)(restored)
    mean = L.AdaptiveAvgPool3D((3, None, 2))(restored)
    model = hg.Model(inp, [restored, small, mean, where], seed=0, dtype=dtype)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 5, 6, 7, 2)).astype(dtype)
    out, out_small, out_mean, out_where = model.forward(x)
    grads = [rng.standard_normal(a.shape).astype(dtype) for a in (out, out_small, out_mean)]
    dx = model.backward([*grads, None])

    t = _first(x).requires_grad_()
    p, i = F.max_pool3d(t, (2, 3, 2), (2, 2, 1), (1, 1, 0), return_indices=True)
    r = F.max_unpool3d(p, i, (2, 3, 2), (2, 2, 1), (1, 1, 0), output_size=(5, 6, 7))
    s, s_where = F.adaptive_max_pool3d(r, (2, 4, 3), return_indices=True)
    m = F.adaptive_avg_pool3d(r, (3, None, 2))
    sum((a * _first(g)).sum() for a, g in zip((r, s, m), grads)).backward()
    assert np.array_equal(out_where, _last(s_where))
    for ours, theirs in ((out, r), (out_small, s), (out_mean, m), (dx, t.grad)):
        assert ours.dtype == dtype
        assert_close(ours, _last(theirs), dtype=dtype)


@pytest.mark.parametrize("module", [ops, reference])
def test_unpool_3d_indices_are_flat_depth_row_column(module):
    x = np.random.default_rng(9).standard_normal((1, 2, 2, 2, 1))
    flat = np.arange(8).reshape(1, 2, 2, 2, 1) * 4 + 1  # distinct positions of a 3x4x3 plane
    y, cache = module.max_unpool3d(x, flat, 2, (1, 2, 1))
    twin = F.max_unpool3d(_first(x), _first(flat), 2, (1, 2, 1))
    assert y.shape == (1, 3, 4, 3, 1)
    assert np.array_equal(y, _last(twin))
    assert np.array_equal(y.reshape(-1)[flat.reshape(-1)], x.reshape(-1))
    assert np.array_equal(module.max_unpool3d_backward(y, cache), x)


def test_graph_with_indices_and_adaptive_layers_saves_and_loads(tmp_path):
    inp = hg.Input((8, 3))
    pooled, indices = L.MaxPool1D(2, return_indices=True, name="pool")(inp)
    restored = L.MaxUnpool1D(2, name="unpool")([pooled, indices])
    y = L.AdaptiveAvgPool1D(3, name="avg")(L.AdaptiveMaxPool1D(5, name="max")(restored))
    model = hg.Model(inp, [y, indices], seed=0, dtype="float64")
    x = np.random.default_rng(3).standard_normal((2, 8, 3))
    io.save(model, tmp_path / "m.safetensors")
    loaded = io.load(tmp_path / "m.safetensors")
    for ours, theirs in zip(model.forward(x, training=False), loaded.forward(x, training=False)):
        assert np.array_equal(ours, theirs)
    assert loaded.get_config() == model.get_config()


def test_max_pool_layer_returns_values_and_indices_outside_a_graph():
    x = np.random.default_rng(4).standard_normal((2, 6, 3))
    y, indices = L.MaxPool1D(2, return_indices=True).forward(x)
    assert np.array_equal(indices, ops.max_pool1d(x, 2, return_indices=True)[1])
    assert np.array_equal(y, L.MaxPool1D(2).forward(x))


@pytest.mark.parametrize("call, error, message", [
    (lambda x: ops.adaptive_avg_pool2d(x, 0), ValueError, r"'output_size' must be .* 0"),
    (lambda x: ops.adaptive_avg_pool2d(x, (2, 3, 4)), ValueError, r"tuple of 2 .*\(2, 3, 4\)"),
    (lambda x: ops.adaptive_max_pool2d(x, 2, return_indices=1), TypeError, "'return_indices'"),
    (lambda x: ops.adaptive_max_pool3d(x[..., None, :], (2, 3)), ValueError,
     r"tuple of 3 .*\(2, 3\)"),
    (lambda x: ops.adaptive_avg_pool3d(x, 2), ValueError, r"adaptive_avg_pool3d.*x"),
    (lambda x: ops.max_unpool3d(x[..., None, :], np.zeros((1, 4, 5, 2, 2), np.int64), 2),
     TypeError, r"x's shape \(1, 4, 5, 1, 2\)"),
    (lambda x: ops.max_pool2d(x, 2, return_indices="yes"), TypeError, "'return_indices'"),
    (lambda x: ops.max_unpool2d(x, x, 2), TypeError, "'indices' must be an integer array"),
    (lambda x: ops.max_unpool2d(x, np.zeros((1, 4, 4, 2), np.int64), 2), TypeError,
     r"x's shape \(1, 4, 5, 2\)"),
    (lambda x: ops.max_unpool2d(x, np.full(x.shape, 80), 2), ValueError,
     r"lie in \[0, 80\) .* from 80 to 80"),
    (lambda x: ops.max_unpool2d(x, np.zeros(x.shape, np.int64), 2, output_size=(11, 10)),
     ValueError, r"between \(7, 9\) and \(9, 11\)"),
])
def test_bad_arguments_are_named(call, error, message):
    x = np.zeros((1, 4, 5, 2))
    with pytest.raises(error, match=message):
        call(x)


def test_unpool_is_no_step_of_sequential():
    with pytest.raises(TypeError, match=r"MaxUnpool1D.*takes the list \[x, indices\]"):
        Sequential([L.MaxUnpool1D(2)]).forward(np.zeros((1, 4, 2)))


@pytest.mark.parametrize("module", [ops, reference])
def test_lp_pool_gradient_is_zero_on_an_all_zero_window(module):
    x = np.random.default_rng(5).standard_normal((1, 4, 4, 2))
    x[0, :2, :2, :] = 0.0  # the first window sums to zero: T ** (1/p) has no slope there
    y, cache = module.lp_pool2d(x, 2, 2)
    dx = module.lp_pool2d_backward(np.ones_like(y), cache)
    assert np.all(np.isfinite(dx)) and np.all(dx[0, :2, :2] == 0)
    assert np.all(dx[0, 2:, 2:] != 0)  # the other windows still get their gradient
    assert y[0, 0, 0, 0] == 0


@pytest.mark.parametrize("norm_type", [0, -2, True, float("inf"), "2"])
def test_lp_pool_refuses_a_bad_norm_type(norm_type):
    with pytest.raises(ValueError, match=r"'norm_type' must be a finite number > 0; received"):
        ops.lp_pool1d(np.ones((1, 4, 2)), norm_type, 2)


def test_min_pool_indices_are_torchs_max_pool_indices_of_minus_x():
    x = _ties_and_nans((2, 7, 8, 3), 6)
    y, indices, _ = ops.min_pool2d(x, 3, 2, 1, return_indices=True)
    _, twin_indices, _ = reference.min_pool2d(x, 3, 2, 1, return_indices=True)
    y_torch, i_torch = F.max_pool2d(-_first(x), 3, 2, 1, return_indices=True)
    assert np.array_equal(indices, _last(i_torch)) and np.array_equal(twin_indices, indices)
    assert np.array_equal(y, -_last(y_torch), equal_nan=True)


def test_min_pool_layer_in_a_graph_gives_values_and_indices():
    inp = hg.Input((6, 2))
    low, where = L.MinPool1D(2, return_indices=True)(inp)
    model = hg.Model(inp, [low, where], dtype="float64", seed=0)
    x = np.random.default_rng(7).standard_normal((3, 6, 2))
    low_v, where_v = model.forward(x)
    assert np.array_equal(low_v, x.reshape(3, 3, 2, 2).min(axis=2))
    assert np.array_equal(np.take_along_axis(x, where_v, axis=1), low_v)


@pytest.mark.parametrize("module", [ops, reference])
def test_an_empty_batch_unpools_to_an_empty_batch(module):
    x = np.zeros((0, 3, 4, 2))
    y, cache = module.max_unpool2d(x, np.zeros(x.shape, np.int64), 2)
    assert y.shape == (0, 6, 8, 2)
    assert module.max_unpool2d_backward(y, cache).shape == x.shape
