"""Ported graph networks: ResNet-18 and a MobileNetV2 with squeeze-excitation.

ResNet-18 is torchvision's structure (BasicBlock, a 1x1 convolution and BatchNorm as
the downsample shortcut, stages of 2, 2, 2, 2 blocks) at an eighth of the width (8, 16,
32, 64 channels) on 48x48 images (2x2 maps in the last stage). The torch module keeps
torchvision's module names (``layer2.0.downsample.0``); the handgrad layers are named
with underscores (``layer2_0_downsample_0``: ``named_parameters`` joins names with
dots) and ``from_torch`` is given ``prefixes={handgrad name: torch name}``, as a user importing
torchvision weights would.
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


# ------------------------------------------------------------ MobileNetV2 + SE
# (name, expansion, out channels, stride, activation, squeeze-excitation activations)
BLOCKS = [("b1", 1, 8, 1, "relu6", ("silu", "hardsigmoid")),
          ("b2", 3, 12, 2, "relu6", None),
          ("b3", 3, 12, 1, "hardswish", ("relu", "sigmoid"))]


class ExactHardsigmoid(nn.Module):
    """torch's Hardsigmoid, ``relu6(x + 3) / 6``, by autograd: ``nn.Hardsigmoid``'s
    backward multiplies by ``float32(1 / 6)`` even in float64 (a relative error of
    3e-8 in its float64 gradient), which handgrad does not copy."""

    def forward(self, x):
        return F.relu6(x + 3.0) / 6.0


TORCH_ACT = {"relu": nn.ReLU, "relu6": nn.ReLU6, "hardswish": nn.Hardswish, "silu": nn.SiLU,
             "hardsigmoid": ExactHardsigmoid, "sigmoid": nn.Sigmoid}
HG_ACT = {"relu": L.ReLU, "relu6": L.ReLU6, "hardswish": L.Hardswish, "silu": L.SiLU,
          "hardsigmoid": L.HardSigmoid, "sigmoid": L.Sigmoid}


class MobileNetSE(nn.Module):
    """Inverted residuals (1x1 expansion, depthwise 3x3, squeeze-excitation, 1x1
    projection; a residual where the shape is kept), reduced to three blocks. The
    modules sit in one ``ModuleDict`` under the names of the handgrad layers."""

    def __init__(self):
        super().__init__()
        m = {"stem": nn.Conv2d(3, 8, 3, 2, 1, bias=False), "stem_bn": nn.BatchNorm2d(8)}
        c_in = 8
        for name, t, c_out, stride, _, se in BLOCKS:
            hidden = c_in * t
            if t != 1:
                m[f"{name}_expand"] = nn.Conv2d(c_in, hidden, 1, bias=False)
                m[f"{name}_expand_bn"] = nn.BatchNorm2d(hidden)
            m[f"{name}_dw"] = nn.Conv2d(hidden, hidden, 3, stride, 1, groups=hidden, bias=False)
            m[f"{name}_dw_bn"] = nn.BatchNorm2d(hidden)
            if se:
                m[f"{name}_se_reduce"] = nn.Linear(hidden, hidden // 4)
                m[f"{name}_se_expand"] = nn.Linear(hidden // 4, hidden)
            m[f"{name}_project"] = nn.Conv2d(hidden, c_out, 1, bias=False)
            m[f"{name}_project_bn"] = nn.BatchNorm2d(c_out)
            c_in = c_out
        m["head"] = nn.Conv2d(c_in, 32, 1, bias=False)
        m["head_bn"] = nn.BatchNorm2d(32)
        m["classifier"] = nn.Linear(32, CLASSES)
        self.m = nn.ModuleDict(m)

    def forward(self, x):
        m = self.m
        h = F.hardswish(m["stem_bn"](m["stem"](x)))
        for name, t, _, _, act, se in BLOCKS:
            y = h
            if t != 1:
                y = TORCH_ACT[act]()(m[f"{name}_expand_bn"](m[f"{name}_expand"](y)))
            y = TORCH_ACT[act]()(m[f"{name}_dw_bn"](m[f"{name}_dw"](y)))
            if se:
                s = TORCH_ACT[se[0]]()(m[f"{name}_se_reduce"](y.mean(dim=(2, 3))))
                s = TORCH_ACT[se[1]]()(m[f"{name}_se_expand"](s))
                y = y * s[:, :, None, None]
            y = m[f"{name}_project_bn"](m[f"{name}_project"](y))
            h = h + y if y.shape == h.shape else y
        h = F.hardswish(m["head_bn"](m["head"](h)))
        return m["classifier"](h.mean(dim=(2, 3)))


def mobilenet_se(dtype):
    x = hg.Input((16, 16, 3))
    h = L.Hardswish()(L.BatchNorm(name="stem_bn")(
        L.Conv2D(8, 3, 2, 1, bias=False, name="stem")(x)))
    c_in = 8
    for name, t, c_out, stride, act, se in BLOCKS:
        hidden, y = c_in * t, h
        if t != 1:
            y = L.Conv2D(hidden, 1, bias=False, name=f"{name}_expand")(y)
            y = HG_ACT[act]()(L.BatchNorm(name=f"{name}_expand_bn")(y))
        y = L.Conv2D(hidden, 3, stride, 1, groups=hidden, bias=False, name=f"{name}_dw")(y)
        y = HG_ACT[act]()(L.BatchNorm(name=f"{name}_dw_bn")(y))
        if se:  # (N, C) gates, reshaped to (N, 1, 1, C), scale each example's (H, W, C) map
            s = L.GlobalAvgPool2D()(y)
            s = HG_ACT[se[0]]()(L.Dense(hidden // 4, name=f"{name}_se_reduce")(s))
            s = HG_ACT[se[1]]()(L.Dense(hidden, name=f"{name}_se_expand")(s))
            y = L.Multiply()([y, L.Reshape((1, 1, hidden))(s)])
        y = L.Conv2D(c_out, 1, bias=False, name=f"{name}_project")(y)
        y = L.BatchNorm(name=f"{name}_project_bn")(y)
        h = L.Add()([h, y]) if c_in == c_out and stride == 1 else y
        c_in = c_out
    h = L.Hardswish()(L.BatchNorm(name="head_bn")(L.Conv2D(32, 1, bias=False, name="head")(h)))
    y = L.Dense(CLASSES, name="classifier")(L.GlobalAvgPool2D()(h))
    return hg.Model(x, y, dtype=dtype, seed=1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mobilenet_v2_se_matches_torch(dtype):
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    case = {"net": MobileNetSE().double(), "build": mobilenet_se, "maps": True,
            "x": rng.standard_normal((2, 16, 16, 3)), "target": np.array([2, 5]),
            "torch_loss": F.cross_entropy, "loss": losses.softmax_cross_entropy,
            "torch_optimizer": lambda p: torch.optim.Adam(p, lr=1e-3),
            "optimizer": lambda: optimizers.Adam(lr=1e-3)}
    ours = check_step(case, dtype)
    assert len(ours["grads"]) == len(dict(case["net"].named_parameters()))
