"""Learning-rate schedules: functions from the optimizer step count to a learning rate.

``schedule(t)`` is the learning rate of the update that follows ``t`` completed
updates, so a training loop does ``opt.lr = schedule(opt.iterations)`` before each
``opt.step``; this matches ``torch.optim.lr_scheduler`` after ``t`` calls of
``scheduler.step()``.

* ``Constant``:         ``lr``
* ``StepDecay``:        ``lr * gamma ** (t // step_size)``                 (``StepLR``)
* ``ExponentialDecay``: ``lr * gamma ** t``                                (``ExponentialLR``)
* ``CosineWarmup``:     ``lr * t / warmup`` for ``t < warmup``, then
  ``min_lr + (lr - min_lr) * (1 + cos(pi * (t - warmup) / (total - warmup))) / 2``
  and ``min_lr`` from ``t >= total`` on.
* ``Noam``:             ``factor * d_model ** -0.5 * min(t ** -0.5, t * warmup ** -1.5)``
  with ``t = max(t, 1)`` (the schedule of "Attention is all you need", rising
  linearly for ``warmup`` steps, then decaying as ``1 / sqrt(t)``).
"""

from __future__ import annotations

import math

from ._checks import int_tuple, positive_int
from ._hyper import build_from_config, get_instance, number

__all__ = [
    "Constant", "CosineWarmup", "ExponentialDecay", "Noam", "Schedule", "StepDecay",
    "from_config", "get",
]


def _count(op, name, value) -> int:
    """An int >= 0."""
    return int_tuple(op, name, value, 1, minimum=0)[0]


class Schedule:
    """Base class: ``__call__`` validates the step and delegates to ``_rate``."""

    _config_keys: tuple[str, ...] = ()

    def __call__(self, step) -> float:
        """Learning rate after ``step`` (int >= 0) completed optimizer steps."""
        return float(self._rate(_count(type(self).__name__, "step", step)))

    def _rate(self, step: int) -> float:
        raise NotImplementedError

    def get_config(self) -> dict:
        """JSON-serializable arguments, ``{"name": class name, ...}``."""
        return {"name": type(self).__name__, **{k: getattr(self, k) for k in self._config_keys}}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._config_keys)
        return f"{type(self).__name__}({args})"


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
        self.warmup_steps = _count(op, "warmup_steps", warmup_steps)
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


_REGISTRY = {
    "constant": Constant,
    "step_decay": StepDecay,
    "exponential_decay": ExponentialDecay,
    "cosine_warmup": CosineWarmup,
    "noam": Noam,
}


def get(name_or_schedule, **kwargs) -> Schedule:
    """A schedule from a name (case and underscores ignored: "step_decay" == "StepDecay") and
    keyword arguments, from a config dict, or a :class:`Schedule` returned as is."""
    return get_instance("schedulers", Schedule, _REGISTRY, name_or_schedule, kwargs)


def from_config(config) -> Schedule:
    """Inverse of :meth:`Schedule.get_config`."""
    return build_from_config("schedulers.from_config", _REGISTRY, config)
