"""Multi-head self-attention benchmark: handgrad's ``multi_head_attention`` forward +
backward against ``torch.nn.MultiheadAttention(batch_first=True)`` (training path,
``need_weights=False``), with the same weights.

A case brings its own runners: ``case.runners(dtype, quick) -> (ours, theirs)``;
both are callables (one forward + backward) with ``results()`` (y, dx and the
parameter gradients in torch's layout) and ours has ``memory()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch

from handgrad import ops

from .layout import torch_dtype
from .memory import pass_memory


@dataclass
class MHACase:
    name: str
    batch: int
    length: int
    embed: int
    heads: int
    quick_shape: tuple = (2, 8)  # (batch, length) for --quick
    outputs: ClassVar[tuple] = ("y", "dx", "dW_in", "db_in", "dW_out", "db_out")  # results()

    def runners(self, dtype, quick):
        batch, length = self.quick_shape if quick else (self.batch, self.length)
        theirs = TorchMHARunner(self.embed, self.heads, dtype)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((batch, length, self.embed)).astype(dtype)
        dy = rng.standard_normal(x.shape).astype(dtype)
        theirs.set_inputs(x, dy)
        return HandgradMHARunner(theirs.module, x, dy, self.heads), theirs


class TorchMHARunner:
    def __init__(self, embed, heads, dtype):
        torch.manual_seed(0)
        tdtype = torch_dtype(dtype)
        self.module = torch.nn.MultiheadAttention(embed, heads, batch_first=True,
                                                  dtype=tdtype)
        with torch.no_grad():  # torch starts the biases at zero; make them matter
            self.module.in_proj_bias.normal_(0, 0.1)
            self.module.out_proj.bias.normal_(0, 0.1)

    def set_inputs(self, x, dy):
        self.x = torch.tensor(x, requires_grad=True)
        self.dy = torch.tensor(dy)

    def __call__(self):
        self.x.grad = None
        self.module.zero_grad(set_to_none=True)
        y, _ = self.module(self.x, self.x, self.x, need_weights=False)
        y.backward(self.dy)
        return y

    def results(self):
        y, m = self(), self.module
        return [t.detach().numpy() for t in (y, self.x.grad, m.in_proj_weight.grad,
                                            m.in_proj_bias.grad, m.out_proj.weight.grad,
                                            m.out_proj.bias.grad)]


class HandgradMHARunner:
    """Weights from torch, converted: W_in = in_proj_weight.T, W_out = out_proj.weight.T."""

    def __init__(self, module, x, dy, heads):
        def array(t):
            return np.ascontiguousarray(t.detach().numpy())

        self.x, self.dy, self.heads = x, dy, heads
        self.weights = (array(module.in_proj_weight.T), array(module.in_proj_bias),
                        array(module.out_proj.weight.T), array(module.out_proj.bias))

    def _forward(self):
        return ops.multi_head_attention(self.x, None, None, *self.weights,
                                        num_heads=self.heads)

    def __call__(self):
        y, cache = self._forward()
        return y, ops.multi_head_attention_backward(self.dy, cache)

    def results(self):
        y, (dx, _, _, dw_in, db_in, dw_out, db_out) = self()
        return [y, dx, dw_in.T, db_in, dw_out.T, db_out]

    def memory(self):
        return pass_memory(self._forward, lambda cache: ops.multi_head_attention_backward(
            self.dy, cache), (self.x, *self.weights))


ATTENTION_CASES = [MHACase("11 mha self-attn N16 T128 E128 h8", 16, 128, 128, 8)]
