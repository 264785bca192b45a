"""End to end: one training epoch of a zoo model in handgrad and the same network
in torch, from the same initial weights on the same batches (Adam)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from handgrad import layers as L
from handgrad import optimizers, zoo


class TorchTwin(torch.nn.Module):
    """The torch version of a handgrad Sequential, running channels-first."""

    def __init__(self, model):
        super().__init__()
        self.steps = []
        self.params = torch.nn.ParameterList()
        for layer in model.layers:
            self.steps.append(self._convert(layer))

    def _param(self, array):
        p = torch.nn.Parameter(torch.tensor(np.ascontiguousarray(array)))
        self.params.append(p)
        return p

    def _convert(self, layer):
        if isinstance(layer, (L.Conv1D, L.Conv2D)):
            nd = layer.rank
            w = layer.parameters["W"].transpose(nd + 1, nd, *range(nd))
            w, b = self._param(w), self._param(layer.parameters["b"])
            conv = F.conv1d if nd == 1 else F.conv2d
            return lambda x: conv(x, w, b, stride=layer.stride, padding=layer.padding,
                                  dilation=layer.dilation, groups=layer.groups)
        if isinstance(layer, L.Dense):
            w, b = self._param(layer.parameters["W"].T), self._param(layer.parameters["b"])
            return lambda x: F.linear(x, w, b)
        if isinstance(layer, L.ReLU):
            return F.relu
        if isinstance(layer, (L.MaxPool1D, L.MaxPool2D)):
            pool = F.max_pool1d if isinstance(layer, L.MaxPool1D) else F.max_pool2d
            return lambda x: pool(x, **layer.kwargs)
        if isinstance(layer, L.GlobalAvgPool2D):
            return lambda x: x.mean(dim=(2, 3))
        if isinstance(layer, L.Flatten):  # flatten in handgrad's channels-last order
            return lambda x: torch.movedim(x, 1, -1).reshape(x.shape[0], -1)
        raise TypeError(f"no torch twin for {type(layer).__name__}")

    def forward(self, x):
        for step in self.steps:
            x = step(x)
        return x


def _batches(n, batch_size, seed):
    order = np.random.default_rng(seed).permutation(n)
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


class EpochRunner:
    """Callables that run one epoch in each library, from fixed initial weights."""

    def __init__(self, dataset, batch_size, lr=1e-3, seed=0, max_examples=None):
        self.x, self.y = dataset.x_train, dataset.y_train
        if max_examples:
            self.x, self.y = self.x[:max_examples], self.y[:max_examples]
        self.batches = _batches(len(self.x), batch_size, seed)
        self.dataset, self.lr, self.seed = dataset, lr, seed
        self.x_torch = torch.tensor(np.moveaxis(self.x, -1, 1).copy())
        self.y_torch = torch.tensor(self.y)

    def fresh_models(self):
        model = zoo.build("cnn", self.dataset, seed=self.seed)
        model.compile(optimizers.Adam(lr=self.lr), "cross_entropy", metrics=())
        twin = TorchTwin(model)
        return model, twin, torch.optim.Adam(twin.parameters(), lr=self.lr)

    def handgrad_epoch(self, model):
        return [model.train_step(self.x[i], self.y[i])["loss"] for i in self.batches]

    def torch_epoch(self, twin, optimizer):
        losses = []
        for i in self.batches:
            index = torch.from_numpy(i)
            optimizer.zero_grad()
            loss = F.cross_entropy(twin(self.x_torch[index]), self.y_torch[index])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses
