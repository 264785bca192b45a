"""Backward and second-order kernels of an elementwise op, derived from its slopes."""

from __future__ import annotations

from ..._checks import array_module
from .elementwise import open_cache
from .gradgrad import gradgrad_result, open_elementwise


def _named(kernel, module, name, doc):
    kernel.__name__ = kernel.__qualname__ = name
    kernel.__module__ = module
    kernel.__doc__ = doc
    return kernel


def slope_kernels(op, slopes, *, masked=False):
    """``(<op>_backward, <op>_gradgrad)``, kernels of the module that defines ``slopes``
    (their docstrings end with ``slopes.__doc__``). ``slopes(xp, saved, *params) ->
    (f', f'')`` at the op's cache (f'' None for 0): dx = dy f' and
    (d_dy, d_x) = (q f', q dy f''). ``masked``: f' is a boolean array and dy (or q) is
    kept where it holds, else 0 (not times 0, which is nan for an infinite dy)."""

    def times_slope(xp, g, first):
        return xp.where(first, g, 0.0) if masked else g * first

    def backward(dy, cache):
        dy, cache = open_cache(f"{op}_backward", op, dy, cache)
        xp = array_module(dy)
        return times_slope(xp, dy, slopes(xp, cache.saved, *cache.params)[0])

    def gradgrad(q, dy, cache):
        q, dy, cache = open_elementwise(f"{op}_gradgrad", op, q, dy, cache)
        xp = array_module(q)
        first, second = slopes(xp, cache.saved, *cache.params)
        return gradgrad_result(times_slope(xp, q, first), q, dy, second)

    module = slopes.__module__
    return (_named(backward, module, f"{op}_backward",
                   f"dx = dy f'(x) of :func:`{op}`: {slopes.__doc__}"),
            _named(gradgrad, module, f"{op}_gradgrad",
                   f"Second order of :func:`{op}`, (q f', q dy f''): {slopes.__doc__}"))


def mask_kernels(masks, op, where):
    """:func:`slope_kernels` of a piecewise-linear op whose slope is 1 where
    ``masks[op](x, *params)`` holds (``where``, as text for the docstrings), else 0."""
    mask = masks[op]

    def slopes(xp, x, *params):
        return mask(x, *params), None

    slopes.__module__ = mask.__module__
    slopes.__doc__ = f"f' = 1 where {where}, else 0; f'' = 0."
    return slope_kernels(op, slopes, masked=True)
