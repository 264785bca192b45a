"""Losses of distributions: KL divergence, Gaussian and Poisson negative log-likelihoods."""

from __future__ import annotations

import math

from .._checks import choice, float_array, same_dtype
from .._hyper import flag, number
from ._common import REDUCTIONS, pair, reduce


def kl_div(input_log_probs, target, *, reduction="mean", log_target=False):
    """KL divergence (PyTorch's ``F.kl_div``): input holds log q, target p (or log p with
    ``log_target=True``), one shape. loss = p (log p - log q) (0 where p = 0), or
    exp(t) (t - log q); dinput = -p (or -exp(t)). ``"batchmean"`` divides the sum by the
    first axis' length (the KL divergence per example); ``"mean"`` by the element count.
    """
    op = "kl_div"
    xp, x, t = pair(op, input_log_probs, target, "input_log_probs", "target")
    reduction = choice(op, "reduction", reduction, (*REDUCTIONS, "batchmean"))
    if flag(op, "log_target", log_target):
        p = xp.exp(t)
        values = p * (t - x)
    else:
        p = t
        with xp.errstate(divide="ignore", invalid="ignore"):
            log_t = xp.where(t == 0, 0.0, xp.log(t)).astype(x.dtype)  # xlogy(0, 0) = 0
        values = t * log_t - t * x
    if reduction == "batchmean":
        return reduce(op, values, -p, "mean", divisor=x.shape[0] if x.ndim else 1)
    return reduce(op, values, -p, reduction)


def gaussian_nll(mean, target, var, *, full=False, eps=1e-6, reduction="mean"):
    """Gaussian negative log-likelihood (PyTorch's ``F.gaussian_nll_loss``).

    mean and target of one shape; var of that shape, or with its last axis of length 1
    or dropped (one variance per row). v = max(var, eps) (the clamp passes gradients as
    torch's, which clamps without recording it); loss = (log v + (mean - target)^2 / v) / 2
    (+ log(2 pi) / 2 with ``full``). Returns ``(loss, (dmean, dvar))``:
    dmean = (mean - target) / v, dvar = (1 / v - (mean - target)^2 / v^2) / 2, summed over
    the axis var was broadcast along (dtarget is -dmean).
    """
    op = "gaussian_nll"
    xp, mu, t = pair(op, mean, target, "mean", "target")
    var = float_array(op, "var", var)
    same_dtype(op, mean=mu, var=var)
    eps = number(op, "eps", eps, low=0.0, low_open=True)
    shape = tuple(var.shape)
    if shape == mu.shape[:-1] and shape != mu.shape:
        var = var[..., None]
    elif shape != mu.shape and not (shape[:-1] == mu.shape[:-1] and shape[-1:] == (1,)):
        raise ValueError(f"{op}: 'var' must have the mean's shape {tuple(mu.shape)}, or it "
                         f"with a last axis of 1 or without it; received shape {shape}")
    if bool(xp.any(var < 0)):
        raise ValueError(f"{op}: 'var' must be non-negative; received a minimum of "
                         f"{float(var.min())!r}")
    v = xp.maximum(var, var.dtype.type(eps))
    d = mu - t
    values = 0.5 * (xp.log(v) + d * d / v)
    if flag(op, "full", full):
        values = values + 0.5 * math.log(2 * math.pi)
    dvar = 0.5 * (1.0 / v - d * d / (v * v))
    if dvar.shape != var.shape:
        dvar = dvar.sum(axis=-1, keepdims=True)
    return reduce(op, values, (d / v, dvar.reshape(shape)), reduction)


def poisson_nll(input, target, *, log_input=True, full=False, eps=1e-8, reduction="mean"):
    """Poisson negative log-likelihood (PyTorch's ``F.poisson_nll_loss``).

    ``log_input``: loss = exp(x) - t x, dx = exp(x) - t; else (x the rate)
    loss = x - t log(x + eps), dx = 1 - t / (x + eps). ``full`` adds Stirling's
    t log t - t + log(2 pi t) / 2 where t > 1 (no gradient to x).
    """
    op = "poisson_nll"
    xp, x, t = pair(op, input, target, "input", "target")
    eps = number(op, "eps", eps, low=0.0)
    if flag(op, "log_input", log_input):
        e = xp.exp(x)
        values, grad = e - t * x, e - t
    else:
        values, grad = x - t * xp.log(x + eps), 1.0 - t / (x + eps)
    if flag(op, "full", full):
        safe = xp.where(t > 1, t, 1.0)
        stirling = safe * xp.log(safe) - safe + 0.5 * xp.log(2 * math.pi * safe)
        values = values + xp.where(t > 1, stirling, 0.0).astype(x.dtype)
    return reduce(op, values, grad, reduction)
