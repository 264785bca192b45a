"""Generic tests driven by the op case table: every op, forward and every gradient,
against its loop twin, central finite differences and torch."""

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import reference
from handgrad.testing import assert_close, assert_gradient_close

from optable import CASES, assert_results_close, finite_difference, loops, run, vectorized
from tolerances import selection_bounds

CASE_IDS = [c.id for c in CASES]
#: the cases of the ops that have a loop twin (``handgrad.ops.reference``)
TWIN_CASES = [c for c in CASES if hasattr(reference, c.op)]
pytestmark = pytest.mark.usefixtures("kernel_path")


@pytest.mark.parametrize("case", TWIN_CASES, ids=[c.id for c in TWIN_CASES])
def test_vectorized_matches_loop_twin(case):
    arrays = case.inputs()
    y, dy, grads = vectorized(case, arrays)
    y_ref, _, grads_ref = loops(case, arrays)
    assert_results_close(case, arrays, dy, (y, grads), (y_ref, grads_ref), np.float64,
                         "vs loop twin")


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_backward_matches_finite_differences(case):
    if case.ties:
        pytest.skip("max with ties is not differentiable; covered by torch and loop twins")
    if not case.derivative:
        pytest.skip("the backward is a convention here; covered by torch and loop twins")
    arrays = case.inputs()
    _, dy, grads = vectorized(case, arrays)
    for i, name, grad in zip(case.differentiable, case.names, grads):
        if arrays[i] is None:
            assert grad is None, f"{case.op}: gradient for absent input {name}"
            continue
        numeric, fd_error = finite_difference(case, arrays, i, dy)
        assert_gradient_close(grad, numeric, fd_error, what=f"d{name} vs finite differences")


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_matches_torch(case, dtype):
    twins = pytest.importorskip("torch_twins")
    arrays = case.inputs(dtype)
    y, dy, grads = vectorized(case, arrays)
    try:
        y_torch, grads_torch = twins.torch_run(case, arrays, dy)
    except NotImplementedError as reason:  # e.g. torch pooling: no 'same' padding
        pytest.skip(str(reason))
    assert_results_close(case, arrays, dy, (y, grads), (y_torch, grads_torch), dtype,
                         "vs torch")


def _non_contiguous(a):
    """The same values as a strided view of a larger, transposed buffer."""
    if a is None:
        return None
    view = np.zeros((*a.shape[::-1], 2), dtype=a.dtype)[..., 1].T
    view[...] = a
    # (an array of one entry, such as PReLU's single slope, is contiguous as any view)
    assert (a.size <= 1 or not view.flags.c_contiguous) and np.array_equal(view, a)
    return view


@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_non_contiguous_inputs_give_identical_results(case):
    arrays = case.inputs()
    y, dy, grads = run(ops, case, arrays)
    strided = [_non_contiguous(a) if isinstance(a, np.ndarray) else a for a in arrays]
    y2, _, grads2 = run(ops, case, strided, _non_contiguous(dy))
    np.testing.assert_array_equal(y, y2)
    for a, b in zip(grads, grads2):
        if a is None:
            assert b is None
        else:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_dtype_is_preserved(case, dtype):
    arrays = case.inputs(dtype)
    y, _, grads = vectorized(case, arrays)
    assert y.dtype == dtype
    for grad in grads:
        assert grad is None or grad.dtype == dtype


def test_cache_holds_no_im2col_matrix(kernel_path):
    x = np.random.default_rng(0).standard_normal((4, 16, 16, 8))
    w = np.random.default_rng(1).standard_normal((3, 3, 8, 8))
    _, cache = ops.conv2d(x, w, padding=1)
    held = [v for v in vars(cache).values() if isinstance(v, np.ndarray)]
    assert sum(a.nbytes for a in held) == x.nbytes + w.nbytes
    y, pool_cache = ops.max_pool2d(x, 2)
    held = [v for v in vars(pool_cache).values() if isinstance(v, np.ndarray)]
    if kernel_path == "compiled":  # one winner index per output, int16 (256 positions)
        assert len(held) == 1 and held[0].dtype == np.int16 and held[0].shape == y.shape
    else:  # the input itself (no copy) and the output
        assert len(held) == 2 and pool_cache.x is x and pool_cache.y is y


def test_max_pool_tie_goes_to_first_maximum_only():
    # EpyNN sends the gradient to every tied maximum (sum 16 instead of 4).
    x = np.ones((1, 4, 4, 1))
    y, cache = ops.max_pool2d(x, 2)
    dx = ops.max_pool2d_backward(np.ones_like(y), cache)
    assert dx.sum() == 4
    expected = np.zeros((4, 4))
    expected[::2, ::2] = 1
    np.testing.assert_array_equal(dx[0, :, :, 0], expected)


def test_max_pool_padding_never_wins_on_negative_input():
    # numpy-ml pads max pooling with 0, which beats every negative input.
    x = -np.arange(1, 10, dtype=np.float64).reshape(1, 3, 3, 1)
    y, cache = ops.max_pool2d(x, 3, stride=1, padding=1)
    assert np.all(y < 0)
    dx = ops.max_pool2d_backward(np.ones_like(y), cache)
    assert dx.sum() == y.size


def test_avg_pool_backward_is_not_zero():
    # EpyNN's average-pool backward returns zeros.
    x = np.random.default_rng(0).standard_normal((2, 4, 4, 3))
    y, cache = ops.avg_pool2d(x, 2)
    dx = ops.avg_pool2d_backward(np.ones_like(y), cache)
    np.testing.assert_allclose(dx, 0.25)


@pytest.mark.parametrize("nd", [1, 2])
def test_same_average_pooling_excludes_the_padding_as_tensorflow(nd):
    """padding="same" averages the input values only (TensorFlow), so all-ones stay ones:
    the padded corner was 0.25 when the padding counted (PyTorch's default for numbers)."""
    from handgrad import layers as L
    from handgrad.ops import reference

    op, twin = (ops.avg_pool1d, reference.avg_pool1d) if nd == 1 else \
        (ops.avg_pool2d, reference.avg_pool2d)
    x = np.ones((2, *(3,) * nd, 2))
    for fn in (op, twin):
        y, _ = fn(x, 2, padding="same")
        assert y.shape == (2, *(2,) * nd, 2)
        np.testing.assert_array_equal(y, 1.0)
        counted, _ = fn(x, 2, padding="same", count_include_pad=True)  # asked for
        assert counted[(0, *(-1,) * nd, 0)] == 0.5 ** nd
    layer = (L.AvgPool1D if nd == 1 else L.AvgPool2D)(2, padding="same")
    np.testing.assert_array_equal(layer.forward(x), 1.0)
    # the gradient of the same divisors: each corner output is its one input value
    z = np.random.default_rng(0).standard_normal(x.shape)
    y, cache = op(z, 2, padding="same")
    y_ref, cache_ref = twin(z, 2, padding="same")
    dy = np.random.default_rng(1).standard_normal(y.shape)
    assert_close(y, y_ref, terms=2 ** nd, scale=np.abs(z).max())
    assert_close(getattr(ops, op.__name__ + "_backward")(dy, cache),
                 getattr(reference, op.__name__ + "_backward")(dy, cache_ref),
                 terms=2 ** nd, scale=np.abs(dy).max(), what="dx")
    assert y[(0, *(-1,) * nd, 0)] == z[(0, *(-1,) * nd, 0)]


def test_same_padding_at_stride_two_halves_the_size():
    # numpy-ml keeps the input size for 'same' at stride 2.
    x = np.zeros((1, 7, 8, 1))
    y, _ = ops.conv2d(x, np.zeros((3, 3, 1, 1)), stride=2, padding="same")
    assert y.shape == (1, 4, 4, 1)
    y, _ = ops.conv1d(np.zeros((1, 10, 1)), np.zeros((3, 1, 1)), stride=3, padding="same")
    assert y.shape == (1, 4, 1)


def test_causal_conv1d_does_not_look_ahead():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 12, 2))
    w = rng.standard_normal((3, 2, 2))
    y, _ = ops.conv1d(x, w, padding="causal", dilation=2)
    x_future = x.copy()
    x_future[:, 7:] += 1.0
    y_future, _ = ops.conv1d(x_future, w, padding="causal", dilation=2)
    assert y.shape == x.shape[:2] + (2,)
    np.testing.assert_array_equal(y[:, :7], y_future[:, :7])
    assert np.all(y[:, 7:] != y_future[:, 7:])  # every later output sees the change


@pytest.mark.parametrize("kwargs", [{"kernel_size": 2}, {"kernel_size": 3, "padding": 1,
                                                          "stride": 1}])
def test_max_pool_nan_and_minus_inf_windows_match_torch(kwargs):
    """A NaN wins its window (its gradient goes to the last NaN); a window of -inf
    inputs credits its first input, never the padding."""
    twins = pytest.importorskip("torch_twins")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 6, 6, 3))
    x[0, 0, 0, 0] = x[0, 1, 1, 0] = np.nan
    x[1, 2:4, 2:4, 1] = -np.inf
    y, cache = ops.max_pool2d(x, **kwargs)
    dy = rng.standard_normal(y.shape)
    dx = ops.max_pool2d_backward(dy, cache)
    tx = twins.to_torch(x)
    ty = twins.F.max_pool2d(tx, **kwargs)
    ty.backward(twins.to_torch(dy, False))
    np.testing.assert_array_equal(y, twins.from_torch(ty))
    terms, scale = selection_bounds("max_pool2d", [x], dy, kwargs)[1]
    assert_close(dx, twins.from_torch(tx.grad), dtype=np.float64, terms=terms, scale=scale,
                 what="dx")


def test_every_declared_op_is_in_a_parity_table():
    """Every declared op (each has a backward) is run against torch, against its loop
    twin where it has one, and against finite differences: a non-activation op by its
    declared samples here, an activation by ``test_activations.py``'s table."""
    from test_activations import CASES as ACTIVATION_CASES

    tabled = {case.op for case in CASES}
    activations = {decl.name for decl, _ in ACTIVATION_CASES.values()}
    for decl in ops.DECLARED.values():
        assert decl.backward is not None and decl.torch is not None, decl.name
        if decl.layer:
            assert decl.name in activations, f"{decl.name}: not in the activation table"
            continue
        assert decl.name in tabled, f"{decl.name}: no declared Sample"
        cases = [case for case in CASES if case.op == decl.name]
        assert hasattr(reference, decl.name) == (decl.name in {c.op for c in TWIN_CASES})
        assert any(case.derivative and not case.ties for case in cases), \
            f"{decl.name}: no sample checks finite differences"
        twins = pytest.importorskip("torch_twins")
        expressible = []
        for case in cases:
            arrays = case.inputs()
            try:
                twins.torch_run(case, arrays, vectorized(case, arrays)[1])
            except NotImplementedError:
                continue
            expressible.append(case)
        assert expressible, f"{decl.name}: torch can express none of its samples"
