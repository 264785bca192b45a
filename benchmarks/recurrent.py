"""LSTM benchmark: handgrad's ``lstm`` forward + backward (backpropagation through time)
against ``torch.nn.LSTM(batch_first=True)``, one layer, same weights.

The case brings its own runners (the protocol of :mod:`benchmarks.attention`):
``case.runners(dtype, quick) -> (ours, theirs)``, callables running one forward +
backward, with ``results()`` (y, dx and the parameter gradients in torch's layout);
ours also has ``memory()``.
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
class LSTMCase:
    name: str
    batch: int
    length: int
    features: int
    hidden: int
    quick_shape: tuple = (2, 6)  # (batch, length) for --quick
    outputs: ClassVar[tuple] = ("y", "dx", "dW_ih", "dW_hh", "db_ih", "db_hh")  # results()

    def runners(self, dtype, quick):
        batch, length = self.quick_shape if quick else (self.batch, self.length)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((batch, length, self.features)).astype(dtype)
        dy = rng.standard_normal((batch, length, self.hidden)).astype(dtype)
        theirs = TorchLSTMRunner(self.features, self.hidden, dtype, x, dy)
        return HandgradLSTMRunner(theirs.module, x, dy), theirs


class TorchLSTMRunner:
    def __init__(self, features, hidden, dtype, x, dy):
        torch.manual_seed(0)
        tdtype = torch_dtype(dtype)
        self.module = torch.nn.LSTM(features, hidden, batch_first=True, dtype=tdtype)
        self.x = torch.tensor(x, requires_grad=True)
        self.dy = torch.tensor(dy)

    def __call__(self):
        self.x.grad = None
        self.module.zero_grad(set_to_none=True)
        y, _ = self.module(self.x)
        y.backward(self.dy)
        return y

    def results(self):
        y, m = self(), self.module
        return [t.detach().numpy() for t in (y, self.x.grad, m.weight_ih_l0.grad,
                                            m.weight_hh_l0.grad, m.bias_ih_l0.grad,
                                            m.bias_hh_l0.grad)]


class HandgradLSTMRunner:
    """Weights from torch, converted: W_ih = weight_ih_l0.T, W_hh = weight_hh_l0.T."""

    def __init__(self, module, x, dy):
        def array(t):
            return np.ascontiguousarray(t.detach().numpy())

        self.x, self.dy = x, dy
        self.weights = (array(module.weight_ih_l0.T), array(module.weight_hh_l0.T),
                        array(module.bias_ih_l0), array(module.bias_hh_l0))

    def __call__(self):
        y, _, _, cache = ops.lstm(self.x, *self.weights)
        return y, ops.lstm_backward(self.dy, cache)

    def results(self):
        y, (dx, _, _, dW_ih, dW_hh, db_ih, db_hh) = self()
        return [y, dx, dW_ih.T, dW_hh.T, db_ih, db_hh]

    def memory(self):
        """(peak temporary MB during forward+backward, MB of arrays held in the cache)."""
        def forward():
            y, _, _, cache = ops.lstm(self.x, *self.weights)
            return y, cache

        return pass_memory(forward, lambda cache: ops.lstm_backward(self.dy, cache),
                           (self.x, *self.weights))


RECURRENT_CASES = [LSTMCase("12 lstm N32 T50 64->128", 32, 50, 64, 128)]
