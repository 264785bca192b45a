"""Constant, step, exponential, cosine-with-warm-up and Noam schedules (formulas in
:mod:`handgrad.schedulers`)."""

from __future__ import annotations

import math

from .._checks import positive_int
from .._hyper import number
from .base import Schedule, count

__all__ = ["Constant", "CosineWarmup", "ExponentialDecay", "Noam", "StepDecay"]


class Constant(Schedule):
    """``lr`` at every step."""

    _config_keys = ("lr",)

    def __init__(self, lr):
        self.lr = number("Constant", "lr", lr, low=0.0)

    def _rate(self, step):
        return self.lr


class StepDecay(Schedule):
    """``lr * gamma ** (step // step_size)``, as ``torch.optim.lr_scheduler.StepLR``."""

    _config_keys = ("lr", "step_size", "gamma")

    def __init__(self, lr, step_size, gamma=0.1):
        self.lr = number("StepDecay", "lr", lr, low=0.0)
        self.step_size = positive_int("StepDecay", "step_size", step_size)
        self.gamma = number("StepDecay", "gamma", gamma, low=0.0, low_open=True)

    def _rate(self, step):
        return self.lr * self.gamma ** (step // self.step_size)


class ExponentialDecay(Schedule):
    """``lr * gamma ** step``, as ``torch.optim.lr_scheduler.ExponentialLR``."""

    _config_keys = ("lr", "gamma")

    def __init__(self, lr, gamma):
        self.lr = number("ExponentialDecay", "lr", lr, low=0.0)
        self.gamma = number("ExponentialDecay", "gamma", gamma, low=0.0, low_open=True)

    def _rate(self, step):
        return self.lr * self.gamma**step


class CosineWarmup(Schedule):
    """Linear warm-up from 0 to ``lr`` over ``warmup_steps``, cosine decay to ``min_lr`` at
    ``total_steps``, then constant ``min_lr``."""

    _config_keys = ("lr", "total_steps", "warmup_steps", "min_lr")

    def __init__(self, lr, total_steps, warmup_steps=0, min_lr=0.0):
        op = "CosineWarmup"
        self.lr = number(op, "lr", lr, low=0.0)
        self.total_steps = positive_int(op, "total_steps", total_steps)
        self.warmup_steps = count(op, "warmup_steps", warmup_steps)
        if self.warmup_steps > self.total_steps:
            raise ValueError(f"{op}: 'warmup_steps' must be <= total_steps="
                             f"{self.total_steps}; received {warmup_steps!r}")
        self.min_lr = number(op, "min_lr", min_lr, low=0.0, high=self.lr)

    def _rate(self, step):
        if step < self.warmup_steps:
            return self.lr * step / self.warmup_steps
        if step >= self.total_steps:
            return self.min_lr
        progress = (step - self.warmup_steps) / (self.total_steps - self.warmup_steps)
        return self.min_lr + (self.lr - self.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


class Noam(Schedule):
    """Transformer schedule ``factor / sqrt(d_model) * min(t ** -0.5, t * warmup_steps ** -1.5)``
    with ``t = max(step, 1)``: linear warm-up, peak at ``warmup_steps``, then ``1 / sqrt(t)``."""

    _config_keys = ("d_model", "warmup_steps", "factor")

    def __init__(self, d_model, warmup_steps, factor=1.0):
        self.d_model = positive_int("Noam", "d_model", d_model)
        self.warmup_steps = positive_int("Noam", "warmup_steps", warmup_steps)
        self.factor = number("Noam", "factor", factor, low=0.0, low_open=True)

    def _rate(self, step):
        t = max(step, 1)
        return self.factor * self.d_model**-0.5 * min(t**-0.5, t * self.warmup_steps**-1.5)
