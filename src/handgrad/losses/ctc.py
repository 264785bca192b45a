"""Connectionist temporal classification (torch's ``F.ctc_loss``), batch first: log_probs
(N, T, C) is torch's (T, N, C) transposed. The forward-backward recursions run in log
space, vectorized over the batch and the extended label sequence, looping over time."""

from __future__ import annotations

from .._checks import array_module, describe, float_array, is_int
from .._hyper import flag
from ._common import reduce

NEG_INF = float("-inf")


def _log_add(xp, *terms):
    """log(sum(exp(terms))) elementwise, exact where every term is -inf."""
    top = terms[0]
    for term in terms[1:]:
        top = xp.maximum(top, term)
    safe = xp.where(xp.isfinite(top), top, 0.0)
    total = sum(xp.exp(term - safe) for term in terms)
    with xp.errstate(divide="ignore"):
        return xp.where(xp.isfinite(top), safe + xp.log(total), top)


def _lengths(op, name, xp, value, n, high):
    value = xp.asarray(value)
    if value.shape != (n,) or value.dtype.kind not in "iu" or bool(xp.any(value < 0)) \
            or bool(xp.any(value > high)):
        raise ValueError(f"{op}: '{name}' must be {n} integers in [0, {high}]; received "
                         f"{describe(value)}")
    return value.astype(int)


def _padded_targets(op, xp, targets, target_lengths, n):
    """(N, S) targets from a padded (N, S) array or torch's concatenated 1-D form."""
    targets = xp.asarray(targets)
    if targets.dtype.kind not in "iu":
        raise TypeError(f"{op}: 'targets' must be integer class ids; received "
                        f"{describe(targets)}")
    if targets.ndim == 2 and targets.shape[0] == n:
        return targets, _lengths(op, "target_lengths", xp, target_lengths, n, targets.shape[1])
    if targets.ndim != 1:
        raise ValueError(f"{op}: 'targets' must have shape (N, S) = ({n}, S) or be 1-D "
                         f"(concatenated); received shape {tuple(targets.shape)}")
    lengths = _lengths(op, "target_lengths", xp, target_lengths, n, targets.shape[0])
    if int(lengths.sum()) != targets.shape[0]:
        raise ValueError(f"{op}: 1-D 'targets' must hold sum(target_lengths) = "
                         f"{int(lengths.sum())} ids; received {targets.shape[0]}")
    width = max(int(lengths.max()), 1) if n else 1
    starts = xp.concatenate([xp.zeros(1, int), xp.cumsum(lengths)[:-1]])
    index = starts[:, None] + xp.arange(width)
    inside = xp.arange(width) < lengths[:, None]
    return xp.where(inside, targets[xp.where(inside, index, 0)], 0), lengths


def ctc_loss(log_probs, targets, input_lengths, target_lengths, *, blank=0,
             reduction="mean", zero_infinity=False):
    """CTC negative log-likelihood of ``targets`` under per-step class log-probabilities.

    log_probs (N, T, C) (a log-softmax's output), targets (N, S) padded or 1-D
    concatenated class ids (no ``blank``), input_lengths and target_lengths (N,). With
    alpha/beta the forward/backward log-variables over the extended labels l' (blanks
    around each label), loss = -log p, and dloss/dlog_probs[t, c] =
    -sum_{s: l'_s = c} exp(alpha_t(s) + beta_t(s) - log_probs[t, c] - log p), the exact
    derivative (torch's kernel returns it plus exp(log_probs), which is the same once
    passed back through the log-softmax). ``"mean"`` divides each loss by its target
    length (at least 1), then averages; ``zero_infinity`` zeroes impossible alignments.
    """
    op = "ctc_loss"
    lp = float_array(op, "log_probs", log_probs, ndim=3)
    xp = array_module(lp)
    n, steps, classes = lp.shape
    if not is_int(blank) or not 0 <= blank < classes:
        raise ValueError(f"{op}: 'blank' must be a class id in [0, {classes}); received "
                         f"{blank!r}")
    input_lengths = _lengths(op, "input_lengths", xp, input_lengths, n, steps)
    targets, target_lengths = _padded_targets(op, xp, targets, target_lengths, n)
    width = targets.shape[1]
    inside = xp.arange(width) < target_lengths[:, None]
    bad = inside & ((targets < 0) | (targets >= classes) | (targets == blank))
    if bool(xp.any(bad)):
        raise ValueError(f"{op}: 'targets' must be class ids in [0, {classes}) other than "
                         f"blank {blank}; received {describe(targets)}")
    labels = xp.full((n, 2 * width + 1), blank)
    labels[:, 1::2] = xp.where(inside, targets, blank)
    skip = xp.zeros(labels.shape, bool)  # s - 2 -> s allowed: a label unlike the one before
    skip[:, 3::2] = inside[:, 1:] & (targets[:, 1:] != targets[:, :-1])
    lpl = xp.take_along_axis(lp, xp.broadcast_to(labels[:, None, :], (n, steps, labels.shape[1])),
                             axis=2)  # (N, T, S'): log y_t(l'_s)
    live = xp.arange(steps)[None, :] < input_lengths[:, None]  # (N, T)
    alpha = xp.full(lpl.shape, NEG_INF, lp.dtype)
    beta = xp.full(lpl.shape, NEG_INF, lp.dtype)
    alpha[:, 0, :2] = lpl[:, 0, :2]
    alpha[:, 0, 1] = xp.where(target_lengths > 0, alpha[:, 0, 1], NEG_INF)

    def shifted(a, by):
        out = xp.full(a.shape, NEG_INF, a.dtype)
        out[:, by:] = a[:, :-by]
        return out

    for t in range(1, steps):
        prev = alpha[:, t - 1]
        step = _log_add(xp, prev, shifted(prev, 1), xp.where(skip, shifted(prev, 2), NEG_INF))
        alpha[:, t] = xp.where(live[:, t, None], step + lpl[:, t], NEG_INF)
    rows = xp.arange(n)
    last = xp.maximum(input_lengths - 1, 0)
    end = 2 * target_lengths
    ends = xp.arange(labels.shape[1]) >= (end - 1)[:, None]
    ends &= xp.arange(labels.shape[1]) <= end[:, None]
    skip_next = xp.zeros(skip.shape, bool)
    skip_next[:, :-2] = skip[:, 2:]  # s -> s + 2 allowed
    for t in range(steps - 1, -1, -1):
        nxt = beta[:, t + 1] if t + 1 < steps else xp.full(labels.shape, NEG_INF, lp.dtype)
        up1 = xp.full(nxt.shape, NEG_INF, lp.dtype)
        up1[:, :-1] = nxt[:, 1:]
        up2 = xp.full(nxt.shape, NEG_INF, lp.dtype)
        up2[:, :-2] = nxt[:, 2:]
        step = _log_add(xp, nxt, up1, xp.where(skip_next, up2, NEG_INF)) + lpl[:, t]
        start = xp.where(ends, lpl[:, t], NEG_INF)
        beta[:, t] = xp.where((last == t)[:, None], start,
                              xp.where(live[:, t, None], step, NEG_INF))
    final = alpha[rows, last]
    log_p = _log_add(xp, final[rows, end], xp.where(
        end > 0, final[rows, xp.maximum(end - 1, 0)], NEG_INF))
    log_p = xp.where(input_lengths > 0, log_p, xp.where(end == 0, 0.0, NEG_INF))
    loss = (-log_p).astype(lp.dtype)
    with xp.errstate(invalid="ignore", over="ignore"):
        share = xp.exp(alpha + beta - lpl + loss[:, None, None])  # (N, T, S')
    onehot = (labels[:, :, None] == xp.arange(classes)).astype(lp.dtype)
    grad = -xp.einsum("nts,nsc->ntc", xp.where(live[:, :, None], share, 0.0), onehot)
    impossible = ~xp.isfinite(loss)
    if flag(op, "zero_infinity", zero_infinity):
        loss = xp.where(impossible, 0.0, loss).astype(lp.dtype)
        grad = xp.where(impossible[:, None, None], 0.0, grad).astype(lp.dtype)
    if reduction == "mean":
        scale = 1.0 / xp.maximum(target_lengths, 1).astype(lp.dtype)
        loss, grad = loss * scale, grad * scale[:, None, None]
    return reduce(op, loss, grad.astype(lp.dtype), reduction)
