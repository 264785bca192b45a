"""kl_div, gaussian_nll and poisson_nll against torch (forward and gradients, every
reduction, float32 and float64) and their refusals."""

import math

import numpy as np
import pytest

from handgrad import losses
from loss_cases import DTYPE_IDS, DTYPES, REDUCTIONS, check_loss

torch = pytest.importorskip("torch")
F = torch.nn.functional

SHAPE = (4, 3)


def _w(a):
    return np.abs(np.asarray(a, np.float64))


@pytest.mark.filterwarnings("ignore:reduction. 'mean' divides the total loss:UserWarning")
@pytest.mark.parametrize("log_target", [False, True], ids=["probs", "log_target"])
@pytest.mark.parametrize("reduction", [*REDUCTIONS, "batchmean"])
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_kl_div_matches_torch(dtype, reduction, log_target):
    rng = np.random.default_rng(1)
    x = np.log(rng.dirichlet(np.ones(SHAPE[1]), SHAPE[0])).astype(dtype)
    p = rng.dirichlet(np.ones(SHAPE[1]), SHAPE[0])
    p[0, 0] = 0.0  # 0 log 0 = 0
    t = (np.log(p + 1e-3) if log_target else p).astype(dtype)
    ours = losses.kl_div(x, t, reduction=reduction, log_target=log_target)
    tx = torch.tensor(x, requires_grad=True)
    t_loss = F.kl_div(tx, torch.tensor(t), reduction=reduction, log_target=log_target)
    q = np.exp(_w(t) * np.sign(t)) if log_target else _w(t)
    with np.errstate(divide="ignore"):
        log_t = _w(t) if log_target else np.where(q > 0, np.abs(np.log(np.where(q > 0, q, 1))), 0)
    items = q * (log_t + _w(x))
    divisor = SHAPE[0] if reduction == "batchmean" else None
    check_loss(ours, t_loss, [tx], dtype=dtype, reduction=reduction, item_sizes=items,
               grad_sizes=[q], terms=2, divisor=divisor)


@pytest.mark.parametrize("var_shape", ["full", "column", "dropped"])
@pytest.mark.parametrize("full", [False, True], ids=["partial", "full"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_gaussian_nll_matches_torch_with_gradients_to_mean_and_var(dtype, reduction, full,
                                                                   var_shape):
    rng = np.random.default_rng(2)
    mean, target = (rng.standard_normal(SHAPE).astype(dtype) for _ in range(2))
    shape = {"full": SHAPE, "column": (SHAPE[0], 1), "dropped": SHAPE[:1]}[var_shape]
    var = (0.1 + rng.random(shape)).astype(dtype)
    var.flat[0] = 1e-8  # below eps: clamped, the gradient still flows (as torch)
    ours = losses.gaussian_nll(mean, target, var, full=full, reduction=reduction)
    tm, tv = (torch.tensor(a, requires_grad=True) for a in (mean, var))
    t_loss = F.gaussian_nll_loss(tm, torch.tensor(target), tv, full=full, reduction=reduction)
    v = np.maximum(_w(var), 1e-6)
    v = v[..., None] if var_shape == "dropped" else v
    d = _w(mean) + _w(target)
    items = 0.5 * (np.abs(np.log(v)) + d * d / v + full * math.log(2 * math.pi))
    dvar = np.broadcast_to(0.5 * (1 / v + d * d / (v * v)), SHAPE).sum(-1) * SHAPE[1]
    check_loss(ours, t_loss, [tm, tv], dtype=dtype, reduction=reduction, item_sizes=items,
               grad_sizes=[d / v, dvar], terms=4 * SHAPE[1])


@pytest.mark.parametrize("log_input", [True, False], ids=["log_input", "rate"])
@pytest.mark.parametrize("full", [False, True], ids=["partial", "full"])
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_IDS)
def test_poisson_nll_matches_torch(dtype, reduction, full, log_input):
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(SHAPE) if log_input else 0.1 + 3 * rng.random(SHAPE))
    x = x.astype(dtype)
    t = rng.poisson(2.0, SHAPE).astype(dtype)  # counts, some 0 and 1 (no Stirling term)
    ours = losses.poisson_nll(x, t, log_input=log_input, full=full, reduction=reduction)
    tx = torch.tensor(x, requires_grad=True)
    t_loss = F.poisson_nll_loss(tx, torch.tensor(t), log_input=log_input, full=full,
                                reduction=reduction)
    ax, at = _w(x), _w(t)
    if log_input:
        items, grad = np.exp(x.astype(np.float64)) + at * ax, np.exp(x.astype(np.float64)) + at
    else:
        items, grad = ax + at * np.abs(np.log(ax + 1e-8)), 1 + at / (ax + 1e-8)
    if full:
        safe = np.maximum(at, 1.0)
        items = items + safe * np.abs(np.log(safe)) + safe + np.abs(np.log(2 * np.pi * safe))
    check_loss(ours, t_loss, [tx], dtype=dtype, reduction=reduction, item_sizes=items,
               grad_sizes=[grad], terms=6)


@pytest.mark.parametrize("call, error, message", [
    (lambda a: losses.kl_div(a, a, reduction="batch"), ValueError,
     r"kl_div: 'reduction' must be one of .*'batchmean'"),
    (lambda a: losses.kl_div(a, a[:, :2]), ValueError,
     r"kl_div: 'target' must have the shape of 'input_log_probs' \(4, 3\)"),
    (lambda a: losses.gaussian_nll(a, a, np.ones((4, 2))), ValueError,
     r"gaussian_nll: 'var' must have the mean's shape \(4, 3\).*received shape \(4, 2\)"),
    (lambda a: losses.gaussian_nll(a, a, -np.ones((4, 3))), ValueError,
     r"gaussian_nll: 'var' must be non-negative; received a minimum of -1.0"),
    (lambda a: losses.gaussian_nll(a, a, a, eps=0.0), ValueError, r"gaussian_nll: 'eps'"),
    (lambda a: losses.poisson_nll(a, a, log_input="yes"), TypeError,
     r"poisson_nll: 'log_input'"),
])
def test_probabilistic_losses_refuse_bad_arguments(call, error, message):
    with pytest.raises(error, match=message):
        call(np.ones(SHAPE))


def test_kl_div_and_poisson_nll_are_named_losses():
    assert losses.get("kl_div") is losses.kl_div
    assert losses.get("poisson_nll_loss") is losses.poisson_nll
    assert not losses.takes_logits(losses.kl_div)
