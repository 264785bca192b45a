"""Kernel benchmark cases: handgrad forward+backward against torch (same process,
same thread count), plus the bare-matmul ceiling for the same FLOPs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from handgrad import ops

from .attention import ATTENTION_CASES
from .breadth import BREADTH_CASES
from .memory import pass_memory
from .recurrent import RECURRENT_CASES


@dataclass
class Case:
    """One op configuration. ``x`` is channels-last (N, *S, C); ``w`` handgrad layout."""

    name: str
    op: str
    x_shape: tuple
    w_shape: tuple | None = None
    kwargs: dict = field(default_factory=dict)
    quick_x_shape: tuple | None = None  # smaller shape for --quick

    @property
    def is_conv(self):
        return self.w_shape is not None


CASES = [
    Case("1 conv2d 3x3 pad1 32x32 16->32", "conv2d", (32, 32, 32, 16), (3, 3, 16, 32),
         {"padding": 1}, (2, 8, 8, 16)),
    Case("2 conv2d 3x3 pad1 16x16 64->64", "conv2d", (32, 16, 16, 64), (3, 3, 64, 64),
         {"padding": 1}, (2, 6, 6, 64)),
    Case("3 conv2d 5x5 s2 28x28 1->16", "conv2d", (64, 28, 28, 1), (5, 5, 1, 16),
         {"stride": 2}, (2, 12, 12, 1)),
    Case("4 depthwise 3x3 32x32x32", "conv2d", (32, 32, 32, 32), (3, 3, 1, 32),
         {"padding": 1, "groups": 32}, (2, 8, 8, 32)),
    Case("4b depthwise 5x5 32x32x32", "conv2d", (32, 32, 32, 32), (5, 5, 1, 32),
         {"padding": 2, "groups": 32}, (2, 8, 8, 32)),
    Case("4c grouped g4 3x3 32x32 32->32", "conv2d", (32, 32, 32, 32), (3, 3, 8, 32),
         {"padding": 1, "groups": 4}, (2, 8, 8, 32)),
    Case("5 conv1d k5 pad2 L40 32->32", "conv1d", (128, 40, 32), (5, 32, 32),
         {"padding": 2}, (2, 12, 32)),
    Case("6 conv_t2d k4 s2 pad1 16x16 32->16", "conv_transpose2d", (32, 16, 16, 32),
         (4, 4, 16, 32), {"stride": 2, "padding": 1}, (2, 5, 5, 32)),
    Case("7 conv2d 3x3 dil2 32x32 16->16", "conv2d", (32, 32, 32, 16), (3, 3, 16, 16),
         {"padding": 2, "dilation": 2}, (2, 9, 9, 16)),
    Case("8a max_pool2d 2x2/2", "max_pool2d", (32, 32, 32, 32), None,
         {"kernel_size": 2}, (2, 8, 8, 4)),
    Case("8b max_pool2d 3x3/2 pad1", "max_pool2d", (32, 32, 32, 32), None,
         {"kernel_size": 3, "stride": 2, "padding": 1}, (2, 8, 8, 4)),
    Case("9a avg_pool2d 2x2/2", "avg_pool2d", (32, 32, 32, 32), None,
         {"kernel_size": 2}, (2, 8, 8, 4)),
    Case("9b global_avg_pool", "global_avg_pool", (32, 32, 32, 32), None, {}, (2, 8, 8, 4)),
    *ATTENTION_CASES,  # cases with their own runners: case.runners(dtype, quick)
    *RECURRENT_CASES,
    *BREADTH_CASES,
]


def out_channels(case):
    groups = case.kwargs.get("groups", 1)
    transposed = case.op.startswith("conv_transpose")
    return case.w_shape[-2] * groups if transposed else case.w_shape[-1]


def make_inputs(case, dtype, quick, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(case.quick_x_shape if quick else case.x_shape).astype(dtype)
    if not case.is_conv:
        return x, None, None
    w = (rng.standard_normal(case.w_shape) * 0.1).astype(dtype)
    return x, w, rng.standard_normal(out_channels(case)).astype(dtype)


class HandgradRunner:
    """forward + backward with handgrad (``ops_module``: its ops, or another version's);
    keeps ``dy`` fixed between rounds."""

    def __init__(self, case, x, w, b, ops_module=ops):
        self.case, self.x, self.w, self.b = case, x, w, b
        self.forward = getattr(ops_module, case.op)
        self.backward = getattr(ops_module, case.op + "_backward")
        y, _ = self._forward()
        self.dy = np.random.default_rng(1).standard_normal(y.shape).astype(x.dtype)

    def _forward(self):
        if self.case.is_conv:
            return self.forward(self.x, self.w, self.b, **self.case.kwargs)
        return self.forward(self.x, **self.case.kwargs)

    def __call__(self):
        y, cache = self._forward()
        grads = self.backward(self.dy, cache)
        return y, grads if isinstance(grads, tuple) else (grads,)

    def memory(self):
        """(peak temporary MB during forward+backward, MB of arrays held in the cache)."""
        return pass_memory(self._forward, lambda cache: self.backward(self.dy, cache),
                           (self.x, self.w, self.b))


class TorchRunner:
    """The same computation in torch, NCHW (or channels_last where that is faster)."""

    def __init__(self, case, x, w, b, dy, memory_format=torch.contiguous_format):
        self.case = case
        nd = x.ndim - 2
        self.x = torch.tensor(np.moveaxis(x, -1, 1).copy()).to(memory_format=memory_format)
        self.x.requires_grad_(True)
        self.w = self.b = None
        if case.is_conv:
            weight = np.ascontiguousarray(w.transpose(nd + 1, nd, *range(nd)))
            self.w = torch.tensor(weight).to(memory_format=memory_format).requires_grad_(True)
            self.b = torch.tensor(b, requires_grad=True)
        self.dy = torch.tensor(np.moveaxis(dy, -1, 1).copy() if dy.ndim > 2 else dy)
        if dy.ndim > 2:
            self.dy = self.dy.to(memory_format=memory_format)
        self.nd = nd

    def _forward(self):
        kw = dict(self.case.kwargs)
        op = self.case.op
        if op == "global_avg_pool":
            return self.x.mean(dim=tuple(range(2, 2 + self.nd)))
        if self.case.is_conv:
            return getattr(F, op)(self.x, self.w, self.b, **kw)
        return getattr(F, op)(self.x, **kw)

    def __call__(self):
        for t in (self.x, self.w, self.b):
            if t is not None:
                t.grad = None
        y = self._forward()
        y.backward(self.dy)
        return y

    def results(self):
        y = self()
        out = [y.detach().numpy()]
        out += [t.grad.numpy() for t in (self.x, self.w, self.b) if t is not None]
        return out


def gemm_shape(case, x_shape, y_shape):
    """(m, k, n, groups) of the conv's forward GEMM (im2col formulation)."""
    groups = case.kwargs.get("groups", 1)
    taps = math.prod(case.w_shape[:-2])
    if case.op.startswith("conv_transpose"):  # the adjoint conv maps output -> input
        return math.prod(x_shape[:-1]), taps * case.w_shape[-2], case.w_shape[-1] // groups, \
            groups
    return math.prod(y_shape[:-1]), taps * case.w_shape[-2], case.w_shape[-1] // groups, groups


def flops(gemm):
    """Forward + backward = 3 GEMMs of 2*m*k*n multiply-adds per group."""
    m, k, n, groups = gemm
    return 3 * 2 * m * k * n * groups
