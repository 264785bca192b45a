"""Run an op case through its declared torch counterpart (``OpDecl.torch``, which takes
and returns tensors in handgrad's layout), and the channel moves other tests use.

The counterparts (and the padding pairs computed independently of handgrad from
TensorFlow's and PyTorch's formulas) live beside the declarations, in
``handgrad.ops.samples``.
"""

from __future__ import annotations

import numpy as np
import pytest

from handgrad import ops
from handgrad.ops.samples.conv import padding_pairs

torch = pytest.importorskip("torch")
F = torch.nn.functional

__all__ = ["F", "from_torch", "padding_pairs", "to_torch", "torch", "torch_run",
           "weight_from_torch", "weight_to_torch"]


def to_torch(a, requires_grad=True):
    """Channels-last array -> channels-first leaf tensor."""
    t = torch.tensor(np.ascontiguousarray(np.moveaxis(a, -1, 1)))
    return t.requires_grad_(requires_grad)


def from_torch(t):
    return np.moveaxis(t.detach().numpy(), 1, -1)


def weight_to_torch(w):
    """(*K, A, B) -> (B, A, *K): conv (C_out, C_in/g, *K), conv-transpose (C_in, C_out/g, *K)."""
    nd = w.ndim - 2
    return torch.tensor(np.ascontiguousarray(w.transpose(nd + 1, nd, *range(nd))),
                        requires_grad=True)


def weight_from_torch(t):
    nd = t.ndim - 2
    return t.detach().numpy().transpose(*range(2, nd + 2), 1, 0)


def torch_run(case, arrays, dy):
    """(y, grads) from the op's declared torch counterpart, grads in the order of the
    case's differentiable arguments. Raises NotImplementedError where torch cannot
    express the case and RuntimeError where torch refuses it (or gives an empty output
    where the case is not empty)."""
    differentiable = case.differentiable
    tensors = []
    for i, a in enumerate(arrays):
        if isinstance(a, np.ndarray):
            a = torch.tensor(np.ascontiguousarray(a), requires_grad=i in differentiable)
        tensors.append(a)
    ty = ops.DECLARED[case.op].torch(F, *tensors, **case.kwargs)
    if ty.numel() == 0:
        raise RuntimeError("empty output")
    ty.backward(torch.tensor(np.ascontiguousarray(dy)))
    grads = []
    for i in differentiable:
        t = tensors[i]
        grads.append(None if t is None else
                     np.zeros(tuple(t.shape), arrays[i].dtype) if t.grad is None else
                     t.grad.numpy())
    return ty.detach().numpy(), grads
