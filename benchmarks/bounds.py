"""Derived error bounds for the quick check (``python -m benchmarks --quick``): how far
handgrad's results may be from torch's, from the dtype and the case.

Every bound is ``handgrad.testing.tolerance(dtype, terms, scale)`` = ``FACTOR *
eps(dtype) * sqrt(terms) * scale``: a value computed from ``terms`` rounded terms of
total size ``scale`` (the size of the *terms*, not of the result) is off by about
``eps * sqrt(terms) * scale`` (Higham, *Accuracy and Stability of Numerical
Algorithms*, ch. 2-4). Both handgrad and torch are inexact, so their errors add;
``FACTOR`` covers both. A bound is the max over an output's entries (of ``terms``
and of ``scale``, separately), compared with the output's max abs difference.

- Ops linear in each input (convolutions, transposed convolution, average pooling):
  ``scale`` is the op applied to ``|x|``, ``|w|``, ``|b|`` (and its backward to ``|dy|``
  on that cache), i.e. each output's sum of absolute terms; ``terms`` is the same op on
  ones, i.e. how many products each output sums (for an average, the window or the
  positions, plus the division). See :func:`op_bounds`.
- Max pooling: the forward copies one input (exact, one term the size of the output);
  the backward sends each ``dy`` to its window's winner and sums where windows overlap:
  the backward of ones and of ``|dy|`` through the real cache (:func:`op_bounds`).
- Composite cases (LSTM, multi-head attention): there is no absolute-value twin of a
  recurrence or a softmax, so the error is *measured* on the case: torch runs it in
  float32 and, on the same values, in float64 (the truth). Per output,
  ``A = max|torch32 - torch64| / eps(float32)`` is the rounding error of a float32
  evaluation in units of eps: the case's condition times the terms it sums, what
  ``sqrt(terms) * scale`` stands for in a linear op. Rounding errors scale with eps, so
  for either dtype the bound is ``tolerance(dtype, 1, A)``: ``FACTOR`` times one
  float32 evaluation's measured error (scaled to the dtype), allowing handgrad an error
  several times torch's. ``A`` is at least ``max|torch64|`` (one rounding of the result),
  and it is a max over every entry of the output, so a stable statistic
  (:func:`measured_bounds`).
- The epoch cases' first loss, the mean of ``B`` per-example cross-entropies of a
  network's logits: each example's loss (network + cross-entropy) is composite, its
  error measured as above over the ``B`` examples (at least one rounding of the
  largest); the mean then adds ``B`` terms of total size ``mean(loss_b)``. Bound:
  ``tolerance(float32, 1, A_items) + tolerance(float32, B, mean(loss))``
  (:func:`first_loss_bound`).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import torch
import torch.nn.functional as F

from handgrad import ops
from handgrad.testing import finite_max, tolerance

from .e2e import TorchTwin

FACTOR = 8.0  # handgrad.testing.tolerance's default: covers two inexact results
EPS32 = float(np.finfo(np.float32).eps)


def bound(dtype, terms, scale):
    return tolerance(dtype, terms, scale, FACTOR)


def _grads(grads):
    return grads if isinstance(grads, tuple) else (grads,)


def _wide(a):
    return None if a is None else np.asarray(a, np.float64)


def _run(op, inputs, dy, kwargs):
    """[output, *gradients] of ``ops.<op>`` (forward, then backward of ``dy``)."""
    y, cache = getattr(ops, op)(*inputs, **kwargs)
    return [y, *_grads(getattr(ops, op + "_backward")(dy, cache))]


def op_bounds(case, x, w, b, dy):
    """[(terms, scale)] of the output and each gradient (handgrad's order: y, dx[, dW,
    db]) of a conv or pooling case at its inputs, computed in float64."""
    x, dy = _wide(x), _wide(dy)
    inputs = [x] if not case.is_conv else [x, _wide(w), _wide(b)]
    kwargs = case.kwargs
    if case.op.startswith("max_pool"):
        y, cache = getattr(ops, case.op)(x, **kwargs)
        backward = getattr(ops, case.op + "_backward")
        counts = _grads(backward(np.ones_like(dy), cache))[0]
        sizes = _grads(backward(np.abs(dy), cache))[0]
        return [(1, finite_max(y)), (finite_max(counts), finite_max(sizes))]
    scales = _run(case.op, [np.abs(a) for a in inputs], np.abs(dy), kwargs)
    if case.op.startswith("avg_pool"):
        window = math.prod(np.broadcast_to(kwargs["kernel_size"], x.ndim - 2))
        counts = [window + 1] * len(scales)
    elif case.op == "global_avg_pool":
        counts = [math.prod(x.shape[1:-1]) + 1] * len(scales)
    else:
        counts = [finite_max(c) for c in
                  _run(case.op, [np.ones_like(a) for a in inputs], np.ones_like(dy), kwargs)]
    return [(c, finite_max(s)) for c, s in zip(counts, scales, strict=True)]


def _torch_twin(runner, dtype):
    """A copy of a composite case's torch runner (it holds ``module``, ``x``, ``dy``)
    with its weights and inputs converted to ``dtype`` (``runner.twin(dtype)`` where a
    runner makes its own)."""
    if hasattr(runner, "twin"):
        return runner.twin(dtype)
    twin = copy.copy(runner)
    twin.module = copy.deepcopy(runner.module).to(dtype)
    twin.x = runner.x.detach().to(dtype).requires_grad_(True)
    twin.dy = runner.dy.to(dtype)
    return twin


def measured_bounds(runner):
    """[(1, A)] per result of a composite case's torch ``runner``: ``A = max(max|torch32
    - torch64| / eps(float32), max|torch64|)``, torch32 on the runner's values rounded
    to float32 and torch64 on exactly those values (see the module docstring)."""
    single = _torch_twin(runner, torch.float32)
    double = _torch_twin(single, torch.float64)
    pairs = zip(single.results(), double.results(), strict=True)
    return [(1, max(finite_max(a.astype(np.float64) - b) / EPS32, finite_max(b))) for a, b in pairs]


def first_loss_bound(runner, model):
    """Bound on |handgrad's first loss - torch's| of an epoch case, for ``model`` (the
    handgrad model, float32, before its first step) on ``runner``'s first batch: the
    per-example losses measured in float32 against float64, plus the mean's rounding
    (see the module docstring)."""
    index = torch.from_numpy(runner.batches[0])
    x, labels = runner.x_torch[index], runner.y_torch[index]
    items = []
    with torch.no_grad():
        for dtype in (torch.float32, torch.float64):
            twin = TorchTwin(model).to(dtype)
            loss = F.cross_entropy(twin(x.to(dtype)), labels, reduction="none")
            items.append(loss.double().numpy())
    single, double = items
    measured = max(finite_max(single - double) / EPS32, finite_max(double))
    return (bound(np.float32, 1, measured)
            + bound(np.float32, len(double), float(np.mean(np.abs(double)))))
