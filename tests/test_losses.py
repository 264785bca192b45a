"""Losses: torch twins (value and gradient), finite differences, extremes, errors, ``get``."""

import numpy as np
import pytest

from handgrad import losses
from handgrad.testing import assert_close, assert_gradient_close, numeric_gradient

from tolerances import assert_entries_close, cross_entropy_sizes, loss_bounds, pair_loss_sizes

torch = pytest.importorskip("torch")
F = torch.nn.functional

DTYPES = [np.float64, np.float32]
REDUCTIONS = ["mean", "sum", "none"]
DTYPE_IDS = ["float64", "float32"]


def _check_against(ours, t_input, t_loss, reduction, dtype, sizes, terms=1,
                   to_ours=lambda g: g):
    """Compare (loss, dinput) with a torch loss of ``t_input``, within the tolerances
    from ``sizes`` (the items' and the gradient's term sizes, ``terms`` an item); for
    "none", with a random upstream gradient applied to both (ours: the gradient of the
    sum, times that)."""
    loss, grad = ours
    upstream = None
    if reduction == "none":
        upstream = np.random.default_rng(9).standard_normal(loss.shape).astype(dtype)
        t_loss.backward(torch.tensor(upstream))
        assert loss.dtype == dtype
        expected = t_loss.detach().numpy()
        grad = grad * upstream[..., None] if grad.ndim > upstream.ndim else grad * upstream
    else:
        t_loss.backward()
        assert isinstance(loss, float)
        expected = t_loss.item()
    assert grad.dtype == dtype
    (loss_terms, loss_scale), (grad_terms, grad_scale) = loss_bounds(
        *sizes, reduction, terms, upstream)
    assert_close(loss, expected, dtype=dtype, terms=loss_terms, scale=loss_scale, what="loss")
    assert_close(grad, to_ours(t_input.grad.numpy()), dtype=dtype, terms=grad_terms,
                 scale=grad_scale, what="dinput")


def _channels_first(a):
    return torch.tensor(np.ascontiguousarray(np.moveaxis(a, -1, 1)), requires_grad=True)


def _channels_last(a):
    return np.moveaxis(a, 1, -1)


# --- softmax cross-entropy ------------------------------------------------------------------

CE_SHAPES = [(6, 5), (3, 4, 5), (2, 3, 2, 4)]


@pytest.mark.parametrize("label_smoothing", [0.0, 0.1, 1.0])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", CE_SHAPES, ids=str)
def test_cross_entropy_class_ids_match_torch(shape, dtype, reduction, label_smoothing):
    rng = np.random.default_rng(0)
    logits = (3 * rng.standard_normal(shape)).astype(dtype)
    labels = rng.integers(0, shape[-1], shape[:-1])
    ours = losses.softmax_cross_entropy(logits, labels, label_smoothing=label_smoothing,
                                        reduction=reduction)
    t = _channels_first(logits)
    t_loss = F.cross_entropy(t, torch.tensor(labels), label_smoothing=label_smoothing,
                             reduction=reduction)
    sizes = cross_entropy_sizes(logits, labels, label_smoothing)
    _check_against(ours, t, t_loss, reduction, dtype, sizes, shape[-1], _channels_last)


@pytest.mark.parametrize("label_smoothing", [0.0, 0.2])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", CE_SHAPES, ids=str)
def test_cross_entropy_probability_targets_match_torch(shape, dtype, reduction,
                                                       label_smoothing):
    rng = np.random.default_rng(1)
    logits = (3 * rng.standard_normal(shape)).astype(dtype)
    targets = rng.random(shape).astype(dtype)  # torch does not require rows summing to 1
    ours = losses.softmax_cross_entropy(logits, targets, label_smoothing=label_smoothing,
                                        reduction=reduction)
    t = _channels_first(logits)
    t_targets = torch.tensor(np.ascontiguousarray(np.moveaxis(targets, -1, 1)))
    t_loss = F.cross_entropy(t, t_targets, label_smoothing=label_smoothing, reduction=reduction)
    sizes = cross_entropy_sizes(logits, targets, label_smoothing)
    _check_against(ours, t, t_loss, reduction, dtype, sizes, shape[-1], _channels_last)


def _assert_matches_finite_differences(loss_fn, x, what):
    """The gradient ``loss_fn(x)[1]`` against central differences of ``loss_fn(x)[0]``."""
    numeric, fd_error = numeric_gradient(lambda: loss_fn(x)[0], x, with_error=True)
    assert_gradient_close(loss_fn(x)[1], numeric, fd_error, what=what)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_cross_entropy_gradient_matches_finite_differences(reduction):
    rng = np.random.default_rng(2)
    logits = rng.standard_normal((3, 2, 4))
    labels = rng.integers(0, 4, (3, 2))
    targets = rng.random((3, 2, 4))
    for y in (labels, targets):
        def fn(z, y=y):
            return losses.softmax_cross_entropy(z, y, label_smoothing=0.1, reduction=reduction)
        _assert_matches_finite_differences(fn, logits, "dlogits")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cross_entropy_is_stable_at_1000(dtype):
    logits = np.array([[1000.0, -1000.0, 0.0], [-1000.0, 1000.0, 1000.0]], dtype=dtype)
    labels = np.array([1, 0])
    loss, grad = losses.softmax_cross_entropy(logits, labels, reduction="none")
    assert np.all(np.isfinite(loss)) and np.all(np.isfinite(grad))
    # Full relative accuracy; each row sums its 3 classes.
    assert_entries_close(loss, [2000.0, 2000.0 + np.log(2.0)], dtype=dtype, terms=3,
                         what="loss")
    (_, (terms, scale)) = loss_bounds(*cross_entropy_sizes(logits, labels), "none", 3)
    assert_close(grad, [[1.0, -1.0, 0.0], [-1.0, 0.5, 0.5]], dtype=dtype, terms=terms,
                 scale=scale, what="dlogits")
    t = torch.tensor(logits, requires_grad=True)
    t_loss = F.cross_entropy(t, torch.tensor(labels), label_smoothing=0.3)
    ours = losses.softmax_cross_entropy(logits, labels, label_smoothing=0.3)
    _check_against(ours, t, t_loss, "mean", dtype, cross_entropy_sizes(logits, labels, 0.3), 3)


def test_cross_entropy_accepts_lists_and_non_contiguous_logits():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((5, 4))
    labels = [0, 3, 1, 1, 2]
    loss, grad = losses.softmax_cross_entropy(logits, labels)
    view = np.asfortranarray(logits)
    loss2, grad2 = losses.softmax_cross_entropy(view[:, :], np.array(labels, np.int32))
    assert loss == loss2
    np.testing.assert_array_equal(grad, grad2)


@pytest.mark.parametrize("labels, error, message", [
    (np.array([0, 4, 1]), ValueError,
     r"softmax_cross_entropy: 'labels' must be class ids in \[0, 4\); received label 4 at "
     r"index \(1,\)"),
    (np.array([0, 1, -1]), ValueError, r"received label -1 at index \(2,\)"),
    (np.array([[0, 1, 2]]), ValueError,
     r"integer 'labels' must have shape \(3,\) .*; received shape \(1, 3\)"),
    (np.array([True, False, True]), TypeError,
     r"'labels' must be integer class ids or float probability targets"),
    (np.ones((3, 4), np.float32), TypeError,
     r"softmax_cross_entropy: 'labels' has dtype float32 but 'logits' has dtype float64"),
    (np.ones((3, 5)), ValueError,
     r"probability 'labels' must have the logits' shape \(3, 4\); received shape \(3, 5\)"),
])
def test_cross_entropy_bad_labels(labels, error, message):
    with pytest.raises(error, match=message):
        losses.softmax_cross_entropy(np.zeros((3, 4)), labels)


def test_cross_entropy_bad_arguments():
    ce = losses.softmax_cross_entropy
    with pytest.raises(ValueError, match=r"'logits' must be an array of shape \(N, C\)"):
        ce(np.zeros(4), np.array(1))
    with pytest.raises(TypeError, match=r"softmax_cross_entropy: 'logits' must have dtype"):
        ce(np.zeros((2, 3), int), np.array([0, 1]))
    with pytest.raises(ValueError, match=r"'label_smoothing' must be a finite real number >= 0"):
        ce(np.zeros((2, 3)), np.array([0, 1]), label_smoothing=1.5)
    with pytest.raises(ValueError, match=r"'reduction' must be one of 'mean', 'sum', 'none'"):
        ce(np.zeros((2, 3)), np.array([0, 1]), reduction="avg")
    with pytest.raises(ValueError, match=r"'logits' must not be empty"):
        ce(np.zeros((0, 3)), np.zeros(0, int))


# --- binary cross-entropy and regression losses -----------------------------------------------

BCE = "binary_cross_entropy"
BCE_LOGITS = "binary_cross_entropy_with_logits"
TORCH_PAIRS = {
    BCE: lambda a, b, r: F.binary_cross_entropy(a, b, reduction=r),
    BCE_LOGITS: lambda a, b, r: F.binary_cross_entropy_with_logits(a, b, reduction=r),
    "mse": lambda a, b, r: F.mse_loss(a, b, reduction=r),
    "mae": lambda a, b, r: F.l1_loss(a, b, reduction=r),
    "huber": lambda a, b, r: F.huber_loss(a, b, reduction=r),
    "huber-0.5": lambda a, b, r: F.huber_loss(a, b, reduction=r, delta=0.5),
    "smooth_l1": lambda a, b, r: F.smooth_l1_loss(a, b, reduction=r),
    "smooth_l1-0.5": lambda a, b, r: F.smooth_l1_loss(a, b, reduction=r, beta=0.5),
    "smooth_l1-0": lambda a, b, r: F.smooth_l1_loss(a, b, reduction=r, beta=0.0),
}
KINKED = ("mae", "huber", "huber-0.5", "smooth_l1", "smooth_l1-0.5", "smooth_l1-0")


def _pair_inputs(name, shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    pred = (2 * rng.standard_normal(shape)).astype(dtype)
    if name == BCE_LOGITS:
        return pred, rng.random(shape).astype(dtype)
    if name == BCE:  # probabilities away from 0 and 1, where finite differences work
        return (0.05 + 0.9 * rng.random(shape)).astype(dtype), rng.random(shape).astype(dtype)
    target = (2 * rng.standard_normal(shape)).astype(dtype)
    flat_p, flat_t = pred.reshape(-1), target.reshape(-1)
    flat_t[0] = flat_p[0]  # a zero residual: mae'(0) = 0, as torch
    if flat_p.size > 2:
        flat_t[1] = flat_p[1] - dtype(1.0)  # |d| == delta for huber (delta = 1)
        flat_t[2] = flat_p[2] + dtype(0.5)  # |d| == delta for huber-0.5
    return pred, target


def _loss_fn(name):
    base, _, delta = name.partition("-")
    fn = losses.get(base)
    if delta:
        key = "beta" if base == "smooth_l1" else "delta"
        return lambda a, b, **kw: fn(a, b, **{key: float(delta)}, **kw)
    return fn


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
@pytest.mark.parametrize("shape", [(7,), (4, 5), (2, 3, 4)], ids=str)
@pytest.mark.parametrize("name", list(TORCH_PAIRS))
def test_pair_losses_match_torch(name, shape, dtype, reduction):
    pred, target = _pair_inputs(name, shape, dtype)
    ours = _loss_fn(name)(pred, target, reduction=reduction)
    t = torch.tensor(pred, requires_grad=True)
    t_loss = TORCH_PAIRS[name](t, torch.tensor(target), reduction)
    base, _, delta = name.partition("-")
    sizes = pair_loss_sizes(base, pred, target, float(delta or 1.0))
    _check_against(ours, t, t_loss, reduction, dtype, sizes)


@pytest.mark.parametrize("name", list(TORCH_PAIRS))
def test_pair_losses_match_finite_differences(name):
    pred, target = _pair_inputs(name, (3, 4), np.float64, seed=4)
    pred[np.abs(np.abs(pred - target) - 1.0) < 1e-3] += 0.01  # away from kinks
    pred[np.abs(np.abs(pred - target) - 0.5) < 1e-3] += 0.01
    pred[np.abs(pred - target) < 1e-3] += 0.01
    for reduction in ("mean", "sum"):
        def fn(p, reduction=reduction):
            return _loss_fn(name)(p, target, reduction=reduction)
        _assert_matches_finite_differences(fn, pred, f"{name} {reduction}")


def test_kink_gradients_match_torch_elementwise():
    pred = np.array([1.0, 2.0, -1.0, 3.0])
    target = np.array([1.0, 1.0, 0.0, 2.5])  # d = 0, delta, -delta, 0.5
    for name in KINKED:
        _, grad = _loss_fn(name)(pred, target, reduction="sum")
        t = torch.tensor(pred, requires_grad=True)
        TORCH_PAIRS[name](t, torch.tensor(target), "sum").backward()
        np.testing.assert_array_equal(grad, t.grad.numpy())
    assert losses.mae(pred, target, reduction="sum")[1][0] == 0.0


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_binary_cross_entropy_with_logits_is_stable_at_1000(dtype):
    logits = np.array([1000.0, -1000.0, 1000.0, -1000.0, 0.0], dtype=dtype)
    targets = np.array([1.0, 0.0, 0.0, 1.0, 0.5], dtype=dtype)
    loss, grad = losses.binary_cross_entropy_with_logits(logits, targets, reduction="none")
    assert loss.dtype == dtype and grad.dtype == dtype
    assert_entries_close(loss, [0.0, 0.0, 1000.0, 1000.0, np.log(2.0)], dtype=dtype,
                         what="loss")
    np.testing.assert_array_equal(grad, [0.0, 0.0, 1.0, -1.0, 0.0])
    t = torch.tensor(logits, requires_grad=True)
    t_loss = F.binary_cross_entropy_with_logits(t, torch.tensor(targets))
    ours = losses.binary_cross_entropy_with_logits(logits, targets)
    sizes = pair_loss_sizes(BCE_LOGITS, logits, targets)
    _check_against(ours, t, t_loss, "mean", dtype, sizes)


@pytest.mark.parametrize("name", [BCE, BCE_LOGITS, "mse", "mae", "huber", "smooth_l1"])
def test_pair_losses_bad_inputs(name):
    fn = losses.get(name)
    first, second = {BCE: ("probabilities", "targets"),
                     BCE_LOGITS: ("logits", "targets")}.get(name, ("pred", "target"))
    with pytest.raises(ValueError, match=rf"{name}: '{second}' must have the shape of '{first}'"):
        fn(np.zeros((2, 3)), np.zeros((3, 2)))
    with pytest.raises(TypeError, match=rf"{name}: '{second}' has dtype float32 but '{first}'"):
        fn(np.zeros((2, 3)), np.zeros((2, 3), np.float32))
    with pytest.raises(TypeError, match=rf"{name}: '{first}' must have dtype float32 or float64"):
        fn(np.zeros((2, 3), int), np.zeros((2, 3)))
    with pytest.raises(TypeError, match=rf"{name}: '{second}' must be an array"):
        fn(np.zeros((2, 3)), "target")
    with pytest.raises(ValueError, match=rf"{name}: 'reduction' must be one of"):
        fn(np.zeros((2, 3)), np.zeros((2, 3)), reduction="batchmean")
    with pytest.raises(ValueError, match=rf"{name}: '{first}' must not be empty"):
        fn(np.zeros((0, 3)), np.zeros((0, 3)))


@pytest.mark.parametrize("delta, error", [(0.0, ValueError), (-1.0, ValueError),
                                          (float("inf"), ValueError), ("1", TypeError)])
def test_huber_bad_delta(delta, error):
    with pytest.raises(error, match=r"huber: 'delta' must be a finite real number > 0"):
        losses.huber(np.zeros(3), np.zeros(3), delta=delta)


@pytest.mark.parametrize("name", ["cross_entropy", BCE, BCE_LOGITS, "mse", "mae", "huber",
                                  "smooth_l1"])
def test_float32_stays_float32(name):
    rng = np.random.default_rng(5)
    pred = rng.random((4, 3)).astype(np.float32)
    second = rng.integers(0, 3, 4) if name == "cross_entropy" else np.zeros((4, 3), np.float32)
    for reduction in REDUCTIONS:
        loss, grad = losses.get(name)(pred, second, reduction=reduction)
        assert grad.dtype == np.float32
        assert isinstance(loss, float) if reduction != "none" else loss.dtype == np.float32


# --- get --------------------------------------------------------------------------------------


def test_get():
    assert losses.get("cross_entropy") is losses.softmax_cross_entropy
    assert losses.get("softmax_cross_entropy") is losses.softmax_cross_entropy
    assert losses.get("binary_cross_entropy") is losses.binary_cross_entropy
    assert losses.get(BCE_LOGITS) is losses.binary_cross_entropy_with_logits
    assert losses.get("smooth_l1") is losses.smooth_l1
    assert losses.get("MSE") is losses.mse
    assert losses.get("mae") is losses.mae and losses.get("huber") is losses.huber

    def custom(pred, target):
        return 0.0, pred

    assert losses.get(custom) is custom
    with pytest.raises(ValueError, match=r"get: unknown loss 'l2'; valid names are "
                                         r"'cross_entropy', 'softmax_cross_entropy', "
                                         r"'sparse_categorical_crossentropy', .*'smooth_l1'"):
        losses.get("l2")
    with pytest.raises(TypeError, match=r"get: 'name_or_callable' must be a loss name"):
        losses.get(3)
