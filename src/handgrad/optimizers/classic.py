"""The classic optimizers: SGD, Adam, AdamW, RMSProp and AdaGrad (formulas in
:mod:`handgrad.optimizers`). ``_update(name, p, g, lr, h)`` reads the hyper-parameters
from ``h``: the optimizer itself, or the one that holds the parameter's group options."""

from __future__ import annotations

import math

from .._checks import array_module
from .._hyper import flag, number
from .base import Optimizer, betas_pair

__all__ = ["SGD", "AdaGrad", "Adam", "AdamW", "RMSProp"]


class SGD(Optimizer):
    """Stochastic gradient descent with optional (Nesterov) momentum, as ``torch.optim.SGD``."""

    _config_keys = ("lr", "momentum", "nesterov", "weight_decay", "dampening")

    def __init__(self, lr=0.01, momentum=0.0, nesterov=False, weight_decay=0.0, dampening=0.0,
                 clipnorm=None, clipvalue=None):
        super().__init__(lr, clipnorm, clipvalue)
        self.momentum = number("SGD", "momentum", momentum, low=0.0)
        self.nesterov = flag("SGD", "nesterov", nesterov)
        self.weight_decay = number("SGD", "weight_decay", weight_decay, low=0.0)
        self.dampening = number("SGD", "dampening", dampening, low=0.0, high=1.0)
        if self.nesterov and (self.momentum == 0.0 or self.dampening != 0.0):
            raise ValueError(f"SGD: nesterov=True needs momentum > 0 and dampening == 0; "
                             f"received momentum={momentum!r}, dampening={dampening!r}")

    def _slots(self):
        return ("momentum_buffer",) if self.momentum else ()

    def _update(self, name, p, g, lr, h):
        d = g + h.weight_decay * p if h.weight_decay else g
        if h.momentum:
            if name in self.state.get("momentum_buffer", {}):
                buf = self._slot("momentum_buffer", name, p)
                buf *= h.momentum
                buf += (1.0 - h.dampening) * d
            else:  # the first step copies d, without dampening
                buf = self.state.setdefault("momentum_buffer", {})[name] = d.copy()
            d = d + h.momentum * buf if h.nesterov else buf
        p -= lr * d


class Adam(Optimizer):
    """Adam (or AMSGrad) with L2 weight decay added to the gradient, as ``torch.optim.Adam``."""

    _config_keys = ("lr", "betas", "eps", "weight_decay", "amsgrad")
    _counts_steps = True
    _decoupled = False

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
                 clipnorm=None, clipvalue=None):
        super().__init__(lr, clipnorm, clipvalue)
        op = type(self).__name__
        self.betas = betas_pair(op, betas)
        self.eps = number(op, "eps", eps, low=0.0, low_open=True)
        self.weight_decay = number(op, "weight_decay", weight_decay, low=0.0)
        self.amsgrad = flag(op, "amsgrad", amsgrad)

    def _slots(self):
        return ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if self.amsgrad else ())

    def _update(self, name, p, g, lr, h):
        xp = array_module(p)
        beta1, beta2 = h.betas
        t = self.state["step"][name]
        if h.weight_decay and h._decoupled:
            p *= 1.0 - lr * h.weight_decay
        elif h.weight_decay:
            g = g + h.weight_decay * p
        m = self._slot("exp_avg", name, p)
        v = self._slot("exp_avg_sq", name, p)
        m += (1.0 - beta1) * (g - m)
        v *= beta2
        v += (1.0 - beta2) * (g * g)
        if h.amsgrad:
            v_max = self._slot("max_exp_avg_sq", name, p)
            xp.maximum(v_max, v, out=v_max)
            v = v_max
        denom = xp.sqrt(v)
        denom /= math.sqrt(1.0 - beta2**t)
        denom += h.eps
        p -= (lr / (1.0 - beta1**t)) * (m / denom)


class AdamW(Adam):
    """Adam with decoupled weight decay ``p *= 1 - lr wd``, as ``torch.optim.AdamW``."""

    _decoupled = True

    def __init__(self, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, amsgrad=False,
                 clipnorm=None, clipvalue=None):
        super().__init__(lr, betas, eps, weight_decay, amsgrad, clipnorm, clipvalue)


class RMSProp(Optimizer):
    """RMSProp, optionally centered and with momentum, as ``torch.optim.RMSprop``."""

    _config_keys = ("lr", "alpha", "eps", "weight_decay", "momentum", "centered")

    def __init__(self, lr=0.01, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                 centered=False, clipnorm=None, clipvalue=None):
        super().__init__(lr, clipnorm, clipvalue)
        self.alpha = number("RMSProp", "alpha", alpha, low=0.0, high=1.0)
        self.eps = number("RMSProp", "eps", eps, low=0.0, low_open=True)
        self.weight_decay = number("RMSProp", "weight_decay", weight_decay, low=0.0)
        self.momentum = number("RMSProp", "momentum", momentum, low=0.0)
        self.centered = flag("RMSProp", "centered", centered)

    def _slots(self):
        return (("square_avg",) + (("grad_avg",) if self.centered else ())
                + (("momentum_buffer",) if self.momentum else ()))

    def _update(self, name, p, g, lr, h):
        xp = array_module(p)
        if h.weight_decay:
            g = g + h.weight_decay * p
        square_avg = self._slot("square_avg", name, p)
        square_avg *= h.alpha
        square_avg += (1.0 - h.alpha) * (g * g)
        if h.centered:
            grad_avg = self._slot("grad_avg", name, p)
            grad_avg += (1.0 - h.alpha) * (g - grad_avg)
            denom = xp.sqrt(square_avg - grad_avg * grad_avg)
        else:
            denom = xp.sqrt(square_avg)
        denom += h.eps
        if h.momentum:
            buf = self._slot("momentum_buffer", name, p)
            buf *= h.momentum
            buf += g / denom
            p -= lr * buf
        else:
            p -= lr * (g / denom)


class AdaGrad(Optimizer):
    """AdaGrad with learning-rate decay, as ``torch.optim.Adagrad``."""

    _config_keys = ("lr", "lr_decay", "weight_decay", "initial_accumulator_value", "eps")
    _counts_steps = True

    def __init__(self, lr=0.01, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0,
                 eps=1e-10, clipnorm=None, clipvalue=None):
        super().__init__(lr, clipnorm, clipvalue)
        self.lr_decay = number("AdaGrad", "lr_decay", lr_decay, low=0.0)
        self.weight_decay = number("AdaGrad", "weight_decay", weight_decay, low=0.0)
        self.initial_accumulator_value = number(
            "AdaGrad", "initial_accumulator_value", initial_accumulator_value, low=0.0
        )
        self.eps = number("AdaGrad", "eps", eps, low=0.0, low_open=True)

    def _slots(self):
        return ("sum",)

    def _update(self, name, p, g, lr, h):
        xp = array_module(p)
        if h.weight_decay:
            g = g + h.weight_decay * p
        t = self.state["step"][name]
        total = self._slot("sum", name, p, fill=h.initial_accumulator_value)
        total += g * g
        denom = xp.sqrt(total)
        denom += h.eps
        p -= (lr / (1.0 + (t - 1) * h.lr_decay)) * (g / denom)
