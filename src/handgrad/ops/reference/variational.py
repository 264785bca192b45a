"""Naive variational kernels: loops over examples and their entries, one scalar at a time.

The readable specification of :mod:`handgrad.ops.variational`, with the same signatures,
argument checks and caches (so either backward takes either forward's cache).
"""

from __future__ import annotations

import math

import numpy as np

from .._args.elementwise import make_cache, open_cache
from ..declare import exports
from ..variational import prepare_bernoulli, prepare_like


def _entries(array, n):
    """The full indices of example ``n``'s entries of ``array`` (N, ...): ``(n, ...)``."""
    return ((n, *j) for j in np.ndindex(*array.shape[1:]))


def reparameterize(mu, log_var, eps):
    """Loop twin of :func:`handgrad.ops.reparameterize`: z = mu + exp(log_var / 2) * eps."""
    mu, log_var, eps = prepare_like("reparameterize", "mu", mu, log_var=log_var, eps=eps)
    z, half_noise = np.empty_like(mu), np.empty_like(mu)
    for i in np.ndindex(*mu.shape):
        noise = math.exp(float(log_var[i]) / 2) * float(eps[i])
        z[i] = float(mu[i]) + noise
        half_noise[i] = noise / 2
    return z, make_cache("reparameterize", mu, half_noise)


def reparameterize_backward(dz, cache):
    """Loop twin of :func:`handgrad.ops.reparameterize_backward`."""
    dz, cache = open_cache("reparameterize_backward", "reparameterize", dz, cache)
    dmu, dlog_var = np.empty_like(dz), np.empty_like(dz)
    for i in np.ndindex(*dz.shape):
        dmu[i] = dz[i]
        dlog_var[i] = float(dz[i]) * float(cache.saved[i])  # dz * exp(log_var / 2) * eps / 2
    return dmu, dlog_var


def _sum_per_example(first, second, term):
    """For each example n, the sum over its entries i of ``term(first[i], second[i])[0]``;
    and each entry's ``term(...)[1]`` (what the backward needs)."""
    sums, saved = np.zeros(first.shape[0], dtype=first.dtype), np.empty_like(first)
    for n in range(first.shape[0]):
        total = 0.0
        for i in _entries(first, n):
            value, saved[i] = term(float(first[i]), float(second[i]))
            total += value
        sums[n] = total
    return sums, saved


def _kl_term(m, lv):
    """(KL of one entry, exp(lv) - 1)."""
    return (m * m + math.expm1(lv) - lv) / 2, math.expm1(lv)


def gaussian_kl(mu, log_var):
    """Loop twin of :func:`handgrad.ops.gaussian_kl`: per example, the sum over its entries
    of (mu^2 + exp(log_var) - 1 - log_var) / 2."""
    mu, log_var = prepare_like("gaussian_kl", "mu", mu, log_var=log_var)
    kl, var_minus_one = _sum_per_example(mu, log_var, _kl_term)
    return kl, make_cache("gaussian_kl", kl, (mu, var_minus_one))


def gaussian_kl_backward(dkl, cache):
    """Loop twin of :func:`handgrad.ops.gaussian_kl_backward`."""
    dkl, cache = open_cache("gaussian_kl_backward", "gaussian_kl", dkl, cache)
    mu, var_minus_one = cache.saved
    dmu, dlog_var = np.empty_like(mu), np.empty_like(mu)
    for n in range(mu.shape[0]):
        for i in _entries(mu, n):
            dmu[i] = float(dkl[n]) * float(mu[i])
            dlog_var[i] = float(dkl[n]) * float(var_minus_one[i]) / 2
    return dmu, dlog_var


def _softplus(v):
    return max(v, 0.0) + math.log1p(math.exp(-abs(v)))


def _sigmoid(v):
    return 1 / (1 + math.exp(-v)) if v >= 0 else math.exp(v) / (1 + math.exp(v))


def _bernoulli_term(v, t):
    """(softplus(v) - t v, sigmoid(v) - t) for one logit v and its target t."""
    return _softplus(v) - t * v, _sigmoid(v) - t


def bernoulli_nll_logits(logits, x):
    """Loop twin of :func:`handgrad.ops.bernoulli_nll_logits`: per example, the sum over
    its entries of softplus(l) - x l."""
    op = "bernoulli_nll_logits"
    logits, x = prepare_bernoulli(op, logits, x)
    nll, residual = _sum_per_example(logits, x, _bernoulli_term)
    return nll, make_cache(op, nll, residual)


def bernoulli_nll_logits_backward(dnll, cache):
    """Loop twin of :func:`handgrad.ops.bernoulli_nll_logits_backward`."""
    dnll, cache = open_cache("bernoulli_nll_logits_backward", "bernoulli_nll_logits",
                             dnll, cache)
    dlogits = np.empty_like(cache.saved)
    for n in range(dlogits.shape[0]):
        for i in _entries(dlogits, n):
            dlogits[i] = float(dnll[n]) * float(cache.saved[i])  # sigmoid(l) - x
    return dlogits


__all__ = exports(__name__, globals())
