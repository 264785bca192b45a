"""Numerically stable special functions, vectorized and dtype-preserving.

``erf`` / ``erfc`` use W. J. Cody's rational Chebyshev approximations (Math.
Comp. 23, 1969), in the three ranges of his CALERF routine::

    |x| <= 0.46875:     erf(x)  = x R1(x^2)
    0.46875 < x <= 4:   erfc(x) = exp(-x^2) R2(x)
    x > 4:              erfc(x) = exp(-x^2) / x (1/sqrt(pi) + R3(1/x^2) / x^2)

with ``exp(-x^2)`` evaluated as ``exp(-h^2) exp(-(x - h)(x + h))``, ``h`` = x
rounded down to a multiple of 1/16, so that the rounding of ``x^2`` is not
amplified. In float64 the relative error is a few ulps over the whole line,
including the far tail of ``erfc``; float32 inputs are evaluated in float32.

``sigmoid`` and ``softplus`` never evaluate ``exp`` of a positive number, so
they neither overflow nor warn for any finite input; ``log_softmax`` subtracts the
maximum first, for the same reason.

Every function is ``f(xp, x)``: ``xp`` the array module of ``x`` (NumPy or a
compatible one), no validation, no cache, the result in ``x``'s shape and dtype. The
kernels (:mod:`.activations`, :mod:`.softmax`) and the losses build on them.
"""

from __future__ import annotations

import math

# Coefficients of R1, R2, R3 (numerator, denominator), from Cody (1969) / CALERF.
_SMALL_NUM = (3.16112374387056560e00, 1.13864154151050156e02, 3.77485237685302021e02,
              3.20937758913846947e03, 1.85777706184603153e-1)
_SMALL_DEN = (2.36012909523441209e01, 2.44024637934444173e02, 1.28261652607737228e03,
              2.84423683343917062e03)
_MID_NUM = (5.64188496988670089e-1, 8.88314979438837594e00, 6.61191906371416295e01,
            2.98635138197400131e02, 8.81952221241769090e02, 1.71204761263407058e03,
            2.05107837782607147e03, 1.23033935479799725e03, 2.15311535474403846e-8)
_MID_DEN = (1.57449261107098347e01, 1.17693950891312499e02, 5.37181101862009858e02,
            1.62138957456669019e03, 3.29079923573345963e03, 4.36261909014324716e03,
            3.43936767414372164e03, 1.23033935480374942e03)
_LARGE_NUM = (3.05326634961232344e-1, 3.60344899949804439e-1, 1.25781726111229246e-1,
              1.60837851487422766e-2, 6.58749161529837803e-4, 1.63153871373020978e-2)
_LARGE_DEN = (2.56852019228982242e00, 1.87295284992346725e00, 5.27905102951428412e-1,
              6.05183413124413191e-2, 2.33520497626869185e-3)
_SMALL_LIMIT = 0.46875
_MID_LIMIT = 4.0
_TAIL_LIMIT = 30.0  # erfc(30) underflows in float64; clipping keeps x^2 finite
_INV_SQRT_PI = 1.0 / math.sqrt(math.pi)
SQRT_HALF = math.sqrt(0.5)


def _erf_small(xp, x):
    """erf(x) for |x| <= 0.46875 (x is clipped to that range)."""
    x = xp.clip(x, -_SMALL_LIMIT, _SMALL_LIMIT)
    z = x * x
    a, b = _SMALL_NUM, _SMALL_DEN
    num = (((a[4] * z + a[0]) * z + a[1]) * z + a[2]) * z + a[3]
    den = (((z + b[0]) * z + b[1]) * z + b[2]) * z + b[3]
    return x * num / den


def _exp_minus_square(xp, y):
    """exp(-y^2) with the rounding of y^2 kept out of the exponent's error."""
    head = xp.floor(y * 16.0) / 16.0
    return xp.exp(-head * head) * xp.exp(-(y - head) * (y + head))


def _erfc_positive(xp, y):
    """erfc(y) for y >= 0.46875 (y is clipped to the valid ranges internally)."""
    y = xp.minimum(y, _TAIL_LIMIT)
    num = _MID_NUM[8] * y
    den = y
    for c, d in zip(_MID_NUM[:7], _MID_DEN[:7], strict=True):
        num = (num + c) * y
        den = (den + d) * y
    mid = (num + _MID_NUM[7]) / (den + _MID_DEN[7])

    t = xp.maximum(y, _MID_LIMIT)
    z = 1.0 / (t * t)
    num = _LARGE_NUM[5] * z
    den = z
    for p, q in zip(_LARGE_NUM[:4], _LARGE_DEN[:4], strict=True):
        num = (num + p) * z
        den = (den + q) * z
    large = (_INV_SQRT_PI - z * (num + _LARGE_NUM[4]) / (den + _LARGE_DEN[4])) / t

    return xp.where(y <= _MID_LIMIT, mid, large) * _exp_minus_square(xp, y)


def erf(xp, x):
    """The error function, elementwise, in ``x``'s dtype."""
    ax = xp.abs(x)
    outer = 1.0 - _erfc_positive(xp, ax)
    return xp.where(ax <= _SMALL_LIMIT, _erf_small(xp, x), xp.where(x < 0, -outer, outer))


def erfc(xp, x):
    """The complementary error function 1 - erf(x), accurate in the tail, in ``x``'s dtype."""
    ax = xp.abs(x)
    outer = _erfc_positive(xp, ax)
    outer = xp.where(x < 0, 2.0 - outer, outer)
    return xp.where(ax <= _SMALL_LIMIT, 1.0 - _erf_small(xp, x), outer)


def normal_cdf(xp, x):
    """Phi(x) = (1 + erf(x / sqrt 2)) / 2, computed as erfc(-x / sqrt 2) / 2 (no cancellation)."""
    return 0.5 * erfc(xp, -x * SQRT_HALF)


def sigmoid(xp, x):
    """1 / (1 + exp(-x)) without overflow: exp is only taken of -|x|."""
    e = xp.exp(-xp.abs(x))
    r = 1.0 / (1.0 + e)
    return xp.where(x >= 0, r, e * r)


def softplus(xp, x):
    """log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), exact for any finite x."""
    return xp.maximum(x, 0.0) + xp.log1p(xp.exp(-xp.abs(x)))


def log_softmax(xp, x, axis):
    """log(softmax(x)) along ``axis`` = z - log(sum(exp(z))), z = x - max(x); an axis of
    length 0 gives an empty copy."""
    if x.shape[axis] == 0:  # nothing to normalize (and no maximum to subtract)
        return x.copy()
    z = x - xp.max(x, axis=axis, keepdims=True)
    return z - xp.log(xp.sum(xp.exp(z), axis=axis, keepdims=True))
