"""The three kernels of a variational autoencoder with a Gaussian posterior
``q(z | x) = N(mu, diag(exp(log_var)))``, a standard normal prior and Bernoulli pixels.

Per element (``s = exp(log_var / 2)``, ``eps ~ N(0, 1)`` drawn by the caller)::

    reparameterize   z = mu + s * eps                     dmu = dz
                                                          dlog_var = dz * s * eps / 2
    gaussian_kl      KL(N(mu, s^2) || N(0, 1))            dmu = dkl * mu
                     = (mu^2 + exp(log_var) - 1 - log_var) / 2
                                                          dlog_var = dkl * (exp(log_var) - 1) / 2
    bernoulli_nll    -log p(x | l) = softplus(l) - x l    dl = dnll * (sigmoid(l) - x)
      _logits        (p = sigmoid(l), x in [0, 1])

``gaussian_kl`` and ``bernoulli_nll_logits`` sum over every axis but the first, so they
return one value per example, shape ``(N,)``, and their backward takes ``d`` of that shape.
``exp(log_var) - 1`` is evaluated as ``expm1`` (exact near ``log_var = 0``, where the KL
of a unit variance would otherwise lose its digits), ``softplus`` and ``sigmoid`` without
``exp`` of a positive number (:mod:`.special`), so any finite logits give finite results.
The caches hold one array each (``s * eps / 2``; ``mu`` and ``expm1(log_var)``;
``sigmoid(l) - x``).
"""

from __future__ import annotations

from .._checks import array_module, float_array, same_dtype
from . import special
from ._args.elementwise import make_cache, open_cache
from .declare import declare, exports


def _batched(op, name, value):
    """A float array with a leading example axis."""
    value = float_array(op, name, value)
    if value.ndim == 0:
        raise ValueError(f"{op}: '{name}' must have a leading example axis (N, ...); received "
                         f"a scalar")
    return value


def prepare_like(op, first_name, first, **others):
    """``first`` and ``others`` as float arrays of one shape and dtype, ``first`` with a
    leading example axis; a list in argument order."""
    first = _batched(op, first_name, first)
    arrays = [first]
    for name, value in others.items():
        value = float_array(op, name, value)
        same_dtype(op, **{first_name: first, name: value})
        if tuple(value.shape) != tuple(first.shape):
            raise ValueError(f"{op}: '{name}' must have the shape of '{first_name}' "
                             f"{tuple(first.shape)}; received {tuple(value.shape)}")
        arrays.append(value)
    return arrays


def prepare_bernoulli(op, logits, x):
    """``logits`` and targets ``x`` of one shape and dtype, ``x`` in [0, 1]."""
    logits, x = prepare_like(op, "logits", logits, x=x)
    xp = array_module(x)
    if x.size and not (xp.min(x) >= 0 and xp.max(x) <= 1):
        raise ValueError(f"{op}: 'x' must hold Bernoulli means in [0, 1] (e.g. pixels "
                         f"scaled to [0, 1]); received values from {float(xp.min(x)):g} to "
                         f"{float(xp.max(x)):g}")
    return logits, x


def per_example_sum(xp, values):
    """Sum over every axis but the first: (N, ...) -> (N,)."""
    return xp.sum(values, axis=tuple(range(1, values.ndim)))


def per_example_scale(d, like):
    """``d`` (N,) reshaped to broadcast against ``like`` (N, ...)."""
    return d.reshape(d.shape + (1,) * (like.ndim - 1))


def reparameterize(mu, log_var, eps):
    """z = mu + exp(log_var / 2) * eps: mu, log_var, eps of one shape (N, ...) and dtype.

    ``eps`` holds standard normal draws the caller made (from its own Generator).
    Returns ``(z, cache)`` for :func:`reparameterize_backward`.
    """
    mu, log_var, eps = prepare_like("reparameterize", "mu", mu, log_var=log_var, eps=eps)
    xp = array_module(mu)
    noise = xp.exp(log_var * 0.5) * eps
    return mu + noise, make_cache("reparameterize", mu, noise * 0.5)


def reparameterize_backward(dz, cache):
    """(dmu, dlog_var) = (dz, dz * exp(log_var / 2) * eps / 2)."""
    dz, cache = open_cache("reparameterize_backward", "reparameterize", dz, cache)
    return dz.copy(), dz * cache.saved


def gaussian_kl(mu, log_var):
    """Per-example KL(N(mu, exp(log_var)) || N(0, 1)) = -1/2 sum(1 + log_var - mu^2 -
    exp(log_var)) over every axis but the first: mu, log_var (N, ...) -> kl (N,).

    Returns ``(kl, cache)`` for :func:`gaussian_kl_backward`.
    """
    mu, log_var = prepare_like("gaussian_kl", "mu", mu, log_var=log_var)
    xp = array_module(mu)
    var_minus_one = xp.expm1(log_var)
    kl = per_example_sum(xp, mu * mu + (var_minus_one - log_var)) * 0.5
    return kl, make_cache("gaussian_kl", kl, (mu, var_minus_one))


def gaussian_kl_backward(dkl, cache):
    """(dmu, dlog_var) = (dkl * mu, dkl * (exp(log_var) - 1) / 2), dkl (N,) broadcast."""
    dkl, cache = open_cache("gaussian_kl_backward", "gaussian_kl", dkl, cache)
    mu, var_minus_one = cache.saved
    d = per_example_scale(dkl, mu)
    return d * mu, d * var_minus_one * 0.5


def bernoulli_nll_logits(logits, x):
    """Per-example Bernoulli negative log-likelihood of ``x`` under ``p = sigmoid(logits)``:
    sum(softplus(logits) - x * logits) over every axis but the first, in nats.

    logits, x (N, ...) of one dtype, x in [0, 1] -> nll (N,). Stable for any finite
    logits. Returns ``(nll, cache)`` for :func:`bernoulli_nll_logits_backward`.
    """
    op = "bernoulli_nll_logits"
    logits, x = prepare_bernoulli(op, logits, x)
    xp = array_module(logits)
    nll = per_example_sum(xp, special.softplus(xp, logits) - x * logits)
    return nll, make_cache(op, nll, special.sigmoid(xp, logits) - x)


def bernoulli_nll_logits_backward(dnll, cache):
    """dlogits = dnll * (sigmoid(logits) - x), dnll (N,) broadcast; ``x`` is data (no
    gradient)."""
    dnll, cache = open_cache("bernoulli_nll_logits_backward", "bernoulli_nll_logits",
                             dnll, cache)
    return per_example_scale(dnll, cache.saved) * cache.saved


from .declare import Data, Sample  # noqa: E402  (the declarations' samples)


def _torch_gaussian_kl(F, mu, log_var):
    return (-0.5 * (1 + log_var - mu * mu - log_var.exp())).flatten(1).sum(1)


def _torch_bernoulli_nll_logits(F, logits, x):
    return F.binary_cross_entropy_with_logits(logits, x, reduction="none").flatten(1).sum(1)


declare(reparameterize, reparameterize_backward,
        torch=lambda F, mu, log_var, eps: mu + (0.5 * log_var).exp() * eps,
        samples=(Sample(((3, 4), (3, 4), Data((3, 4)))),))
declare(gaussian_kl, gaussian_kl_backward, torch=_torch_gaussian_kl,
        samples=(Sample(((3, 4), (3, 4))), Sample(((2, 3, 2), (2, 3, 2)))))
declare(bernoulli_nll_logits, bernoulli_nll_logits_backward, torch=_torch_bernoulli_nll_logits,
        samples=(Sample(((3, 4), Data((3, 4), 0.0, 1.0))),
                 Sample(((2, 2, 3), Data((2, 2, 3), 0.0, 1.0)))))
__all__ = exports(__name__, globals())
