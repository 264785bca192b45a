"""torch's warm-restart, cyclic and one-cycle schedules, and its LinearLR and PolynomialLR.
``schedule(t)`` is torch's learning rate after ``t`` calls of ``scheduler.step()`` (the
learning rate only: torch's CyclicLR and OneCycleLR also cycle momentum, these do not).

* ``LinearLR``:     ``lr * (start + (end - start) * min(t, T) / T)``
* ``PolynomialLR``: ``lr * (1 - min(t, T) / T) ** power``
* ``CosineWarmRestarts``: ``eta_min + (lr - eta_min) (1 + cos(pi T_cur / T_i)) / 2`` with
  ``T_i = T_0 T_mult^k`` the length of the current cycle and ``T_cur`` the steps into it.
* ``Cyclic``: ``base_lr + (max_lr - base_lr) * s(x) * f``: ``s`` rises over
  ``step_size_up`` steps, falls over ``step_size_down``; ``f`` is 1 (triangular),
  ``1 / 2^(cycle - 1)`` (triangular2) or ``gamma^t`` (exp_range).
* ``OneCycle``: from ``max_lr / div_factor`` up to ``max_lr`` over ``pct_start`` of
  ``total_steps``, then down to ``max_lr / div_factor / final_div_factor`` (three_phase:
  back to the start first), annealed by cosine or linearly.
"""

from __future__ import annotations

import math

from .._checks import choice, positive_int
from .._hyper import flag, number
from .base import Schedule

__all__ = ["CosineWarmRestarts", "Cyclic", "LinearLR", "OneCycle", "PolynomialLR"]


class LinearLR(Schedule):
    """``lr`` times a factor moving linearly from ``start_factor`` to ``end_factor`` over
    ``total_iters`` steps, as ``torch.optim.lr_scheduler.LinearLR``."""

    _config_keys = ("lr", "start_factor", "end_factor", "total_iters")

    def __init__(self, lr, start_factor=1.0 / 3, end_factor=1.0, total_iters=5):
        self.lr = number("LinearLR", "lr", lr, low=0.0)
        self.start_factor = number("LinearLR", "start_factor", start_factor, low=0.0,
                                   low_open=True, high=1.0)
        self.end_factor = number("LinearLR", "end_factor", end_factor, low=0.0, high=1.0)
        self.total_iters = positive_int("LinearLR", "total_iters", total_iters)

    def _rate(self, step):
        progress = min(step, self.total_iters) / self.total_iters
        return self.lr * (self.start_factor + (self.end_factor - self.start_factor) * progress)


class PolynomialLR(Schedule):
    """``lr * (1 - min(t, total_iters) / total_iters) ** power``, as
    ``torch.optim.lr_scheduler.PolynomialLR``."""

    _config_keys = ("lr", "total_iters", "power")

    def __init__(self, lr, total_iters=5, power=1.0):
        self.lr = number("PolynomialLR", "lr", lr, low=0.0)
        self.total_iters = positive_int("PolynomialLR", "total_iters", total_iters)
        self.power = number("PolynomialLR", "power", power, low=0.0)

    def _rate(self, step):
        return self.lr * (1.0 - min(step, self.total_iters) / self.total_iters) ** self.power


class CosineWarmRestarts(Schedule):
    """Cosine annealing from ``lr`` to ``eta_min`` restarted every cycle, cycles ``T_0``,
    ``T_0 T_mult``, ... steps long, as ``torch.optim.lr_scheduler.CosineAnnealingWarmRestarts``."""

    _config_keys = ("lr", "T_0", "T_mult", "eta_min")

    def __init__(self, lr, T_0, T_mult=1, eta_min=0.0):
        self.lr = number("CosineWarmRestarts", "lr", lr, low=0.0)
        self.T_0 = positive_int("CosineWarmRestarts", "T_0", T_0)
        self.T_mult = positive_int("CosineWarmRestarts", "T_mult", T_mult)
        self.eta_min = number("CosineWarmRestarts", "eta_min", eta_min, low=0.0)

    def _rate(self, step):
        t_cur, t_i = step, self.T_0
        if self.T_mult == 1:
            t_cur %= t_i
        while t_cur >= t_i:  # at most log(step) cycles
            t_cur -= t_i
            t_i *= self.T_mult
        return self.eta_min + (self.lr - self.eta_min) * (
            1.0 + math.cos(math.pi * t_cur / t_i)) / 2.0


class Cyclic(Schedule):
    """Cyclical learning rate between ``base_lr`` and ``max_lr``, as
    ``torch.optim.lr_scheduler.CyclicLR`` (modes triangular, triangular2, exp_range)."""

    _config_keys = ("base_lr", "max_lr", "step_size_up", "step_size_down", "mode", "gamma")

    def __init__(self, base_lr, max_lr, step_size_up=2000, step_size_down=None,
                 mode="triangular", gamma=1.0):
        op = "Cyclic"
        self.base_lr = number(op, "base_lr", base_lr, low=0.0)
        self.max_lr = number(op, "max_lr", max_lr, low=0.0)
        self.step_size_up = positive_int(op, "step_size_up", step_size_up)
        self.step_size_down = None if step_size_down is None else positive_int(
            op, "step_size_down", step_size_down)
        self.mode = choice(op, "mode", mode, ("triangular", "triangular2", "exp_range"))
        self.gamma = number(op, "gamma", gamma, low=0.0, low_open=True)

    def _rate(self, step):
        down = self.step_size_up if self.step_size_down is None else self.step_size_down
        total = float(self.step_size_up + down)
        ratio = self.step_size_up / total
        cycle = math.floor(1 + step / total)
        x = 1.0 + step / total - cycle
        scale = x / ratio if x <= ratio else (x - 1) / (ratio - 1)
        factor = {"triangular": 1.0, "triangular2": 1 / (2.0 ** (cycle - 1)),
                  "exp_range": self.gamma**step}[self.mode]
        return self.base_lr + (self.max_lr - self.base_lr) * scale * factor


class OneCycle(Schedule):
    """The one-cycle policy, as ``torch.optim.lr_scheduler.OneCycleLR`` (a step past
    ``total_steps`` is refused, as torch refuses it)."""

    _config_keys = ("max_lr", "total_steps", "pct_start", "anneal_strategy", "div_factor",
                    "final_div_factor", "three_phase")

    def __init__(self, max_lr, total_steps, pct_start=0.3, anneal_strategy="cos",
                 div_factor=25.0, final_div_factor=1e4, three_phase=False):
        op = "OneCycle"
        self.max_lr = number(op, "max_lr", max_lr, low=0.0)
        self.total_steps = positive_int(op, "total_steps", total_steps)
        self.pct_start = number(op, "pct_start", pct_start, low=0.0, high=1.0)
        self.anneal_strategy = choice(op, "anneal_strategy", anneal_strategy, ("cos", "linear"))
        self.div_factor = number(op, "div_factor", div_factor, low=0.0, low_open=True)
        self.final_div_factor = number(op, "final_div_factor", final_div_factor, low=0.0,
                                       low_open=True)
        self.three_phase = flag(op, "three_phase", three_phase)

    def _phases(self):
        """``(end step, start lr, end lr)`` of each phase, as torch's ``_schedule_phases``."""
        initial = self.max_lr / self.div_factor
        low = initial / self.final_div_factor
        rise = float(self.pct_start * self.total_steps) - 1
        last = self.total_steps - 1
        if self.three_phase:
            return [(rise, initial, self.max_lr),
                    (float(2 * self.pct_start * self.total_steps) - 2, self.max_lr, initial),
                    (last, initial, low)]
        return [(rise, initial, self.max_lr), (last, self.max_lr, low)]

    def _rate(self, step):
        if step > self.total_steps:
            raise ValueError(f"OneCycle: step {step} is past total_steps="
                             f"{self.total_steps}")
        start_step, phases = 0.0, self._phases()
        index = 0
        while step > phases[index][0] and index < len(phases) - 1:
            start_step = phases[index][0]
            index += 1
        end_step, start, end = phases[index]
        pct = (step - start_step) / (end_step - start_step)
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start
