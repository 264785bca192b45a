"""Layers against their ``torch.nn`` twins: handgrad's parameters are copied into
the torch module, then forward and every gradient are compared with a random
upstream gradient; plus the default initialization against PyTorch's bounds."""

import math

import numpy as np
import pytest

from handgrad import layers as L
from handgrad.testing import tolerance

from tolerances import (
    assert_outputs_close,
    float64_twin,
    layer_reference,
    mean_bound,
    std_bound,
    uniform_max_gap,
)
from torch_twins import from_torch, to_torch, weight_from_torch, weight_to_torch

torch = pytest.importorskip("torch")
nn = torch.nn

# (handgrad layer, equivalent torch module, per-example input shape (channels-last))
TWINS = {
    "Conv1D-groups-stride": (
        lambda: L.Conv1D(4, 3, stride=2, padding=1, groups=2),
        lambda: nn.Conv1d(4, 4, 3, stride=2, padding=1, groups=2), (9, 4)),
    "Conv1D-dilated-nobias": (
        lambda: L.Conv1D(3, 2, dilation=2, bias=False),
        lambda: nn.Conv1d(2, 3, 2, dilation=2, bias=False), (8, 2)),
    "Conv2D-mixed": (
        lambda: L.Conv2D(6, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=3),
        lambda: nn.Conv2d(3, 6, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2),
                          groups=3), (7, 8, 3)),
    "Conv2D-same": (
        lambda: L.Conv2D(4, 3, padding="same"),
        lambda: nn.Conv2d(2, 4, 3, padding="same"), (5, 6, 2)),
    "ConvTranspose2D-stride-groups": (
        lambda: L.ConvTranspose2D(4, 3, stride=2, padding=1, output_padding=1, groups=2),
        lambda: nn.ConvTranspose2d(2, 4, 3, stride=2, padding=1, output_padding=1, groups=2),
        (4, 5, 2)),
    "ConvTranspose2D-dilated-nobias": (
        lambda: L.ConvTranspose2D(3, (2, 3), stride=(1, 2), dilation=(2, 1), bias=False),
        lambda: nn.ConvTranspose2d(2, 3, (2, 3), stride=(1, 2), dilation=(2, 1), bias=False),
        (4, 3, 2)),
    "ReflectionPad2D-torch-order": (
        lambda: L.ReflectionPad2D((1, 2, 3, 0)), lambda: nn.ReflectionPad2d((1, 2, 3, 0)),
        (5, 6, 2)),
    "ReplicationPad3D": (
        lambda: L.ReplicationPad3D((0, 2, 1, 0, 3, 1)),
        lambda: nn.ReplicationPad3d((0, 2, 1, 0, 3, 1)), (2, 3, 4, 2)),
    "CircularPad1D": (lambda: L.CircularPad1D((3, 1)), lambda: nn.CircularPad1d((3, 1)),
                      (4, 3)),
    "ConstantPad2D": (lambda: L.ConstantPad2D(2, 0.25), lambda: nn.ConstantPad2d(2, 0.25),
                      (3, 4, 2)),
    "ZeroPad1D": (lambda: L.ZeroPad1D((0, 3)), lambda: nn.ZeroPad1d((0, 3)), (4, 2)),
    "PixelShuffle": (lambda: L.PixelShuffle(3), lambda: nn.PixelShuffle(3), (2, 3, 18)),
    "PixelUnshuffle": (lambda: L.PixelUnshuffle(2), lambda: nn.PixelUnshuffle(2), (4, 6, 3)),
    "ChannelShuffle": (lambda: L.ChannelShuffle(3), lambda: nn.ChannelShuffle(3), (2, 3, 6)),
    "Unfold": (lambda: L.Unfold((3, 2), dilation=(1, 2), padding=1, stride=(2, 1)),
               lambda: nn.Unfold((3, 2), dilation=(1, 2), padding=1, stride=(2, 1)), (7, 6, 2)),
    "Fold": (lambda: L.Fold((5, 6), (2, 3), padding=(1, 0), stride=(2, 1)),
             lambda: nn.Fold((5, 6), (2, 3), padding=(1, 0), stride=(2, 1)), (12, 12)),
    "Conv3D-mixed": (
        lambda: L.Conv3D(4, (2, 3, 2), stride=(1, 2, 1), padding=(1, 0, 1), dilation=(2, 1, 1),
                         groups=2),
        lambda: nn.Conv3d(2, 4, (2, 3, 2), stride=(1, 2, 1), padding=(1, 0, 1),
                          dilation=(2, 1, 1), groups=2), (4, 5, 3, 2)),
    "ConvTranspose3D-stride-groups": (
        lambda: L.ConvTranspose3D(4, (3, 2, 2), stride=(2, 1, 2), padding=1,
                                  output_padding=(1, 0, 1), groups=2),
        lambda: nn.ConvTranspose3d(2, 4, (3, 2, 2), stride=(2, 1, 2), padding=1,
                                   output_padding=(1, 0, 1), groups=2), (3, 4, 3, 2)),
    "Conv1D-circular": (
        lambda: L.Conv1D(3, 4, stride=2, padding=3, dilation=2, padding_mode="circular"),
        lambda: nn.Conv1d(2, 3, 4, stride=2, padding=3, dilation=2, padding_mode="circular"),
        (7, 2)),
    "Conv2D-reflect-same": (
        lambda: L.Conv2D(4, (4, 3), padding="same", dilation=(1, 2), padding_mode="reflect"),
        lambda: nn.Conv2d(2, 4, (4, 3), padding="same", dilation=(1, 2),
                          padding_mode="reflect"), (5, 6, 2)),
    "Conv3D-replicate": (
        lambda: L.Conv3D(4, 3, stride=(2, 1, 1), padding=(2, 1, 0), groups=2,
                         padding_mode="replicate"),
        lambda: nn.Conv3d(2, 4, 3, stride=(2, 1, 1), padding=(2, 1, 0), groups=2,
                          padding_mode="replicate"), (3, 4, 5, 2)),
    "Dense-3d": (lambda: L.Dense(5), lambda: nn.Linear(4, 5), (3, 4)),
    "Dense-nobias": (lambda: L.Dense(3, bias=False), lambda: nn.Linear(6, 3, bias=False), (6,)),
    "MaxPool2D-ceil-padded": (
        lambda: L.MaxPool2D(3, stride=2, padding=1, ceil_mode=True),
        lambda: nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True), (6, 7, 3)),
    "Upsample-bicubic-size": (
        lambda: L.Upsample(size=(7, 4), mode="bicubic"),
        lambda: nn.Upsample(size=(7, 4), mode="bicubic"), (5, 6, 2)),
    "Upsample-trilinear-corners": (
        lambda: L.Upsample(scale_factor=(1.5, 2, 0.7), mode="trilinear", align_corners=True),
        lambda: nn.Upsample(scale_factor=(1.5, 2, 0.7), mode="trilinear", align_corners=True),
        (3, 2, 4, 2)),
    "Upsample-area": (
        lambda: L.Upsample(size=3, mode="area"),
        lambda: nn.Upsample(size=3, mode="area"), (7, 2)),
    "UpsamplingNearest2D": (
        lambda: L.UpsamplingNearest2D(scale_factor=(1.3, 2.2)),
        lambda: nn.UpsamplingNearest2d(scale_factor=(1.3, 2.2)), (3, 4, 2)),
    "UpsamplingBilinear2D": (
        lambda: L.UpsamplingBilinear2D(scale_factor=1.5),
        lambda: nn.UpsamplingBilinear2d(scale_factor=1.5), (3, 4, 2)),
    "MaxPool2D-dilated": (
        lambda: L.MaxPool2D(2, stride=1, dilation=2),
        lambda: nn.MaxPool2d(2, stride=1, dilation=2), (5, 6, 2)),
    "AvgPool2D-exclude-pad": (
        lambda: L.AvgPool2D(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
        lambda: nn.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
        (6, 7, 3)),
    "MaxPool3D-ceil-dilated": (
        lambda: L.MaxPool3D((2, 3, 2), stride=2, padding=(1, 1, 0), dilation=(1, 1, 2),
                            ceil_mode=True),
        lambda: nn.MaxPool3d((2, 3, 2), stride=2, padding=(1, 1, 0), dilation=(1, 1, 2),
                             ceil_mode=True), (5, 6, 5, 2)),
    "AvgPool3D-exclude-pad": (
        lambda: L.AvgPool3D(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
        lambda: nn.AvgPool3d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
        (4, 5, 6, 2)),
    "AvgPool2D-plain": (
        lambda: L.AvgPool2D(2), lambda: nn.AvgPool2d(2), (6, 5, 2)),
    "AdaptiveAvgPool2D-overlapping": (
        lambda: L.AdaptiveAvgPool2D((3, None)), lambda: nn.AdaptiveAvgPool2d((3, None)),
        (7, 5, 2)),
    "AdaptiveMaxPool1D-upsampling": (
        lambda: L.AdaptiveMaxPool1D(9), lambda: nn.AdaptiveMaxPool1d(9), (5, 3)),
    "AdaptiveAvgPool3D-overlapping": (
        lambda: L.AdaptiveAvgPool3D((2, None, 3)), lambda: nn.AdaptiveAvgPool3d((2, None, 3)),
        (5, 4, 7, 2)),
    "AdaptiveMaxPool3D-upsampling": (
        lambda: L.AdaptiveMaxPool3D((4, 2, 3)), lambda: nn.AdaptiveMaxPool3d((4, 2, 3)),
        (3, 5, 2, 2)),
    "LPPool2D-ceil": (
        lambda: L.LPPool2D(2, 3, 2, ceil_mode=True),
        lambda: nn.LPPool2d(2, 3, 2, ceil_mode=True), (6, 7, 2)),
    "LocalResponseNorm-even": (
        lambda: L.LocalResponseNorm(4, 0.5, 1.2, 2.0),
        lambda: nn.LocalResponseNorm(4, 0.5, 1.2, 2.0), (3, 4, 6)),
    "LocalResponseNorm-defaults": (
        lambda: L.LocalResponseNorm(3), lambda: nn.LocalResponseNorm(3), (5, 4)),
}
TORCH_DTYPE = {np.float64: torch.float64, np.float32: torch.float32}


def weight_to_torch_layout(layer, W):
    """handgrad W -> torch weight: conv/conv-transpose (*K, A, B) -> (B, A, *K), dense W.T."""
    if isinstance(layer, L.Dense):
        return torch.tensor(np.ascontiguousarray(W.T))
    return weight_to_torch(W).detach()


def weight_grad_from_torch(layer, grad):
    return grad.numpy().T if isinstance(layer, L.Dense) else weight_from_torch(grad)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("key", list(TWINS))
def test_layer_matches_torch_module(key, dtype):
    make_layer, make_module, shape = TWINS[key]
    layer = make_layer()
    spatial = not isinstance(layer, L.Dense)
    rng = np.random.default_rng(len(key))
    x = rng.standard_normal((2, *shape)).astype(dtype)
    if dtype is np.float64:
        layer.build(shape, dtype=np.float64)
    y = layer.forward(x)  # float32 is the default parameter dtype
    assert y.dtype == dtype
    dy = rng.standard_normal(y.shape).astype(dtype)
    dx = layer.backward(dy)
    ours = {"y": y, "dx": dx, **layer.gradients}
    assert all(value.dtype == dtype for value in ours.values())

    module = make_module().to(TORCH_DTYPE[dtype])
    with torch.no_grad():
        if "W" in layer.parameters:
            module.weight.copy_(weight_to_torch_layout(layer, layer.parameters["W"]))
        if "b" in layer.parameters:
            module.bias.copy_(torch.tensor(layer.parameters["b"]))
    assert sum(p.numel() for p in module.parameters()) == layer.count_params()
    tx = to_torch(x) if spatial else torch.tensor(x, requires_grad=True)
    ty = module(tx)
    ty.backward(to_torch(dy, False) if spatial else torch.tensor(dy))
    theirs = {"y": from_torch(ty) if spatial else ty.detach().numpy(),
              "dx": from_torch(tx.grad) if spatial else tx.grad.numpy()}
    if "W" in layer.parameters:
        theirs["W"] = weight_grad_from_torch(layer, module.weight.grad)
    if "b" in layer.parameters:
        theirs["b"] = module.bias.grad.numpy()
    else:
        assert getattr(module, "bias", None) is None

    assert set(ours) == set(theirs)  # terms and sizes, measured in float64
    assert_outputs_close(ours, theirs, layer_reference(float64_twin(layer), x, dy)[1], dtype)


# (handgrad layer, torch module, input shape, fan_in worked out by hand)
INIT_TWINS = {
    "Conv1D": (lambda: L.Conv1D(32, 5, groups=2, seed=0),
               lambda: nn.Conv1d(16, 32, 5, groups=2), (20, 16), 8 * 5),
    "Conv2D": (lambda: L.Conv2D(32, 3, seed=1),
               lambda: nn.Conv2d(12, 32, 3), (6, 6, 12), 12 * 9),
    "ConvTranspose1D": (lambda: L.ConvTranspose1D(24, 3, seed=2),
                        lambda: nn.ConvTranspose1d(16, 24, 3), (7, 16), 24 * 3),
    "ConvTranspose2D": (lambda: L.ConvTranspose2D(16, (3, 2), groups=2, seed=3),
                        lambda: nn.ConvTranspose2d(20, 16, (3, 2), groups=2), (5, 5, 20),
                        8 * 6),
    "Dense": (lambda: L.Dense(64, seed=4), lambda: nn.Linear(50, 64), (50,), 50),
}


@pytest.mark.parametrize("key", list(INIT_TWINS))
def test_default_initialization_matches_torch_bounds(key):
    make_layer, make_module, shape, fan_in = INIT_TWINS[key]
    bound = 1 / math.sqrt(fan_in)
    layer = make_layer().build(shape)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        module = make_module()
    torch_w = module.weight.detach().numpy()
    torch_b = module.bias.detach().numpy()
    # torch's own init spans the same bound: the hand-worked fan_in is torch's
    check_uniform(torch_w, torch_b, bound)

    W, b = layer.parameters["W"], layer.parameters["b"]
    assert W.dtype == np.float32 and b.dtype == np.float32
    assert W.size == torch_w.size and b.size == torch_b.size
    check_uniform(W, b, bound)
    # U(-bound, bound): mean 0, standard deviation bound / sqrt(3), kurtosis 1.8
    sigma = bound / math.sqrt(3)
    assert abs(W.mean()) <= mean_bound(sigma, W.size)
    assert abs(W.std() - sigma) <= std_bound(sigma, W.size, kurtosis=1.8)
    # a seed makes the initialization reproducible
    np.testing.assert_array_equal(make_layer().build(shape).parameters["W"], W)


def check_uniform(W, b, bound):
    """Draws of U(-bound, bound) in float32: none beyond the bound (as rounded to
    float32), and each array's largest |value| near it."""
    for name, values in (("W", W), ("b", b)):
        top = float(np.abs(values).max())
        assert top <= bound + tolerance(np.float32, scale=bound), f"{name} beyond the bound"
        assert top > (1 - uniform_max_gap(values.size)) * bound, f"{name} spans too little"
