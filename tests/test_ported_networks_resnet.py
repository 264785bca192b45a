"""Ported graph networks: ResNet-18 and a MobileNetV2 with squeeze-excitation.

ResNet-18 is torchvision's structure (BasicBlock, a 1x1 convolution and BatchNorm as
the downsample shortcut, stages of 2, 2, 2, 2 blocks) at a quarter of the width
(8, 16, 32, 64 channels) on 48x48 images (2x2 maps in the last stage). The torch module keeps torchvision's module
names (``layer2.0.downsample.0``); handgrad layer names cannot hold dots, so its layers
are named with underscores (``layer2_0_downsample_0``) and ``from_torch`` is given
``prefixes={handgrad name: torch name}``, as a user importing torchvision weights would.
One training step is compared as in ``test_ported_networks``.
"""

from __future__ import annotations

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad import losses, optimizers

from ported_networks import check_step, nn, torch

F = torch.nn.functional
DTYPES = [np.float64, np.float32]
WIDTHS = (8, 16, 32, 64)
CLASSES = 10


class BasicBlock(nn.Module):
    def __init__(self, c_in, width, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, width, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.downsample = None
        if stride != 1 or c_in != width:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, width, 1, stride, bias=False),
                                            nn.BatchNorm2d(width))

    def forward(self, x):
        h = F.relu(self.bn1(self.conv1(x)))
        h = self.bn2(self.conv2(h))
        return F.relu(h + (x if self.downsample is None else self.downsample(x)))


class ResNet18(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, WIDTHS[0], 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(WIDTHS[0])
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        c_in = WIDTHS[0]
        for stage, width in enumerate(WIDTHS, 1):
            stride = 1 if stage == 1 else 2
            setattr(self, f"layer{stage}", nn.Sequential(BasicBlock(c_in, width, stride),
                                                         BasicBlock(width, width, 1)))
            c_in = width
        self.fc = nn.Linear(WIDTHS[-1], CLASSES)

    def forward(self, x):
        h = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        for stage in range(1, 5):
            h = getattr(self, f"layer{stage}")(h)
        return self.fc(F.adaptive_avg_pool2d(h, 1).flatten(1))


def basic_block(x, c_in, width, stride, name):
    h = L.Conv2D(width, 3, stride, 1, bias=False, name=f"{name}_conv1")(x)
    h = L.ReLU()(L.BatchNorm(name=f"{name}_bn1")(h))
    h = L.Conv2D(width, 3, 1, 1, bias=False, name=f"{name}_conv2")(h)
    h = L.BatchNorm(name=f"{name}_bn2")(h)
    if stride != 1 or c_in != width:
        x = L.Conv2D(width, 1, stride, bias=False, name=f"{name}_downsample_0")(x)
        x = L.BatchNorm(name=f"{name}_downsample_1")(x)
    return L.ReLU()(L.Add()([h, x]))


def resnet18(dtype):
    x = hg.Input((48, 48, 3))
    h = L.Conv2D(WIDTHS[0], 7, 2, 3, bias=False, name="conv1")(x)
    h = L.MaxPool2D(3, 2, 1)(L.ReLU()(L.BatchNorm(name="bn1")(h)))
    c_in = WIDTHS[0]
    for stage, width in enumerate(WIDTHS, 1):
        h = basic_block(h, c_in, width, 1 if stage == 1 else 2, f"layer{stage}_0")
        h = basic_block(h, width, width, 1, f"layer{stage}_1")
        c_in = width
    h = L.Flatten()(L.AdaptiveAvgPool2D(1)(h))
    return hg.Model(x, L.Dense(CLASSES, name="fc")(h), dtype=dtype, seed=1)


def torch_names(model):
    """{handgrad layer: torch module}: ``layer2_0_conv1`` -> ``layer2.0.conv1``."""
    return {layer.name: layer.name.replace("_", ".") for layer in model.layers
            if layer.named_parameters() or layer.named_buffers()}


def resnet18_case():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    return {"net": ResNet18().double(), "build": resnet18, "maps": True,
            "prefixes": torch_names(resnet18(np.float64)),
            "x": rng.standard_normal((2, 48, 48, 3)), "target": np.array([1, 8]),
            "torch_loss": F.cross_entropy, "loss": losses.softmax_cross_entropy,
            "torch_optimizer": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9,
                                                         weight_decay=1e-4),
            "optimizer": lambda: optimizers.SGD(lr=0.1, momentum=0.9, weight_decay=1e-4)}


@pytest.mark.parametrize("dtype", DTYPES)
def test_resnet18_matches_torch(dtype):
    ours = check_step(resnet18_case(), dtype)
    # 20 convolutions + 1 dense; 20 BatchNorms with running mean and variance
    assert len(ours["grads"]) == 20 + 2 + 2 * 20
    assert len(ours["buffers"]) == 2 * 20
