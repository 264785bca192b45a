"""A torchvision ResNet-18 brought across by ``handgrad.io.convert_torch``: one float32
training step (forward, cross-entropy, backward, SGD step) against torch's same model
and step, from the same weights on the same batch (32 images of 64x64, ten classes).

The case follows the runners protocol of :mod:`benchmarks.attention`: ``runners(dtype,
quick) -> (ours, theirs)``, each a callable (one training step) with ``results()``: the
batch's loss of the step (training mode) and the logits after it (evaluation mode, so
the updated running statistics count too). ``theirs.twin(dtype)`` is a copy in another
dtype, for the bounds measured on the case (:func:`benchmarks.bounds.measured_bounds`).
Without torchvision the case is skipped (``skip_reason()``).
"""

from __future__ import annotations

import copy
import importlib
import os
import sys
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from .layout import torch_dtype
from .memory import traced

LR = 0.01


def _import_torchvision():
    """torchvision through the tests' helper (it defines the operator schemas torchvision's
    import needs on the CPU torch build); None when torchvision (or pytest) is missing."""
    tests = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
    if tests not in sys.path:
        sys.path.append(tests)
    try:
        from torchvision_support import import_torchvision
    except ImportError:  # pytest, which the helper imports, is not installed
        return None
    return import_torchvision()


class ResNetCase:
    """``name``; ``batch`` images of ``size`` x ``size`` (``quick``: ``quick_shape``)."""

    group = "model"
    dtypes = (np.float32,)  # the issue's target is float32's
    outputs: ClassVar[tuple] = ("loss", "logits")  # results(): of the step, after it

    def __init__(self, name, batch=32, size=64, quick_shape=(8, 32), classes=10):
        self.name, self.batch, self.size = name, batch, size
        self.quick_shape, self.classes = quick_shape, classes

    def skip_reason(self):
        if _import_torchvision() is None:
            return "torchvision is not installed"
        return None

    def runners(self, dtype, quick, package="handgrad"):
        """(handgrad's runner from ``package``, torch's), the same net and input on every
        call."""
        batch, size = self.quick_shape if quick else (self.batch, self.size)
        models = _import_torchvision().models
        tdtype = torch_dtype(dtype)
        torch.manual_seed(0)
        net = models.resnet18(weights=None, num_classes=self.classes).to(tdtype).train()
        x = torch.randn(batch, 3, size, size, dtype=tdtype)
        labels = torch.randint(0, self.classes, (batch,))
        theirs = TorchResNetRunner(net, x, labels)
        return HandgradResNetRunner(net, x, labels, package), theirs


class TorchResNetRunner:
    def __init__(self, module, x, labels):
        self.module, self.x, self.labels = module, x, labels
        self.optimizer = torch.optim.SGD(module.parameters(), lr=LR)

    def __call__(self):
        self.optimizer.zero_grad()
        loss = F.cross_entropy(self.module(self.x), self.labels)
        loss.backward()
        self.optimizer.step()
        return loss

    def twin(self, dtype):
        """A copy with its weights and input in ``dtype``."""
        module = copy.deepcopy(self.module).to(dtype).train()
        return TorchResNetRunner(module, self.x.to(dtype), self.labels)

    def results(self):
        """[loss of the step, logits after it in evaluation mode] (takes the step)."""
        loss = self().item()
        self.module.eval()
        with torch.no_grad():
            logits = self.module(self.x).numpy()
        self.module.train()
        return [np.asarray(loss), logits]


class HandgradResNetRunner:
    """``module`` converted (in its dtype) by ``package`` (handgrad, or another version
    of it), compiled with SGD and cross-entropy."""

    def __init__(self, module, x, labels, package="handgrad"):
        convert_torch = importlib.import_module(f"{package}.io").convert_torch
        sgd = importlib.import_module(f"{package}.optimizers").SGD
        self.model = convert_torch(module, x[:2])
        self.model.compile(sgd(lr=LR), "cross_entropy", metrics=())
        self.x = np.ascontiguousarray(np.moveaxis(x.numpy(), 1, -1))
        self.labels = labels.numpy()

    def __call__(self):
        return self.model.train_step(self.x, self.labels)["loss"]

    def results(self):
        """[loss of the step, logits after it in evaluation mode] (takes the step)."""
        loss = self()
        return [np.asarray(loss), self.model.forward(self.x, training=False)]

    def memory(self):
        """(peak MB allocated during a step, None: the caches are the model's)."""
        with traced() as usage:
            self()
            peak = usage()[1]
        return peak / 2**20, None


MODEL_CASES = [ResNetCase("13 resnet18 train step N32 64x64")]
