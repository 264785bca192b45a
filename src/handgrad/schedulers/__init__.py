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
* ``LinearLR``, ``PolynomialLR``, ``OneCycle``, ``CosineWarmRestarts``, ``Cyclic``: torch's
  ``LinearLR``, ``PolynomialLR``, ``OneCycleLR``, ``CosineAnnealingWarmRestarts`` and
  ``CyclicLR`` (the learning rate only: momentum is not cycled), see :mod:`.cyclic`.

With parameter groups, ``optimizer.lr = schedule(t)`` scales each group's rate as
torch's schedulers do (see :mod:`handgrad.optimizers.groups`).
"""

from __future__ import annotations

from .._hyper import build_from_config, get_instance
from .base import Schedule
from .classic import Constant, CosineWarmup, ExponentialDecay, Noam, StepDecay
from .cyclic import CosineWarmRestarts, Cyclic, LinearLR, OneCycle, PolynomialLR

__all__ = [
    "Constant", "CosineWarmRestarts", "CosineWarmup", "Cyclic", "ExponentialDecay",
    "LinearLR", "Noam", "OneCycle", "PolynomialLR", "Schedule", "StepDecay", "from_config",
    "get",
]

_REGISTRY = {
    "linear_lr": LinearLR,
    "polynomial_lr": PolynomialLR,
    "one_cycle": OneCycle,
    "cosine_warm_restarts": CosineWarmRestarts,
    "cyclic": Cyclic,
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
