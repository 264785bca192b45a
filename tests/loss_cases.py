"""Comparing a loss (and its gradients) with torch's, with tolerances derived from the
size of the terms each value sums (see ``handgrad.testing.tolerance``)."""

from __future__ import annotations

import numpy as np

from handgrad.testing import assert_close, finite_max

DTYPES = [np.float64, np.float32]
DTYPE_IDS = ["float64", "float32"]
REDUCTIONS = ["mean", "sum", "none"]


def check_loss(ours, t_loss, t_inputs, *, dtype, reduction, item_sizes, grad_sizes,
               terms=1, divisor=None):
    """``ours`` = (loss, grad or tuple of grads) against torch's loss ``t_loss`` and the
    ``.grad`` of each tensor in ``t_inputs`` (``"none"``: of the summed losses, torch's
    backward of ones). ``item_sizes``: per item, the sum of the sizes of its ``terms``
    terms; ``grad_sizes``: per gradient, the size of its entries (for the summed loss).
    ``"mean"`` divides both by ``divisor`` (default: the number of items)."""
    torch = __import__("torch")
    loss, grads = ours
    grads = grads if isinstance(grads, tuple) else (grads,)
    count = max(np.size(item_sizes), 1)
    if reduction == "none":
        t_loss.backward(torch.ones_like(t_loss))
        expected, divide = t_loss.detach().numpy(), 1.0
        assert loss.dtype == dtype and loss.shape == expected.shape
        loss_terms, loss_scale = terms, finite_max(item_sizes)
    else:
        t_loss.backward()
        expected = t_loss.item()
        assert isinstance(loss, float)
        divide = float(count if divisor is None else divisor) if reduction == "mean" else 1.0
        loss_terms, loss_scale = terms * count, float(np.sum(item_sizes)) / divide
    assert_close(loss, expected, dtype=dtype, terms=loss_terms, scale=loss_scale, what="loss")
    assert len(grads) == len(t_inputs)
    for index, (grad, tensor, size) in enumerate(zip(grads, t_inputs, grad_sizes)):
        assert grad.dtype == dtype and grad.shape == tuple(tensor.shape)
        assert_close(grad, tensor.grad.numpy(), dtype=dtype, terms=terms,
                     scale=finite_max(size) / divide, what=f"gradient {index}")


def log_sum_exp(x):
    """log(sum(exp(x))) over the last axis (kept), in float64."""
    x = np.asarray(x, np.float64)
    top = x.max(axis=-1, keepdims=True)
    return top + np.log(np.sum(np.exp(x - top), axis=-1, keepdims=True))
