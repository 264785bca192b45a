"""The schedule base class: a function from the optimizer's step count to a learning
rate (see :mod:`handgrad.schedulers`)."""

from __future__ import annotations

from .._checks import int_tuple

__all__ = ["Schedule", "count"]


def count(op, name, value) -> int:
    """An int >= 0."""
    return int_tuple(op, name, value, 1, minimum=0)[0]


class Schedule:
    """Base class: ``__call__`` validates the step and delegates to ``_rate``."""

    _config_keys: tuple[str, ...] = ()

    def __call__(self, step) -> float:
        """Learning rate after ``step`` (int >= 0) completed optimizer steps."""
        return float(self._rate(count(type(self).__name__, "step", step)))

    def _rate(self, step: int) -> float:
        raise NotImplementedError

    def get_config(self) -> dict:
        """JSON-serializable arguments, ``{"name": class name, ...}``."""
        return {"name": type(self).__name__, **{k: getattr(self, k) for k in self._config_keys}}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._config_keys)
        return f"{type(self).__name__}({args})"
