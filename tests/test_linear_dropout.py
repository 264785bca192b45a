"""Linear and dropout kernels: torch twins, finite differences, dropout statistics, errors."""

import tracemalloc

import numpy as np
import pytest

from handgrad import ops
from handgrad.testing import assert_close, assert_gradient_close, numeric_gradient

from tolerances import linear_op_bounds

torch = pytest.importorskip("torch")
F = torch.nn.functional

DTYPES = [np.float64, np.float32]
# (x shape, F_out, bias)
LINEAR_CASES = [((5, 3), 4, True), ((2, 3, 4, 3), 2, True), ((3,), 5, True), ((6, 4), 3, False),
                ((1, 1), 1, True)]


def _linear_inputs(x_shape, f_out, bias, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal((x_shape[-1], f_out)).astype(dtype)
    b = rng.standard_normal(f_out).astype(dtype) if bias else None
    return x, w, b


def _linear_torch(x, w, b, dy):
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w.T.copy(), requires_grad=True)
    tb = None if b is None else torch.tensor(b, requires_grad=True)
    ty = F.linear(tx, tw, tb)
    ty.backward(torch.tensor(dy))
    db = None if tb is None else tb.grad.numpy()
    return ty.detach().numpy(), (tx.grad.numpy(), tw.grad.numpy().T, db)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float64", "float32"])
@pytest.mark.parametrize("x_shape, f_out, bias", LINEAR_CASES)
def test_linear_matches_torch(x_shape, f_out, bias, dtype):
    x, w, b = _linear_inputs(x_shape, f_out, bias, dtype)
    y, cache = ops.linear(x, w, b)
    dy = np.random.default_rng(1).standard_normal(y.shape).astype(dtype)
    grads = ops.linear_backward(dy, cache)
    y_t, grads_t = _linear_torch(x, w, b, dy)
    assert y.shape == (*x_shape[:-1], f_out) and y.dtype == dtype
    bounds = linear_op_bounds("linear", [x, w, b], dy)
    for name, ours, theirs, bound in zip(["y", "dx", "dw", "db"], [y, *grads],
                                         [y_t, *grads_t], bounds):
        if theirs is None:
            assert ours is None and bound is None, "db must be None without a bias"
        else:
            assert ours.dtype == dtype and ours.shape == theirs.shape
            terms, scale = bound
            assert_close(ours, theirs, dtype=dtype, terms=terms, scale=scale, what=name)


@pytest.mark.parametrize("x_shape, f_out, bias", LINEAR_CASES)
def test_linear_backward_matches_finite_differences(x_shape, f_out, bias):
    arrays = list(_linear_inputs(x_shape, f_out, bias, np.float64))
    y, cache = ops.linear(*arrays)
    dy = np.random.default_rng(2).standard_normal(y.shape)
    grads = ops.linear_backward(dy, cache)
    for k, (array, grad) in enumerate(zip(arrays, grads)):
        if array is None:
            continue
        numeric, fd_error = numeric_gradient(lambda: np.sum(ops.linear(*arrays)[0] * dy),
                                             array, with_error=True)
        assert_gradient_close(grad, numeric, fd_error, what=f"gradient {k}")


def test_linear_non_contiguous_inputs_give_identical_results():
    x, w, b = _linear_inputs((4, 6), 3, True, np.float64)
    dy = np.random.default_rng(3).standard_normal((4, 3))
    y, cache = ops.linear(x, w, b)
    grads = ops.linear_backward(dy, cache)
    x_view = np.zeros((6, 4, 2))[..., 0].T  # strided and transposed
    x_view[...] = x
    w_view = np.asfortranarray(w)
    b_view = np.zeros((3, 2))[:, 1]
    b_view[...] = b
    y2, cache2 = ops.linear(x_view, w_view, b_view)
    grads2 = ops.linear_backward(np.asfortranarray(dy), cache2)
    np.testing.assert_array_equal(y, y2)
    for a, c in zip(grads, grads2):
        np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize("args, error, message", [
    ((np.ones((2, 3)), np.ones((3, 4), np.float32)), TypeError,
     r"linear: 'w' has dtype float32 but 'x' has dtype float64"),
    ((np.ones((2, 3)), np.ones((3, 4)), np.ones(4, np.float32)), TypeError,
     r"linear: 'b' has dtype float32 but 'x' has dtype float64"),
    ((np.ones((2, 3), int), np.ones((3, 4))), TypeError, r"linear: 'x' must have dtype float32"),
    (("x", np.ones((3, 4))), TypeError, r"linear: 'x' must be an array"),
    ((np.ones((2, 3)), np.ones(3)), ValueError, r"linear: 'w' must be a 2-D array \(F_in, F_out\)"),
    ((np.ones((2, 3)), np.ones((2, 4))), ValueError,
     r"linear: 'x' has 3 features .* but 'w' of shape \(2, 4\) expects F_in = 2"),
    ((np.ones((2, 3)), np.ones((3, 4)), np.ones(3)), ValueError,
     r"linear: 'b' must have shape \(4,\) to match F_out of 'w'; received shape \(3,\)"),
    ((np.ones((2, 3)), np.ones((3, 4)), np.ones((1, 4))), ValueError,
     r"linear: 'b' must be a 1-D array \(F_out,\)"),
])
def test_linear_bad_inputs(args, error, message):
    with pytest.raises(error, match=message):
        ops.linear(*args)


def test_linear_backward_bad_inputs():
    _, cache = ops.linear(np.ones((2, 3)), np.ones((3, 4)))
    with pytest.raises(ValueError, match=r"linear_backward: 'dy' must have the forward output's"):
        ops.linear_backward(np.ones((2, 3)), cache)
    with pytest.raises(TypeError, match=r"linear_backward: 'dy' must have the forward dtype"):
        ops.linear_backward(np.ones((2, 4), np.float32), cache)
    with pytest.raises(TypeError, match=r"linear_backward: 'cache' must be the cache returned"):
        ops.linear_backward(np.ones((2, 4)), ops.relu(np.ones((2, 4)))[1])


# --- dropout --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dropout_scales_kept_values_and_routes_the_gradient(dtype):
    rate = 0.25
    x = np.random.default_rng(0).standard_normal((40, 50)).astype(dtype) + 3.0  # nonzero
    y, cache = ops.dropout(x, rate, np.random.default_rng(7))
    dy = np.random.default_rng(1).standard_normal(x.shape).astype(dtype)
    dx = ops.dropout_backward(dy, cache)
    assert y.dtype == dtype and dx.dtype == dtype and cache.saved.dtype == dtype
    kept = y != 0
    scale = dtype(1.0 / (1.0 - rate))
    np.testing.assert_array_equal(y[kept], x[kept] * scale)
    np.testing.assert_array_equal(dx[kept], dy[kept] * scale)
    np.testing.assert_array_equal(dx[~kept], 0)
    assert 0 < kept.sum() < x.size


def test_dropout_same_seed_same_mask():
    x = np.ones((30, 30), np.float32)
    y1, _ = ops.dropout(x, 0.5, 123)
    y2, _ = ops.dropout(x, 0.5, np.random.default_rng(123))
    y3, _ = ops.dropout(x, 0.5, 124)
    np.testing.assert_array_equal(y1, y2)
    assert not np.array_equal(y1, y3)
    rng = np.random.default_rng(5)
    first, _ = ops.dropout(x, 0.5, rng)
    second, _ = ops.dropout(x, 0.5, rng)  # the generator advances
    assert not np.array_equal(first, second)


@pytest.mark.parametrize("rate", [0.1, 0.5, 0.9])
def test_dropout_preserves_the_mean(rate):
    n = 200_000
    x = np.ones(n, np.float32)
    y, _ = ops.dropout(x, rate, np.random.default_rng(11))
    # Each y_i is 1/(1-rate) with probability 1-rate, else 0: mean 1, variance rate/(1-rate).
    sigma = np.sqrt(rate / (1 - rate) / n)
    assert abs(float(y.astype(np.float64).mean()) - 1.0) < 5 * sigma
    kept = np.count_nonzero(y) / n
    assert abs(kept - (1 - rate)) < 5 * np.sqrt(rate * (1 - rate) / n)


def test_dropout_identity_cases_draw_nothing():
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    dy = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    for kwargs in ({"rate": 0.0}, {"rate": 0.7, "training": False}):
        rng = np.random.default_rng(3)
        state = rng.bit_generator.state
        y, cache = ops.dropout(x, rng=rng, **kwargs)
        assert y is x and rng.bit_generator.state == state
        assert ops.dropout_backward(dy, cache) is dy


def test_dropout_backward_matches_finite_differences():
    x = np.random.default_rng(0).standard_normal((3, 5))
    dy = np.random.default_rng(1).standard_normal((3, 5))
    _, cache = ops.dropout(x, 0.4, 9)
    dx = ops.dropout_backward(dy, cache)
    numeric, fd_error = numeric_gradient(lambda: np.sum(ops.dropout(x, 0.4, 9)[0] * dy), x,
                                         with_error=True)
    assert_gradient_close(dx, numeric, fd_error, what="dropout dx")


def test_dropout_mask_matches_torch_semantics():
    # Same mask in both: torch's dropout is x * bernoulli(1 - p) / (1 - p).
    x = np.random.default_rng(0).standard_normal((6, 7))
    y, cache = ops.dropout(x, 0.3, 4)
    keep = torch.tensor(y != 0)
    tx = torch.tensor(x, requires_grad=True)
    ty = tx * keep / (1 - 0.3)
    dy = np.random.default_rng(1).standard_normal(x.shape)
    ty.backward(torch.tensor(dy))
    # One product with the kept-scale each (torch: a product and a division).
    scale = 1 / (1 - 0.3)
    assert_close(y, ty.detach().numpy(), dtype=np.float64, scale=scale * np.abs(x).max(),
                 what="forward")
    assert_close(ops.dropout_backward(dy, cache), tx.grad.numpy(), dtype=np.float64,
                 scale=scale * np.abs(dy).max(), what="dx")


def test_dropout_allocates_no_float64_temporary():
    x = np.ones(1_000_000, np.float32)  # 4 MB
    ops.dropout(x, 0.5, 0)  # warm up (first-call allocations of NumPy internals)
    tracemalloc.start()
    try:
        ops.dropout(x, 0.5, 0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # mask (4 MB) + keep flags (1 MB) + y (4 MB); a float64 draw would add 8 MB.
    assert peak < 10e6, f"peak {peak / 1e6:.1f} MB"


@pytest.mark.parametrize("kwargs, error, message", [
    ({"rate": 1.0, "rng": 0}, ValueError, r"dropout: 'rate' must be a finite real number >= 0 and"
                                          r" < 1; received 1.0"),
    ({"rate": -0.1, "rng": 0}, ValueError, r"dropout: 'rate' must be"),
    ({"rate": "0.5", "rng": 0}, TypeError, r"dropout: 'rate' must be"),
    ({"rate": True, "rng": 0}, TypeError, r"dropout: 'rate' must be"),
    ({"rate": 0.5, "rng": None}, TypeError,
     r"dropout: 'rng' must be a numpy.random.Generator or an int seed; received None"),
    ({"rate": 0.5, "rng": -1}, ValueError, r"dropout: 'rng' must be an int seed >= 0; received -1"),
    ({"rate": 0.5, "rng": np.random.RandomState(0)}, TypeError, r"dropout: 'rng' must be"),
    ({"rate": 0.5, "rng": 0, "training": "yes"}, TypeError, r"dropout: 'training' must be a bool"),
])
def test_dropout_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        ops.dropout(np.ones((2, 3)), **kwargs)


def test_dropout_bad_inputs():
    with pytest.raises(TypeError, match=r"dropout: 'x' must have dtype float32 or float64"):
        ops.dropout(np.ones(3, int), 0.5, 0)
    _, cache = ops.dropout(np.ones((2, 3)), 0.5, 0)
    with pytest.raises(ValueError, match=r"dropout_backward: 'dy' must have the forward output"):
        ops.dropout_backward(np.ones((3, 2)), cache)
    with pytest.raises(TypeError, match=r"dropout_backward: 'dy' must have the forward dtype"):
        ops.dropout_backward(np.ones((2, 3), np.float32), cache)
    with pytest.raises(TypeError, match=r"dropout_backward: 'cache' must be the cache returned"):
        ops.dropout_backward(np.ones((2, 3)), ops.linear(np.ones((2, 3)), np.ones((3, 3)))[1])
