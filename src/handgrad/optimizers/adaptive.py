"""Adamax, NAdam, RAdam and Adadelta, with exactly the update rules of ``torch.optim``
(formulas in :mod:`handgrad.optimizers`); ``_update(name, p, g, lr, h)`` reads the
hyper-parameters from ``h`` (the optimizer, or the one holding the group's options)."""

from __future__ import annotations

import math

from .._checks import array_module
from .._hyper import flag, number
from .base import Optimizer, betas_pair

__all__ = ["Adadelta", "Adamax", "NAdam", "RAdam"]


class _Moments(Optimizer):
    """Shared arguments of the Adam relatives: ``betas``, ``eps``, ``weight_decay``."""

    _counts_steps = True

    def __init__(self, lr, betas, eps, weight_decay, clipnorm, clipvalue):
        super().__init__(lr, clipnorm, clipvalue)
        op = type(self).__name__
        self.betas = betas_pair(op, betas)
        self.eps = number(op, "eps", eps, low=0.0, low_open=True)
        self.weight_decay = number(op, "weight_decay", weight_decay, low=0.0)

    def _decay(self, p, g, lr, h):
        """``p *= 1 - lr wd`` (decoupled) or ``g + wd p`` (L2): the gradient to use."""
        if h.weight_decay and getattr(h, "decoupled_weight_decay", False):
            p *= 1.0 - lr * h.weight_decay
        elif h.weight_decay:
            return g + h.weight_decay * p
        return g

    def _moments(self, name, p, g, h):
        """``m = b1 m + (1 - b1) g`` and ``v = b2 v + (1 - b2) g^2`` (in place)."""
        beta1, beta2 = h.betas
        m = self._slot("exp_avg", name, p)
        v = self._slot("exp_avg_sq", name, p)
        m += (1.0 - beta1) * (g - m)
        v *= beta2
        v += (1.0 - beta2) * (g * g)
        return m, v


class Adamax(_Moments):
    """Adam with the infinity norm, as ``torch.optim.Adamax``."""

    _config_keys = ("lr", "betas", "eps", "weight_decay")

    def __init__(self, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 clipnorm=None, clipvalue=None):
        super().__init__(lr, betas, eps, weight_decay, clipnorm, clipvalue)

    def _slots(self):
        return ("exp_avg", "exp_inf")

    def _update(self, name, p, g, lr, h):
        xp = array_module(p)
        beta1, beta2 = h.betas
        g = self._decay(p, g, lr, h)
        m = self._slot("exp_avg", name, p)
        u = self._slot("exp_inf", name, p)
        m += (1.0 - beta1) * (g - m)
        u *= beta2
        xp.maximum(u, xp.abs(g) + h.eps, out=u)
        p -= (lr / (1.0 - beta1 ** self.state["step"][name])) * (m / u)


class NAdam(_Moments):
    """Adam with Nesterov momentum and momentum decay, as ``torch.optim.NAdam``."""

    _config_keys = ("lr", "betas", "eps", "weight_decay", "momentum_decay",
                    "decoupled_weight_decay")

    def __init__(self, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, clipnorm=None,
                 clipvalue=None):
        super().__init__(lr, betas, eps, weight_decay, clipnorm, clipvalue)
        self.momentum_decay = number("NAdam", "momentum_decay", momentum_decay, low=0.0)
        self.decoupled_weight_decay = flag("NAdam", "decoupled_weight_decay",
                                           decoupled_weight_decay)
        self._mu_products: dict[str, tuple[int, float]] = {}

    def _slots(self):
        return ("exp_avg", "exp_avg_sq")

    def _mu(self, h, t):
        return h.betas[0] * (1.0 - 0.5 * 0.96 ** (t * h.momentum_decay))

    def _mu_product(self, name, h, t):
        """``prod_{i <= t} mu_i``, kept per parameter (recomputed after a state load)."""
        last, product = self._mu_products.get(name, (0, 1.0))
        if last != t - 1:
            last, product = 0, 1.0
        for i in range(last + 1, t + 1):
            product *= self._mu(h, i)
        self._mu_products[name] = (t, product)
        return product

    def _update(self, name, p, g, lr, h):
        xp = array_module(p)
        t = self.state["step"][name]
        g = self._decay(p, g, lr, h)
        mu, mu_next = self._mu(h, t), self._mu(h, t + 1)
        product = self._mu_product(name, h, t)
        m, v = self._moments(name, p, g, h)
        denom = xp.sqrt(v / (1.0 - h.betas[1] ** t))
        denom += h.eps
        p -= (lr * (1.0 - mu) / (1.0 - product)) * (g / denom)
        p -= (lr * mu_next / (1.0 - product * mu_next)) * (m / denom)


class RAdam(_Moments):
    """Rectified Adam, as ``torch.optim.RAdam``: plain momentum SGD while the variance
    of the adaptive rate is intractable (``rho_t <= 5``)."""

    _config_keys = ("lr", "betas", "eps", "weight_decay", "decoupled_weight_decay")

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 decoupled_weight_decay=False, clipnorm=None, clipvalue=None):
        super().__init__(lr, betas, eps, weight_decay, clipnorm, clipvalue)
        self.decoupled_weight_decay = flag("RAdam", "decoupled_weight_decay",
                                           decoupled_weight_decay)

    def _slots(self):
        return ("exp_avg", "exp_avg_sq")

    def _update(self, name, p, g, lr, h):
        xp = array_module(p)
        beta1, beta2 = h.betas
        t = self.state["step"][name]
        g = self._decay(p, g, lr, h)
        m, v = self._moments(name, p, g, h)
        correction2 = 1.0 - beta2**t
        m_hat = m / (1.0 - beta1**t)
        rho_inf = 2.0 / (1.0 - beta2) - 1.0
        rho = rho_inf - 2.0 * t * beta2**t / correction2
        if rho > 5.0:
            rect = math.sqrt((rho - 4.0) * (rho - 2.0) * rho_inf
                             / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho))
            adaptive = xp.sqrt(v)
            adaptive += h.eps
            p -= m_hat * lr * (math.sqrt(correction2) / adaptive) * rect
        else:
            p -= m_hat * lr


class Adadelta(Optimizer):
    """Adadelta, as ``torch.optim.Adadelta``: ``s = rho s + (1 - rho) g^2``,
    ``d = sqrt(a + eps) / sqrt(s + eps) g``, ``a = rho a + (1 - rho) d^2``, ``p -= lr d``."""

    _config_keys = ("lr", "rho", "eps", "weight_decay")

    def __init__(self, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, clipnorm=None,
                 clipvalue=None):
        super().__init__(lr, clipnorm, clipvalue)
        self.rho = number("Adadelta", "rho", rho, low=0.0, high=1.0)
        self.eps = number("Adadelta", "eps", eps, low=0.0, low_open=True)
        self.weight_decay = number("Adadelta", "weight_decay", weight_decay, low=0.0)

    def _slots(self):
        return ("square_avg", "acc_delta")

    def _update(self, name, p, g, lr, h):
        xp = array_module(p)
        if h.weight_decay:
            g = g + h.weight_decay * p
        s = self._slot("square_avg", name, p)
        a = self._slot("acc_delta", name, p)
        s *= h.rho
        s += (1.0 - h.rho) * (g * g)
        delta = xp.sqrt(a + h.eps)
        delta /= xp.sqrt(s + h.eps)
        delta *= g
        a *= h.rho
        a += (1.0 - h.rho) * (delta * delta)
        p -= lr * delta
