"""Normalization kernels (batch, instance, layer, group norm): torch twins, loop twins,
finite differences, running statistics, non-contiguous inputs, dtypes and errors.

Layout conversion for torch: handgrad is channels-last, so ``x`` (N, *S, C) is moved
to (N, C, *S) for ``F.batch_norm``/``F.instance_norm``/``F.group_norm`` (gamma, beta
and the running statistics are (C,) in both); ``F.layer_norm`` normalizes trailing
axes in both libraries, so nothing moves.
"""

from dataclasses import dataclass, field

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import reference

from optable import assert_close

torch = pytest.importorskip("torch")
F = torch.nn.functional

TOLERANCES = [(np.float64, 1e-10), (np.float32, 1e-4)]
MOMENTUM = 0.3


@dataclass
class NormCase:
    """One sample call: op, x shape, which of gamma/beta exist, running statistics,
    training (statistics of x) or evaluation (running statistics), extra keywords."""

    op: str
    shape: tuple
    gamma: bool = True
    beta: bool = True
    running: bool = False
    train: bool = True
    kwargs: dict = field(default_factory=dict)

    @property
    def id(self):
        flags = [f"{k}={v}" for k, v in self.kwargs.items()]
        flags += [n for n, on in (("gamma", self.gamma), ("beta", self.beta),
                                  ("running", self.running)) if on]
        mode = "train" if self.train else "eval"
        return "-".join([self.op, "x".join(map(str, self.shape)), mode, *flags])

    @property
    def param_shape(self):
        if self.op == "layer_norm":
            return tuple(np.atleast_1d(self.kwargs["normalized_shape"]))
        return self.shape[-1:]


CASES = [
    NormCase("batch_norm", (6, 3), running=True),
    NormCase("batch_norm", (4, 5, 3), gamma=False, beta=False, running=True),
    NormCase("batch_norm", (3, 4, 5, 2), running=True, kwargs={"eps": 1e-3}),
    NormCase("batch_norm", (2, 3, 2, 2, 3), running=True),  # (N, D, H, W, C)
    NormCase("batch_norm", (4, 5, 3), beta=False),  # no running statistics
    NormCase("batch_norm", (2, 4, 3, 3), running=True, train=False),
    NormCase("batch_norm", (6, 3), gamma=False, running=True, train=False),
    NormCase("instance_norm", (3, 7, 4), running=True),
    NormCase("instance_norm", (2, 4, 5, 3), gamma=False, beta=False),
    NormCase("instance_norm", (2, 4, 5, 3), running=True, train=False),
    NormCase("layer_norm", (5, 6), kwargs={"normalized_shape": 6}),
    NormCase("layer_norm", (2, 3, 4, 5), gamma=False, beta=False,
             kwargs={"normalized_shape": (4, 5)}),
    NormCase("layer_norm", (3, 4), beta=False, kwargs={"normalized_shape": (3, 4), "eps": 1e-3}),
    NormCase("group_norm", (6, 8), kwargs={"num_groups": 2}),
    NormCase("group_norm", (2, 5, 6), gamma=False, beta=False, kwargs={"num_groups": 3}),
    NormCase("group_norm", (2, 3, 4, 6), kwargs={"num_groups": 1}),
    NormCase("group_norm", (2, 3, 4, 6), beta=False, kwargs={"num_groups": 6}),
]
IDS = [c.id for c in CASES]
table = pytest.mark.parametrize("case", CASES, ids=IDS)


def inputs(case, dtype=np.float64, seed=0):
    """x, gamma, beta, running_mean, running_var (None where the case has none)."""
    rng = np.random.default_rng(seed)
    x = (1.5 * rng.standard_normal(case.shape) + 0.5).astype(dtype)
    gamma = rng.standard_normal(case.param_shape).astype(dtype) if case.gamma else None
    beta = rng.standard_normal(case.param_shape).astype(dtype) if case.beta else None
    rm = rv = None
    if case.running:
        rm = rng.standard_normal(case.shape[-1]).astype(dtype)
        rv = rng.uniform(0.5, 2.0, case.shape[-1]).astype(dtype)
    return x, gamma, beta, rm, rv


def forward(module, case, x, gamma, beta, rm, rv):
    """The op of ``module`` (handgrad.ops or its loop twins) on the case's arguments."""
    kw = dict(case.kwargs)
    if case.op == "batch_norm":
        return module.batch_norm(x, gamma, beta, rm, rv, training=case.train,
                                 momentum=MOMENTUM, **kw)
    if case.op == "instance_norm":
        return module.instance_norm(x, gamma, beta, rm, rv, use_input_stats=case.train,
                                    momentum=MOMENTUM, **kw)
    if case.op == "layer_norm":
        return module.layer_norm(x, kw.pop("normalized_shape"), gamma, beta, **kw)
    return module.group_norm(x, kw.pop("num_groups"), gamma, beta, **kw)


def run(module, case, arrays, dy_seed=1):
    """(y, dy, (dx, dgamma, dbeta), running_mean, running_var after the call)."""
    x, gamma, beta, rm, rv = (None if a is None else a.copy() for a in arrays)
    y, cache = forward(module, case, x, gamma, beta, rm, rv)
    dy = np.random.default_rng(dy_seed).standard_normal(y.shape).astype(y.dtype)
    grads = getattr(module, case.op + "_backward")(dy, cache)
    return y, dy, grads, rm, rv


def channels_first(a):
    return torch.tensor(np.ascontiguousarray(np.moveaxis(a, -1, 1)))


def channels_last(t):
    return np.moveaxis(t.detach().numpy(), 1, -1)


def run_torch(case, arrays, dy):
    """The case through torch.nn.functional: (y, (dx, dgamma, dbeta), running stats)."""
    x, gamma, beta, rm, rv = arrays
    moved = case.op != "layer_norm"
    tx = (channels_first(x) if moved else torch.tensor(x)).requires_grad_(True)
    tg = None if gamma is None else torch.tensor(gamma, requires_grad=True)
    tb = None if beta is None else torch.tensor(beta, requires_grad=True)
    trm = None if rm is None else torch.tensor(rm)
    trv = None if rv is None else torch.tensor(rv)
    kw = dict(case.kwargs)
    eps = kw.pop("eps", 1e-5)
    if case.op == "batch_norm":
        ty = F.batch_norm(tx, trm, trv, tg, tb, case.train, MOMENTUM, eps)
    elif case.op == "instance_norm":
        ty = F.instance_norm(tx, trm, trv, tg, tb, case.train, MOMENTUM, eps)
    elif case.op == "layer_norm":
        ty = F.layer_norm(tx, tuple(np.atleast_1d(kw["normalized_shape"])), tg, tb, eps)
    else:
        ty = F.group_norm(tx, kw["num_groups"], tg, tb, eps)
    ty.backward(channels_first(dy) if moved else torch.tensor(dy))
    y = channels_last(ty) if moved else ty.detach().numpy()
    dx = channels_last(tx.grad) if moved else tx.grad.numpy()
    grads = (dx, None if tg is None else tg.grad.numpy(), None if tb is None else tb.grad.numpy())
    running = (None, None) if rm is None else (trm.numpy(), trv.numpy())
    return y, grads, running


def check_grads(ours, expected, rtol, dtype=None):
    for name, a, b in zip(("dx", "dgamma", "dbeta"), ours, expected):
        if b is None:
            assert a is None, f"{name} must be None"
            continue
        assert a.shape == b.shape, name
        if dtype is not None:
            assert a.dtype == dtype, name
        assert_close(a, b, rtol, name)


# ---------------------------------------------------------------------- torch twins
@pytest.mark.parametrize("dtype, rtol", TOLERANCES, ids=["float64", "float32"])
@table
def test_matches_torch(case, dtype, rtol):
    arrays = inputs(case, dtype)
    y, dy, grads, rm, rv = run(ops, case, arrays)
    y_t, grads_t, (rm_t, rv_t) = run_torch(case, arrays, dy)
    assert y.shape == case.shape and y.dtype == dtype
    assert_close(y, y_t, rtol, "forward")
    check_grads(grads, grads_t, rtol, dtype)
    if case.running:
        assert rm.dtype == dtype and rv.dtype == dtype
        assert_close(rm, rm_t, rtol, "running_mean")
        assert_close(rv, rv_t, rtol, "running_var")
        changed = not np.array_equal(rm, arrays[3])
        assert changed == case.train, "running statistics change in training only"


# ---------------------------------------------------------------------- loop twins
@pytest.mark.parametrize("dtype, rtol", [(np.float64, 1e-12), (np.float32, 1e-5)],
                         ids=["float64", "float32"])
@table
def test_matches_loop_twin(case, dtype, rtol):
    arrays = inputs(case, dtype, seed=3)
    y, _, grads, rm, rv = run(ops, case, arrays)
    y_r, _, grads_r, rm_r, rv_r = run(reference, case, arrays)
    assert y_r.dtype == dtype
    assert_close(y, y_r, rtol, "forward")
    check_grads(grads, grads_r, rtol)
    if case.running:
        assert_close(rm, rm_r, rtol, "running_mean")
        assert_close(rv, rv_r, rtol, "running_var")


# ------------------------------------------------------------- finite differences
@table
def test_backward_matches_finite_differences(case):
    arrays = inputs(case, np.float64, seed=5)
    _, dy, grads, _, _ = run(ops, case, arrays)
    eps = 1e-6
    for index, (name, analytic) in enumerate(zip(("dx", "dgamma", "dbeta"), grads)):
        if analytic is None:
            continue
        target = arrays[index].copy()
        numeric = np.zeros_like(target)
        flat = target.reshape(-1)
        for j in range(flat.size):
            values = []
            for step in (eps, -eps):
                trial = list(arrays)
                bumped = flat.copy()
                bumped[j] += step
                trial[index] = bumped.reshape(target.shape)
                values.append(np.sum(run(ops, case, trial)[0] * dy))
            numeric.reshape(-1)[j] = (values[0] - values[1]) / (2 * eps)
        assert_close(analytic, numeric, 1e-6, name)


# ---------------------------------------------------------------- non-contiguous
@table
def test_non_contiguous_inputs_give_identical_results(case):
    """x, dy, gamma, beta as strided views; running statistics updated through a view."""
    x, gamma, beta, rm, rv = inputs(case, np.float64, seed=7)
    y, cache = forward(ops, case, x, gamma, beta,
                       *(None if a is None else a.copy() for a in (rm, rv)))
    dy = np.random.default_rng(8).standard_normal(y.shape)
    grads = getattr(ops, case.op + "_backward")(dy, cache)

    def strided(a):
        if a is None:
            return None, None
        big = np.zeros((*a.shape, 2))
        big[..., 1] = a
        return big[..., 1], big

    x_view, dy_view = strided(x)[0], strided(dy)[0]
    g_view, b_view = strided(gamma)[0], strided(beta)[0]
    (rm_view, rm_base), (rv_view, rv_base) = strided(rm), strided(rv)
    assert not x_view.flags.c_contiguous
    y2, cache2 = forward(ops, case, x_view, g_view, b_view, rm_view, rv_view)
    grads2 = getattr(ops, case.op + "_backward")(dy_view, cache2)
    np.testing.assert_array_equal(y2, y)
    for a, b in zip(grads2, grads):
        if b is not None:
            np.testing.assert_array_equal(a, b)
    if case.running:  # the in-place update reached the parent arrays
        expected_rm, expected_rv = rm.copy(), rv.copy()
        forward(ops, case, x, gamma, beta, expected_rm, expected_rv)
        np.testing.assert_array_equal(rm_base[..., 1], expected_rm)
        np.testing.assert_array_equal(rv_base[..., 1], expected_rv)


# ------------------------------------------------------------------- statistics
def test_batch_norm_running_statistics_by_hand():
    """running <- (1 - m) running + m batch, with the unbiased variance n / (n - 1)."""
    x = np.random.default_rng(0).standard_normal((4, 5, 2))
    rm, rv = np.array([0.5, -1.0]), np.array([2.0, 0.5])
    ops.batch_norm(x, running_mean=rm, running_var=rv, momentum=0.25)
    flat = x.reshape(-1, 2)
    np.testing.assert_allclose(rm, 0.75 * np.array([0.5, -1.0]) + 0.25 * flat.mean(0),
                               rtol=1e-14)
    np.testing.assert_allclose(rv, 0.75 * np.array([2.0, 0.5]) + 0.25 * flat.var(0, ddof=1),
                               rtol=1e-14)


def test_training_output_is_normalized_with_biased_variance():
    x = np.random.default_rng(1).standard_normal((8, 3)) * 3 + 2
    y, _ = ops.batch_norm(x, eps=0.0)
    np.testing.assert_allclose(y.mean(0), 0, atol=1e-14)
    np.testing.assert_allclose(y.var(0), 1, rtol=1e-13)  # ddof=0: the biased variance


def test_eval_backward_is_the_affine_map():
    rng = np.random.default_rng(2)
    x, gamma, rm = rng.standard_normal((3, 4, 2)), rng.standard_normal(2), rng.standard_normal(2)
    rv = rng.uniform(0.5, 2, 2)
    _, cache = ops.batch_norm(x, gamma, None, rm, rv, training=False, eps=1e-3)
    dy = rng.standard_normal(x.shape)
    dx, dgamma, dbeta = ops.batch_norm_backward(dy, cache)
    np.testing.assert_allclose(dx, dy * gamma / np.sqrt(rv + 1e-3), rtol=1e-14)
    np.testing.assert_allclose(dgamma, np.sum(dy * (x - rm) / np.sqrt(rv + 1e-3), axis=(0, 1)),
                               rtol=1e-13)
    assert dbeta is None


def test_group_norm_with_one_group_per_channel_is_instance_norm():
    x = np.random.default_rng(3).standard_normal((2, 4, 5, 3))
    y_g, cache_g = ops.group_norm(x, 3)
    y_i, cache_i = ops.instance_norm(x)
    np.testing.assert_allclose(y_g, y_i, rtol=1e-13)
    dy = np.random.default_rng(4).standard_normal(x.shape)
    np.testing.assert_allclose(ops.group_norm_backward(dy, cache_g)[0],
                               ops.instance_norm_backward(dy, cache_i)[0], rtol=1e-12)


# ----------------------------------------------------------------------- errors
X = np.zeros((4, 3))
ERRORS = [
    (lambda: ops.batch_norm(np.zeros(3)), ValueError, r"batch_norm: 'x' must be a 2-D or higher"),
    (lambda: ops.batch_norm(np.zeros((4, 3), int)), TypeError, r"'x' must have dtype float32"),
    (lambda: ops.batch_norm(np.ones((1, 3))), ValueError,
     r"more than 1 value per channel when training.*\(1, 3\)"),
    (lambda: ops.batch_norm(np.ones((1, 1, 1, 3))), ValueError, "more than 1 value per channel"),
    (lambda: ops.batch_norm(X, np.ones(4)), ValueError, r"'gamma' must have shape \(3,\)"),
    (lambda: ops.batch_norm(X, None, np.ones(3, np.float32)), TypeError,
     "'beta' has dtype float32 but 'x' has dtype float64"),
    (lambda: ops.batch_norm(X, running_mean=np.zeros(3)), ValueError, "both 'running_mean'"),
    (lambda: ops.batch_norm(X, running_mean=[0.0] * 3, running_var=[1.0] * 3), TypeError,
     "'running_mean' must be an array of shape \\(3,\\)"),
    (lambda: ops.batch_norm(X, running_mean=np.zeros(2), running_var=np.ones(2)), ValueError,
     r"'running_mean' must have shape \(3,\)"),
    (lambda: ops.batch_norm(X, running_mean=np.zeros(3, np.float32),
                            running_var=np.ones(3, np.float32)), TypeError,
     "'running_mean' has dtype float32"),
    (lambda: ops.batch_norm(X, training=False), ValueError, "running statistics needs"),
    (lambda: ops.batch_norm(X, training="yes"), TypeError, "'training' must be a bool"),
    (lambda: ops.batch_norm(X, momentum=1.5), ValueError, "'momentum' must be"),
    (lambda: ops.batch_norm(X, eps=-1.0), ValueError, "'eps' must be"),
    (lambda: ops.instance_norm(X), ValueError, r"instance_norm: 'x' must be a 3-D or higher"),
    (lambda: ops.instance_norm(np.ones((2, 1, 3))), ValueError,
     "more than 1 spatial element per example and channel when training"),
    (lambda: ops.instance_norm(np.ones((2, 4, 3)), use_input_stats=False), ValueError,
     "running statistics needs"),
    (lambda: ops.layer_norm(X, 4), ValueError,
     r"trailing axes of 'x' must equal normalized_shape \(4,\)"),
    (lambda: ops.layer_norm(X, (3, 3)), ValueError, "normalized_shape"),
    (lambda: ops.layer_norm(X, 0), ValueError, "'normalized_shape' must hold ints >= 1"),
    (lambda: ops.layer_norm(X, "3"), TypeError, "'normalized_shape' must be an int"),
    (lambda: ops.layer_norm(X, 3, np.ones((1, 3))), ValueError, r"'gamma' must have shape"),
    (lambda: ops.group_norm(np.zeros((2, 6)), 4), ValueError,
     "'num_groups' must divide the number of channels 6.*received 4"),
    (lambda: ops.group_norm(np.zeros((2, 6)), 0), ValueError, "'num_groups' must be an int >= 1"),
    (lambda: ops.group_norm(np.zeros((2, 6)), 1.5), TypeError, "'num_groups' must be an int"),
    (lambda: ops.group_norm(np.zeros(6), 2), ValueError, "group_norm: 'x' must be a 2-D"),
]


@pytest.mark.parametrize("index", range(len(ERRORS)))
def test_bad_input_raises_a_helpful_error(index):
    call, error, pattern = ERRORS[index]
    with pytest.raises(error, match=pattern):
        call()


@pytest.mark.parametrize("op", ["batch_norm", "instance_norm", "layer_norm", "group_norm"])
def test_backward_checks_cache_and_dy(op):
    x = np.random.default_rng(0).standard_normal((2, 4, 6))
    args = {"layer_norm": (6,), "group_norm": (2,)}.get(op, ())
    y, cache = getattr(ops, op)(x, *args)
    backward = getattr(ops, op + "_backward")
    with pytest.raises(ValueError, match=r"'dy' must have the forward output's shape \(2, 4, 6\)"):
        backward(np.zeros((2, 4, 5)), cache)
    with pytest.raises(TypeError, match="'dy' must have the forward dtype float64"):
        backward(y.astype(np.float32), cache)
    other = "layer_norm" if op != "layer_norm" else "batch_norm"
    _, wrong = getattr(ops, other)(x, *({"layer_norm": (6,)}.get(other, ())))
    with pytest.raises(TypeError, match=f"{op}_backward: 'cache' must be the cache returned by"):
        backward(y, wrong)


@pytest.mark.parametrize("op, args", [("batch_norm", ()), ("layer_norm", (3,)),
                                      ("group_norm", (1,)), ("instance_norm", ())])
def test_output_never_aliases_the_cache(op, args):
    """Without gamma and beta, y must not be the cached xhat: editing y in place must not
    change the gradient."""
    x = np.random.default_rng(9).standard_normal((4, 5, 3))
    y, cache = getattr(ops, op)(x, *args)
    dy = np.random.default_rng(10).standard_normal(y.shape)
    before = getattr(ops, op + "_backward")(dy, cache)[0]
    y *= 0
    np.testing.assert_array_equal(getattr(ops, op + "_backward")(dy, cache)[0], before)
