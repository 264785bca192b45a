"""Loop twins of the elementwise activations, built from each declaration's scalar math.

For every declared activation with ``value`` and ``slopes`` (:mod:`handgrad.ops.declare`)
this module defines ``<op>(x, ...)``, ``<op>_backward(dy, cache)`` and, where the op has
a second-order kernel, ``<op>_gradgrad(q, dy, cache)``, with the signatures and caches of
the vectorized kernels: a loop over entries of scalar Python math, ``y = f(x)``,
``dx = dy f'``, ``(d_dy, d_x) = (q f', q dy f'')`` with ``(f', f'') = slopes(saved)``.
The hyper-parameters are checked (and normalized) by the vectorized forward on an
empty slice of ``x``, so both report bad input alike.
"""

from __future__ import annotations

import numpy as np

from ..._checks import float_array
from .._args.elementwise import make_cache, open_cache
from .._args.gradgrad import open_elementwise
from ..declare import DECLARED, exports


def _loop(shape, dtype, entry):
    """An array of ``shape`` whose every entry is ``entry(index)``."""
    out = np.zeros(shape, dtype)
    for index in np.ndindex(*shape):
        out[index] = entry(index)
    return out


def _saved(cache, index):
    return 0.0 if cache.saved is None else float(cache.saved[index])


def _twins(decl):
    """(forward, backward, gradgrad or None) loop twins of one declared activation."""
    name = decl.name

    def forward(x, *args, **kwargs):
        x = float_array(name, "x", x)
        params = decl.forward(x.reshape(-1)[:0], *args, **kwargs)[1].params
        y = _loop(x.shape, x.dtype, lambda i: decl.value(float(x[i]), *params))
        saved = {"x": x, "y": y}.get(decl.saves)
        return y, make_cache(name, x, saved, params)

    def backward(dy, cache):
        dy, cache = open_cache(f"{name}_backward", name, dy, cache)
        return _loop(dy.shape, dy.dtype, lambda i: float(dy[i]) * decl.slopes(
            _saved(cache, i), *cache.params)[0])

    def gradgrad(q, dy, cache):
        q, dy, cache = open_elementwise(f"{name}_gradgrad", name, q, dy, cache)
        slopes = {i: decl.slopes(_saved(cache, i), *cache.params) for i in np.ndindex(*q.shape)}
        return (_loop(q.shape, q.dtype, lambda i: float(q[i]) * slopes[i][0]),
                _loop(q.shape, q.dtype, lambda i: float(q[i]) * float(dy[i]) * slopes[i][1]))

    kernels = (forward, backward, gradgrad if decl.gradgrad else None)
    for twin, kernel in zip(kernels, decl.kernels):
        twin.__name__ = twin.__qualname__ = kernel.__name__
        twin.__module__ = __name__
        twin.__doc__ = f"Loop twin of :func:`handgrad.ops.{kernel.__name__}`."
    return kernels


for _decl in list(DECLARED.values()):
    if _decl.elementwise:
        globals().update({k.__name__: k for k in _twins(_decl) if k is not None})
__all__ = exports(__name__, globals())
