"""The variational kernels (reparameterize, gaussian_kl, bernoulli_nll_logits): loop twins,
finite differences, torch (float32 and float64), stability and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops import reference
from handgrad.testing import assert_close, assert_gradient_close, finite_max, numeric_gradient

torch = pytest.importorskip("torch")
F = torch.nn.functional

DTYPES = [np.float64, np.float32]
SHAPES = [(5, 4), (3, 2, 3), (6,), (1, 1)]
OPS = ["reparameterize", "gaussian_kl", "bernoulli_nll_logits"]


def _inputs(op, shape, dtype, seed=0):
    """The op's inputs: (mu, log_var, eps), (mu, log_var) or (logits, x in [0, 1])."""
    rng = np.random.default_rng(seed)
    normal = [rng.standard_normal(shape).astype(dtype) for _ in range(3)]
    if op == "bernoulli_nll_logits":
        return [normal[0] * 3, rng.random(shape).astype(dtype)]
    return normal[:3] if op == "reparameterize" else normal[:2]


def _sizes(op, arrays):
    """Per output (the forward, then each gradient): (terms, scale) for the tolerance.

    Elementwise values come from 2-3 rounded operations of the size of their terms; the
    per-example sums add ``entries`` such terms, of total size the sum of their |terms|."""
    wide = [a.astype(np.float64) for a in arrays]
    entries = math.prod(arrays[0].shape[1:])
    if op == "reparameterize":
        mu, log_var, eps = wide
        noise = np.abs(np.exp(log_var / 2) * eps)
        return [(3, finite_max(np.abs(mu) + noise)), (1, 1.0), (3, finite_max(noise))]
    if op == "gaussian_kl":
        mu, log_var = wide
        terms = mu * mu + np.abs(np.expm1(log_var)) + np.abs(log_var)
        per_example = terms.reshape(len(mu), -1).sum(axis=1)
        return [(entries + 3, finite_max(per_example)), (1, finite_max(mu)),
                (3, finite_max(np.expm1(log_var)))]
    logits, x = wide
    terms = np.logaddexp(0, logits) + np.abs(x * logits)
    return [(entries + 4, finite_max(terms.reshape(len(x), -1).sum(axis=1))), (4, 1.0)]


def _run(module, op, arrays, d):
    """The forward and every gradient of ``module.<op>`` for the upstream gradient ``d``."""
    y, cache = getattr(module, op)(*arrays)
    grads = getattr(module, op + "_backward")(d, cache)
    return [y, *(grads if isinstance(grads, tuple) else (grads,))]


def _upstream(op, arrays, seed=1):
    shape = arrays[0].shape if op == "reparameterize" else arrays[0].shape[:1]
    return np.random.default_rng(seed).standard_normal(shape).astype(arrays[0].dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float64", "float32"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", OPS)
def test_ops_match_their_loop_twins(op, shape, dtype):
    arrays = _inputs(op, shape, dtype)
    d = _upstream(op, arrays)
    ours, loops = _run(ops, op, arrays, d), _run(reference, op, arrays, d)
    scale_d = finite_max(d)
    for k, (a, b, (terms, scale)) in enumerate(zip(ours, loops, _sizes(op, arrays))):
        assert a.dtype == dtype and a.shape == b.shape
        assert_close(a, b, terms=terms, scale=scale * (scale_d if k else 1.0), what=f"{k}")


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", OPS)
def test_backward_matches_finite_differences(op, shape):
    arrays = _inputs(op, shape, np.float64, seed=2)
    d = _upstream(op, arrays, seed=3)
    _, *grads = _run(ops, op, arrays, d)
    for k, grad in enumerate(grads):  # x of the Bernoulli NLL is data: no gradient
        numeric, error = numeric_gradient(
            lambda: float(np.sum(getattr(ops, op)(*arrays)[0] * d)), arrays[k],
            with_error=True)
        assert_gradient_close(grad, numeric, error, what=f"{op} gradient {k}")


def _torch_twin(op, tensors):
    if op == "reparameterize":
        mu, log_var, eps = tensors
        return mu + torch.exp(0.5 * log_var) * eps
    if op == "gaussian_kl":
        mu, log_var = tensors
        kl = -0.5 * (1 + log_var - mu.pow(2) - log_var.exp())
        return kl.reshape(len(mu), -1).sum(-1)
    logits, x = tensors
    nll = F.binary_cross_entropy_with_logits(logits, x, reduction="none")
    return nll.reshape(len(x), -1).sum(-1)


@pytest.mark.parametrize("dtype", DTYPES, ids=["float64", "float32"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op", OPS)
def test_ops_match_torch(op, shape, dtype):
    arrays = _inputs(op, shape, dtype, seed=4)
    d = _upstream(op, arrays, seed=5)
    ours = _run(ops, op, arrays, d)
    differentiable = 1 if op == "bernoulli_nll_logits" else len(arrays)
    tensors = [torch.tensor(a, requires_grad=k < differentiable) for k, a in enumerate(arrays)]
    y = _torch_twin(op, tensors)
    y.backward(torch.tensor(d))
    theirs = [y.detach().numpy(), *(t.grad.numpy() for t in tensors[:differentiable])]
    scale_d = finite_max(d)
    for k, (a, b, (terms, scale)) in enumerate(zip(ours, theirs, _sizes(op, arrays))):
        assert_close(a, b, terms=terms, scale=scale * (scale_d if k else 1.0), what=f"{k}")


def test_either_backward_takes_either_forwards_cache():
    arrays = _inputs("gaussian_kl", (4, 3), np.float64)
    d = _upstream("gaussian_kl", arrays)
    for forward, backward in ((ops.gaussian_kl, reference.gaussian_kl_backward),
                              (reference.gaussian_kl, ops.gaussian_kl_backward)):
        for a, b in zip(backward(d, forward(*arrays)[1]), ops.gaussian_kl_backward(
                d, ops.gaussian_kl(*arrays)[1])):
            assert_close(a, b, terms=3, scale=finite_max(b))


def test_bernoulli_nll_is_finite_and_exact_for_huge_logits():
    logits = np.array([[1000.0, -1000.0, 30.0, -30.0]])
    x = np.array([[1.0, 0.0, 0.0, 1.0]])
    nll, cache = ops.bernoulli_nll_logits(logits, x)
    # softplus(1000) - 1000 = log1p(e^-1000) ~ 0, softplus(-1000) ~ 0, softplus(30), 30 + ...
    expected = math.log1p(math.exp(-30)) * 2 + 60.0
    assert_close(nll, np.array([expected]), terms=4, scale=62.0)
    dlogits = ops.bernoulli_nll_logits_backward(np.ones(1), cache)
    sigmoid_30 = 1 / (1 + math.exp(-30))
    assert_close(dlogits, np.array([[0.0, 0.0, sigmoid_30, -sigmoid_30]]), terms=2)
    for dtype in (np.float32, np.float64):
        wide, _ = ops.bernoulli_nll_logits(np.full((2, 3), 1e4, dtype), np.zeros((2, 3), dtype))
        assert np.all(np.isfinite(wide)) and wide.dtype == dtype


def test_gaussian_kl_keeps_its_digits_near_the_prior():
    """At log_var = t tiny and mu = 0 the KL is (e^t - 1 - t) / 2 = t^2/4 + t^3/12 + ...:
    ``expm1(t) - t`` errs by eps |t| (its terms' size), where ``1 + t - e^t`` errs by eps
    (the size of 1), a thousand times the bound below."""
    t = np.array([[1e-6, -1e-6, 1e-4]])
    kl, _ = ops.gaussian_kl(np.zeros_like(t), t)
    exact = float(np.sum(t**2 / 4 + t**3 / 12 + t**4 / 48))
    assert_close(kl, np.array([exact]), terms=3, scale=np.abs(t).sum())
    naive = -0.5 * np.sum(1 + t - np.exp(t))
    with pytest.raises(AssertionError):  # the test can tell the two apart
        assert_close(np.array([naive]), np.array([exact]), terms=3, scale=np.abs(t).sum())


def test_reparameterize_draws_the_posterior():
    """z = mu + exp(log_var / 2) eps with eps ~ N(0, 1) has mean mu and std exp(log_var/2):
    the sample mean and std lie within 5 standard errors."""
    n = 20000
    eps = np.random.default_rng(7).standard_normal((n, 2))
    mu, log_var = np.tile([1.5, -2.0], (n, 1)), np.tile([np.log(0.25), np.log(4.0)], (n, 1))
    z, _ = ops.reparameterize(mu, log_var, eps)
    std = np.array([0.5, 2.0])
    assert np.all(np.abs(z.mean(axis=0) - mu[0]) < 5 * std / np.sqrt(n))
    assert np.all(np.abs(z.std(axis=0) - std) < 5 * std / np.sqrt(2 * n))


ERRORS = [
    (lambda: ops.reparameterize(np.ones((2, 3)), np.ones((2, 4)), np.ones((2, 3))),
     ValueError, r"reparameterize: 'log_var' must have the shape of 'mu' \(2, 3\); "
                 r"received \(2, 4\)"),
    (lambda: ops.reparameterize(np.ones((2, 3)), np.ones((2, 3)), np.ones((2, 3), np.float32)),
     TypeError, r"reparameterize: 'eps' has dtype float32 but 'mu' has dtype float64"),
    (lambda: ops.gaussian_kl(np.float64(1.0), np.float64(1.0)), ValueError,
     r"gaussian_kl: 'mu' must have a leading example axis"),
    (lambda: ops.gaussian_kl(np.ones((2, 3), np.int64), np.ones((2, 3))), TypeError,
     r"gaussian_kl: 'mu' must have dtype float32 or float64; received dtype int64"),
    (lambda: ops.bernoulli_nll_logits(np.ones((2, 3)), np.full((2, 3), 16.0)), ValueError,
     r"bernoulli_nll_logits: 'x' must hold Bernoulli means in \[0, 1\] .*received values "
     r"from 16 to 16"),
    (lambda: ops.bernoulli_nll_logits(np.ones((2, 3)), np.full((2, 3), np.nan)), ValueError,
     r"'x' must hold Bernoulli means in \[0, 1\]"),
    (lambda: ops.bernoulli_nll_logits(np.ones((2, 3)), np.ones((3, 2))), ValueError,
     r"'x' must have the shape of 'logits' \(2, 3\); received \(3, 2\)"),
    (lambda: ops.gaussian_kl_backward(np.ones((2, 3)), ops.gaussian_kl(np.ones((2, 3)),
                                                                       np.ones((2, 3)))[1]),
     ValueError, r"gaussian_kl_backward: 'dy' must have the forward output's shape \(2,\); "
                 r"received \(2, 3\)"),
    (lambda: reference.bernoulli_nll_logits(np.ones(2), np.full(2, -0.5)), ValueError,
     r"received values from -0.5 to -0.5"),
]


@pytest.mark.parametrize("call, error, message", ERRORS)
def test_bad_input_is_refused_by_name(call, error, message):
    with pytest.raises(error, match=message):
        call()
