"""The second-order pass of a layer (the base of ``Layer``): for a scalar P of an input
gradient (a gradient penalty), the latest forward's cache is kept by
:meth:`SecondOrder.input_gradient` and :meth:`SecondOrder.double_backward`; ``backward``
consumes it last.
"""

from __future__ import annotations

from .registry import REGISTRY


def double_backward_layers() -> list:
    """The names of the registered layer classes with a second-order pass."""
    return sorted(name for name, cls in REGISTRY.items() if cls.has_double_backward())


class SecondOrder:
    """``input_gradient`` and ``double_backward``; a layer with a second-order pass
    implements ``_double_backward(q, dy, cache)``."""

    @classmethod
    def has_double_backward(cls) -> bool:
        """Whether the class implements :meth:`double_backward`."""
        return cls._double_backward is not SecondOrder._double_backward

    def supports_double_backward(self) -> bool:
        return self.has_double_backward()  # whether double_backward is implemented here

    def input_gradient(self, dy):
        """dL/dx of the latest training forward for upstream ``dy``, like ``backward``
        but keeping the cache (for :meth:`double_backward`) and adding no gradients."""
        return self._backward(dy, self._latest_cache("input_gradient"))[0]

    def double_backward(self, q, dy):
        """The backward of the backward, for the latest training forward (cache kept).

        With ``dx = B(dy; x, theta)`` the input gradient for upstream ``dy`` and
        ``q = dP/d dx`` (x's shape) for a scalar ``P``: returns ``(dP/d dy, dP/dx)`` (the
        second is None where ``B`` does not depend on ``x``) and adds ``dP/d theta``
        through ``B`` into ``gradients`` (unless the layer is frozen)."""
        d_dy, d_x, grads = self._double_backward(q, dy, self._latest_cache("double_backward"))
        self._accumulate(grads)
        return d_dy, d_x

    def _double_backward(self, q, dy, cache):
        """``(dP/d dy, dP/dx or None, {key: dP/d parameter})``; layers with a second-order
        pass override this (and :meth:`supports_double_backward` then says so)."""
        raise TypeError(f"{self.label} has no second-order (double) backward pass; it is "
                        f"implemented for {', '.join(double_backward_layers())}")
