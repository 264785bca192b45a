"""Binary cross-entropy of probabilities and of logits (torch's; Keras's name is in
:mod:`.keras`)."""

from __future__ import annotations

import numpy as np

from ..ops import special
from ._common import pair, unit_interval, weighted, weights

#: torch's ``BCELoss`` clamps each log at -100 and its gradient's denominator at 1e-12
#: (a float32 constant, also in float64).
LOG_FLOOR = -100.0
BCE_GRAD_EPS = float(np.float32(1e-12))


def binary_cross_entropy(probabilities, targets, weight=None, *, reduction="mean"):
    """Binary cross-entropy of probabilities (PyTorch's ``F.binary_cross_entropy``).

    probabilities p in [0, 1] and targets t of one shape and dtype; ``weight`` (broadcast
    to that shape) scales each element. loss = -w (t max(log p, -100) + (1 - t)
    max(log(1 - p), -100)), dp = w (p - t) / max(p (1 - p), 1e-12) (torch's rule; the
    exact derivative away from 0 and 1). Logits belong to
    :func:`binary_cross_entropy_with_logits`.
    """
    op = "binary_cross_entropy"
    xp, p, t = pair(op, probabilities, targets, "probabilities", "targets")
    unit_interval(op, xp, p, "probabilities", "use 'binary_cross_entropy_with_logits'")
    weight = weights(op, "weight", weight, p)
    with xp.errstate(divide="ignore"):  # log(0) = -inf, clamped at -100 as torch does
        log_p = xp.maximum(xp.log(p), LOG_FLOOR)
        log_q = xp.maximum(xp.log1p(-p), LOG_FLOOR)
    values = -(t * log_p + (1 - t) * log_q)
    grad = (p - t) / xp.maximum(p * (1 - p), p.dtype.type(BCE_GRAD_EPS))
    return weighted(op, values, grad, weight, reduction)


def binary_cross_entropy_with_logits(logits, targets, weight=None, pos_weight=None, *,
                                     reduction="mean"):
    """Binary cross-entropy from logits (PyTorch's ``binary_cross_entropy_with_logits``).

    logits z and targets t of one shape and dtype; ``weight`` w and ``pos_weight`` r (each
    broadcast to that shape; r is typically one value per class, the last axis) give
    loss = w (r t softplus(-z) + (1 - t) softplus(z)) = w ((1 - t) z + l softplus(-z))
    with l = 1 + (r - 1) t, and dz = w (l sigmoid(z) - r t); without r: softplus(z) - t z
    and sigmoid(z) - t.
    """
    op = "binary_cross_entropy_with_logits"
    xp, z, t = pair(op, logits, targets, "logits", "targets")
    weight = weights(op, "weight", weight, z)
    pos_weight = weights(op, "pos_weight", pos_weight, z)
    if pos_weight is None:
        values = special.softplus(xp, z) - t * z
        grad = special.sigmoid(xp, z) - t
    else:
        scale = 1 + (pos_weight - 1) * t
        values = (1 - t) * z + scale * special.softplus(xp, -z)
        grad = scale * special.sigmoid(xp, z) - pos_weight * t
    return weighted(op, values, grad, weight, reduction)

