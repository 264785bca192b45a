"""Elementwise regression losses: squared, absolute, Huber and smooth L1 errors."""

from __future__ import annotations

from .._hyper import number
from ._common import pair, reduce


def mse(pred, target, *, reduction="mean"):
    """Squared error (pred - target)^2; dpred = 2 (pred - target)."""
    op = "mse"
    _, pred, target = pair(op, pred, target, "pred", "target")
    d = pred - target
    return reduce(op, d * d, 2.0 * d, reduction)


def mae(pred, target, *, reduction="mean"):
    """Absolute error |pred - target| (L1); dpred = sign(pred - target), 0 where equal."""
    op = "mae"
    xp, pred, target = pair(op, pred, target, "pred", "target")
    d = pred - target
    return reduce(op, xp.abs(d), xp.sign(d), reduction)


def huber(pred, target, *, delta=1.0, reduction="mean"):
    """Huber loss: d^2 / 2 where |d| < delta, else delta (|d| - delta / 2);
    dpred = clip(d, -delta, delta). delta > 0."""
    op = "huber"
    delta = number(op, "delta", delta, low=0.0, low_open=True)
    xp, pred, target = pair(op, pred, target, "pred", "target")
    d = pred - target
    ad = xp.abs(d)
    values = xp.where(ad < delta, 0.5 * d * d, delta * (ad - 0.5 * delta))
    return reduce(op, values, xp.clip(d, -delta, delta), reduction)


def smooth_l1(pred, target, *, beta=1.0, reduction="mean"):
    """Smooth L1 (PyTorch's ``SmoothL1Loss``): d^2 / (2 beta) where |d| < beta, else
    |d| - beta / 2; dpred = d / beta where |d| < beta, else sign(d). beta >= 0 (0 is
    L1); for beta > 0 it is huber(delta=beta) / beta."""
    op = "smooth_l1"
    beta = number(op, "beta", beta, low=0.0)
    xp, pred, target = pair(op, pred, target, "pred", "target")
    d = pred - target
    if beta == 0.0:
        return reduce(op, xp.abs(d), xp.sign(d), reduction)
    ad = xp.abs(d)
    inside = ad < beta
    values = xp.where(inside, 0.5 * d * d / beta, ad - 0.5 * beta)
    return reduce(op, values, xp.where(inside, d / beta, xp.sign(d)), reduction)
