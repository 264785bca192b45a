"""The bilinear map of two inputs, as ``F.bilinear``::

    y[..., o] = sum_ij x1[..., i] W[i, j, o] x2[..., j] + b[o]

x1 (..., I), x2 (..., J) with the same leading axes, W (I, J, O) (torch's weight (O, I, J)
with its first axis moved last, as Dense's W is torch's transposed), b (O,) or None.
Backward, with sums over the leading axes for the parameters::

    dx1[..., i] = sum_jo dy[..., o] W[i, j, o] x2[..., j]
    dx2[..., j] = sum_io dy[..., o] W[i, j, o] x1[..., i]
    dW[i, j, o] = sum x1[..., i] x2[..., j] dy[..., o],   db = sum dy

Each is one ``einsum`` (a two-step contraction, no (..., I, J, O) temporary). The cache
holds x1, x2 and W.
"""

from __future__ import annotations

from .._checks import array_module, float_array, same_dtype
from ._args.elementwise import make_cache, open_cache
from .declare import Sample, declare, exports


def _check(op, x1, x2, W, b):
    x1, x2, W = (float_array(op, name, a) for name, a in (("x1", x1), ("x2", x2), ("W", W)))
    b = None if b is None else float_array(op, "b", b)
    same_dtype(op, x1=x1, x2=x2, W=W, **({} if b is None else {"b": b}))
    if x1.ndim == 0 or x1.shape[:-1] != x2.shape[:-1] or W.ndim != 3 \
            or W.shape[:2] != (x1.shape[-1], x2.shape[-1]):
        raise ValueError(f"{op}: expected x1 (..., I), x2 (..., J) with the same leading axes "
                         f"and W (I, J, O); received x1 {tuple(x1.shape)}, x2 "
                         f"{tuple(x2.shape)}, W {tuple(W.shape)}")
    if b is not None and b.shape != (W.shape[2],):
        raise ValueError(f"{op}: 'b' must have shape ({W.shape[2]},) (the outputs of W "
                         f"{tuple(W.shape)}); received shape {tuple(b.shape)}")
    return x1, x2, W, b


def bilinear(x1, x2, W, b=None):
    """y = x1^T W x2 + b per leading index: x1 (..., I), x2 (..., J), W (I, J, O),
    b (O,) or None -> y (..., O). Returns ``(y, cache)`` for :func:`bilinear_backward`."""
    x1, x2, W, b = _check("bilinear", x1, x2, W, b)
    xp = array_module(x1)
    y = xp.einsum("...i,ijo,...j->...o", x1, W, x2, optimize=True)
    if b is not None:
        y += b
    return y, make_cache("bilinear", y, (x1, x2, W), params=(b is not None,))


def bilinear_backward(dy, cache):
    """(dx1, dx2, dW, db) of :func:`bilinear` (db None without b); formulas in the module
    docstring."""
    dy, cache = open_cache("bilinear_backward", "bilinear", dy, cache)
    x1, x2, W = cache.saved
    xp = array_module(dy)
    dx1 = xp.einsum("...o,ijo,...j->...i", dy, W, x2, optimize=True)
    dx2 = xp.einsum("...o,ijo,...i->...j", dy, W, x1, optimize=True)
    lead = (-1,)
    dW = xp.einsum("ni,nj,no->ijo", x1.reshape(lead + x1.shape[-1:]),
                   x2.reshape(lead + x2.shape[-1:]), dy.reshape(lead + dy.shape[-1:]),
                   optimize=True)
    db = dy.reshape(lead + dy.shape[-1:]).sum(axis=0) if cache.params[0] else None
    return dx1, dx2, dW, db


def torch_bilinear(F, x1, x2, W, b=None):
    return F.bilinear(x1, x2, W.permute(2, 0, 1), b)


declare(bilinear, bilinear_backward, torch=torch_bilinear, samples=(
    Sample(((4, 3), (4, 5), (3, 5, 2), (2,))),
    Sample(((2, 3, 4), (2, 3, 2), (4, 2, 3), None)),
))
__all__ = exports(__name__, globals())
