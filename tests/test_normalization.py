"""Normalization kernels (batch, instance, layer, group norm): torch twins, loop twins,
finite differences, running statistics, non-contiguous inputs, dtypes and errors.

Layout conversion for torch: handgrad is channels-last, so ``x`` (N, *S, C) is moved
to (N, C, *S) for ``F.batch_norm``/``F.instance_norm``/``F.group_norm`` (gamma, beta
and the running statistics are (C,) in both); ``F.layer_norm`` normalizes trailing
axes in both libraries, so nothing moves.
"""

import inspect
from dataclasses import dataclass, field

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import reference
from handgrad.testing import assert_close, assert_gradient_close, numeric_gradient

from tolerances import assert_outputs_close, condition_bounds

torch = pytest.importorskip("torch")
F = torch.nn.functional

DTYPES = pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["float64", "float32"])
MOMENTUM = 0.3
ARGS = ("x", "gamma", "beta", "running_mean", "running_var")
DEFAULT_EPS = inspect.signature(ops.layer_norm).parameters["eps"].default


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


def draw(case, seed=0):
    """{x, gamma, beta, running_mean, running_var, dy}: float64, None where absent."""
    rng = np.random.default_rng(seed)
    arrays = dict.fromkeys(ARGS)
    arrays["x"] = 1.5 * rng.standard_normal(case.shape) + 0.5
    if case.gamma:
        arrays["gamma"] = rng.standard_normal(case.param_shape)
    if case.beta:
        arrays["beta"] = rng.standard_normal(case.param_shape)
    if case.running:
        arrays["running_mean"] = rng.standard_normal(case.shape[-1])
        arrays["running_var"] = rng.uniform(0.5, 2.0, case.shape[-1])
    arrays["dy"] = rng.standard_normal(case.shape)  # every norm keeps the input's shape
    return arrays


def cast(arrays, dtype):
    return {k: None if a is None else a.astype(dtype) for k, a in arrays.items()}


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


def copied(arrays):
    """The op's arguments, running statistics copied (the op updates them in place)."""
    return [None if arrays[k] is None else arrays[k].copy() if k.startswith("running")
            else arrays[k] for k in ARGS]


def outputs(module, case, arrays):
    """{y, dx, dgamma, dbeta, running_mean, running_var (after the call)}."""
    args = copied(arrays)
    y, cache = forward(module, case, *args)
    dx, dgamma, dbeta = getattr(module, case.op + "_backward")(arrays["dy"], cache)
    return {"y": y, "dx": dx, "dgamma": dgamma, "dbeta": dbeta,
            "running_mean": args[3], "running_var": args[4]}


def bounds(case, arrays):
    """(terms, scale) of each output, measured on the case in float64."""
    wide = cast(arrays, np.float64)
    return condition_bounds(lambda: outputs(ops, case, wide),
                            [a for a in wide.values() if a is not None])


def channels_first(a):
    return torch.tensor(np.ascontiguousarray(np.moveaxis(a, -1, 1)))


def channels_last(t):
    return np.moveaxis(t.detach().numpy(), 1, -1)


def torch_outputs(case, arrays):
    """The case through torch.nn.functional, in the keys of :func:`outputs`."""
    x, gamma, beta, rm, rv = (arrays[k] for k in ARGS)
    moved = case.op != "layer_norm"
    tx = (channels_first(x) if moved else torch.tensor(x)).requires_grad_(True)
    tg = None if gamma is None else torch.tensor(gamma, requires_grad=True)
    tb = None if beta is None else torch.tensor(beta, requires_grad=True)
    trm = None if rm is None else torch.tensor(rm)
    trv = None if rv is None else torch.tensor(rv)
    kw = dict(case.kwargs)
    eps = kw.pop("eps", DEFAULT_EPS)
    if case.op == "batch_norm":
        ty = F.batch_norm(tx, trm, trv, tg, tb, case.train, MOMENTUM, eps)
    elif case.op == "instance_norm":
        ty = F.instance_norm(tx, trm, trv, tg, tb, case.train, MOMENTUM, eps)
    elif case.op == "layer_norm":
        ty = F.layer_norm(tx, tuple(np.atleast_1d(kw["normalized_shape"])), tg, tb, eps)
    else:
        ty = F.group_norm(tx, kw["num_groups"], tg, tb, eps)
    dy = arrays["dy"]
    ty.backward(channels_first(dy) if moved else torch.tensor(dy))
    return {"y": channels_last(ty) if moved else ty.detach().numpy(),
            "dx": channels_last(tx.grad) if moved else tx.grad.numpy(),
            "dgamma": None if tg is None else tg.grad.numpy(),
            "dbeta": None if tb is None else tb.grad.numpy(),
            "running_mean": None if trm is None else trm.numpy(),
            "running_var": None if trv is None else trv.numpy()}


# ---------------------------------------------------------------------- torch twins
@DTYPES
@table
def test_matches_torch(case, dtype):
    arrays = cast(draw(case), dtype)
    ours = outputs(ops, case, arrays)
    assert ours["y"].shape == case.shape
    assert all(a is None or a.dtype == dtype for a in ours.values())
    assert_outputs_close(ours, torch_outputs(case, arrays), bounds(case, arrays), dtype)
    if case.running:
        changed = not np.array_equal(ours["running_mean"], arrays["running_mean"])
        assert changed == case.train, "running statistics change in training only"


# ---------------------------------------------------------------------- loop twins
@DTYPES
@table
def test_matches_loop_twin(case, dtype):
    arrays = cast(draw(case, seed=3), dtype)
    expected = outputs(reference, case, arrays)
    assert expected["y"].dtype == dtype
    assert_outputs_close(outputs(ops, case, arrays), expected, bounds(case, arrays), dtype)


# ------------------------------------------------------------- finite differences
@table
def test_backward_matches_finite_differences(case):
    arrays = draw(case, seed=5)
    analytic = outputs(ops, case, arrays)
    for name, grad in (("x", "dx"), ("gamma", "dgamma"), ("beta", "dbeta")):
        if arrays[name] is None:
            assert analytic[grad] is None
            continue
        trial = {**arrays, name: arrays[name].copy()}  # perturbed in place

        def loss(trial=trial):
            return float(np.sum(forward(ops, case, *copied(trial))[0] * arrays["dy"]))

        numeric, error = numeric_gradient(loss, trial[name], with_error=True)
        assert_gradient_close(analytic[grad], numeric, error, what=grad)


# ---------------------------------------------------------------- non-contiguous
@table
def test_non_contiguous_inputs_give_identical_results(case):
    """x, dy, gamma, beta as strided views; running statistics updated through a view."""
    x, gamma, beta, rm, rv = (draw(case, seed=7)[k] for k in ARGS)
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
    old_mean, old_var = np.array([0.5, -1.0]), np.array([2.0, 0.5])
    rm, rv = old_mean.copy(), old_var.copy()
    ops.batch_norm(x, running_mean=rm, running_var=rv, momentum=0.25)
    flat = x.reshape(-1, 2)
    n = len(flat)  # each statistic sums n terms of the size of |x| (the variance: x^2)
    assert_close(rm, 0.75 * old_mean + 0.25 * flat.mean(0), terms=n,
                 scale=0.75 * np.abs(old_mean).max() + 0.25 * np.abs(flat).max(),
                 what="running_mean")
    assert_close(rv, 0.75 * old_var + 0.25 * flat.var(0, ddof=1), terms=n,
                 scale=0.75 * old_var.max() + 0.25 * n / (n - 1) * np.square(flat).max(),
                 what="running_var")


def test_training_output_is_normalized_with_biased_variance():
    x = np.random.default_rng(1).standard_normal((8, 3)) * 3 + 2
    y, _ = ops.batch_norm(x)
    var = x.var(0)  # ddof=0: the biased variance
    # xhat = (x - mean) / std carries the statistics' rounding, eps * sqrt(8) * |x| / std;
    # its mean and mean square sum 8 more terms of the size of |x| / std (its square).
    size = np.max(np.abs(x) / np.sqrt(var))
    assert_close(y.mean(0), np.zeros(3), terms=2 * len(x), scale=size, what="mean")
    assert_close(y.var(0), var / (var + DEFAULT_EPS), terms=2 * len(x), scale=size**2,
                 what="variance")


def test_eval_backward_is_the_affine_map():
    rng = np.random.default_rng(2)
    x, gamma, rm = rng.standard_normal((3, 4, 2)), rng.standard_normal(2), rng.standard_normal(2)
    rv, eps = rng.uniform(0.5, 2, 2), 1e-3
    _, cache = ops.batch_norm(x, gamma, None, rm, rv, training=False, eps=eps)
    dy = rng.standard_normal(x.shape)
    dx, dgamma, dbeta = ops.batch_norm_backward(dy, cache)
    inv_std = 1 / np.sqrt(rv + eps)
    assert_close(dx, dy * gamma * inv_std, terms=1, scale=np.max(np.abs(dy * gamma) * inv_std),
                 what="dx")
    terms = np.abs(dy) * (np.abs(x) + np.abs(rm)) * inv_std  # the 12 products per channel
    assert_close(dgamma, np.sum(dy * (x - rm) * inv_std, axis=(0, 1)), terms=12,
                 scale=terms.sum(axis=(0, 1)).max(), what="dgamma")
    assert dbeta is None


def test_group_norm_with_one_group_per_channel_is_instance_norm():
    rng = np.random.default_rng(3)
    arrays = {"x": rng.standard_normal((2, 4, 5, 3)), "dy": rng.standard_normal((2, 4, 5, 3))}

    def group_norm():
        y, cache = ops.group_norm(arrays["x"], 3)
        return {"y": y, "dx": ops.group_norm_backward(arrays["dy"], cache)[0]}

    y, cache = ops.instance_norm(arrays["x"])
    instance = {"y": y, "dx": ops.instance_norm_backward(arrays["dy"], cache)[0]}
    assert_outputs_close(group_norm(), instance, condition_bounds(group_norm, arrays.values()),
                         np.float64)


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
    (lambda: ops.layer_norm(X, -1), ValueError, "'normalized_shape' must hold ints >= 0"),
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
