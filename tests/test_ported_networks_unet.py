"""Ported networks: a U-Net with bilinear upsampling, a DCGAN and a character LSTM.

As in ``test_ported_networks``: torch's float64 weights imported with ``from_torch``,
one training step compared in float64 and float32. The U-Net is a graph ``Model`` whose
double convolutions are nested ``Sequential`` s named as the torch submodules (``inc``,
``down1``, ...), so ``from_torch`` matches them by name (``down1.3.weight``); the
skip connections are concatenated after zero padding the upsampled map to the skip's
size (22x18 images, so the padding is not empty). The DCGAN is the generator and the
discriminator chained (``nn.Sequential(G, D)``), trained on the generator's BCE; the
discriminator alone on a batch of real and generated images.
"""

from __future__ import annotations

import numpy as np
import pytest

import handgrad as hg
from handgrad import layers as L
from handgrad import losses, optimizers
from handgrad.model import Sequential

from ported_networks import check_step, nn, torch

F = torch.nn.functional
DTYPES = [np.float64, np.float32]
SIZE = (22, 18)


def torch_double_conv(c_in, c_out):
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out),
                         nn.ReLU(), nn.Conv2d(c_out, c_out, 3, padding=1, bias=False),
                         nn.BatchNorm2d(c_out), nn.ReLU())


class TorchUNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.inc, self.down1 = torch_double_conv(1, 8), torch_double_conv(8, 16)
        self.down2 = torch_double_conv(16, 16)
        self.up1, self.up2 = torch_double_conv(32, 8), torch_double_conv(16, 8)
        self.outc = nn.Conv2d(8, 1, 1)
        self.upsample = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)

    def up(self, x, skip):
        x = self.upsample(x)
        dy, dx = skip.shape[2] - x.shape[2], skip.shape[3] - x.shape[3]
        x = F.pad(x, [dx // 2, dx - dx // 2, dy // 2, dy - dy // 2])
        return torch.cat([skip, x], dim=1)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(F.max_pool2d(x1, 2))
        x3 = self.down2(F.max_pool2d(x2, 2))
        return self.outc(self.up2(self.up(self.up1(self.up(x3, x2)), x1)))


def double_conv(c_out, name):
    return Sequential([L.Conv2D(c_out, 3, padding=1, bias=False), L.BatchNorm(), L.ReLU(),
                       L.Conv2D(c_out, 3, padding=1, bias=False), L.BatchNorm(), L.ReLU()],
                      name=name)


def up(x, skip):
    x = L.Upsample(scale_factor=2, mode="bilinear", align_corners=True)(x)
    dy, dx = skip.shape[0] - x.shape[0], skip.shape[1] - x.shape[1]  # per-example shapes
    x = L.ZeroPad2D((dx // 2, dx - dx // 2, dy // 2, dy - dy // 2))(x)
    return L.Concatenate()([skip, x])


def unet(dtype):
    x = hg.Input((*SIZE, 1))
    x1 = double_conv(8, "inc")(x)
    x2 = double_conv(16, "down1")(L.MaxPool2D(2)(x1))
    x3 = double_conv(16, "down2")(L.MaxPool2D(2)(x2))
    h = double_conv(8, "up2")(up(double_conv(8, "up1")(up(x3, x2)), x1))
    return hg.Model(x, L.Conv2D(1, 1, name="outc")(h), dtype=dtype, seed=1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_unet_matches_torch(dtype):
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    case = {"net": TorchUNet().double(), "build": unet, "maps": True,
            "x": rng.standard_normal((2, *SIZE, 1)),
            "target": (rng.random((2, *SIZE, 1)) < 0.5).astype(np.float64),
            "torch_loss": F.binary_cross_entropy_with_logits,
            "loss": losses.binary_cross_entropy_with_logits,
            "torch_optimizer": lambda p: torch.optim.Adam(p, lr=1e-3),
            "optimizer": lambda: optimizers.Adam(lr=1e-3)}
    ours = check_step(case, dtype)
    assert ours["y"].shape == (2, *SIZE, 1)
    assert len(ours["buffers"]) == 2 * 10


# ---------------------------------------------------------------------- DCGAN
NZ = 8


def torch_generator():
    return nn.Sequential(
        nn.ConvTranspose2d(NZ, 16, 4, 1, 0, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
        nn.ConvTranspose2d(16, 8, 4, 2, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        nn.ConvTranspose2d(8, 1, 4, 2, 1, bias=False), nn.Tanh())


def torch_discriminator():
    return nn.Sequential(
        nn.Conv2d(1, 8, 4, 2, 1, bias=False), nn.LeakyReLU(0.2),
        nn.Conv2d(8, 16, 4, 2, 1, bias=False), nn.BatchNorm2d(16), nn.LeakyReLU(0.2),
        nn.Conv2d(16, 1, 4, 1, 0, bias=False), nn.Sigmoid(), nn.Flatten())


def generator():
    return Sequential([
        L.ConvTranspose2D(16, 4, 1, 0, bias=False), L.BatchNorm(), L.ReLU(),
        L.ConvTranspose2D(8, 4, 2, 1, bias=False), L.BatchNorm(), L.ReLU(),
        L.ConvTranspose2D(1, 4, 2, 1, bias=False), L.Tanh()])


def discriminator():
    return Sequential([
        L.Conv2D(8, 4, 2, 1, bias=False), L.LeakyReLU(0.2),
        L.Conv2D(16, 4, 2, 1, bias=False), L.BatchNorm(), L.LeakyReLU(0.2),
        L.Conv2D(1, 4, 1, 0, bias=False), L.Sigmoid(), L.Flatten()])


def gan_case(part):
    """``part`` "generator": G then D on noise, BCE against "real"; "discriminator": D
    on two real and two generated images, BCE against (1, 1, 0, 0)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(1)
    g, d = torch_generator().double(), torch_discriminator().double()
    z = rng.standard_normal((2, 1, 1, NZ))
    if part == "generator":
        net = nn.Sequential(g, d)
        x, target = z, np.ones((2, 1))

        def build(dtype):
            return Sequential([generator(), discriminator()], input_shape=(1, 1, NZ),
                              dtype=dtype, seed=1)
    else:
        net = d
        with torch.no_grad():
            fake = g.eval()(torch.tensor(z).permute(0, 3, 1, 2)).permute(0, 2, 3, 1).numpy()
        x = np.concatenate([np.tanh(rng.standard_normal((2, 16, 16, 1))), fake])
        target = np.array([[1.0], [1.0], [0.0], [0.0]])

        def build(dtype):
            return Sequential(discriminator().layers, input_shape=(16, 16, 1), dtype=dtype,
                              seed=1)
    return {"net": net, "build": build, "maps": True, "x": x, "target": target,
            "torch_loss": F.binary_cross_entropy, "loss": losses.binary_cross_entropy,
            "torch_optimizer": lambda p: torch.optim.Adam(p, lr=2e-4, betas=(0.5, 0.999)),
            "optimizer": lambda: optimizers.Adam(lr=2e-4, betas=(0.5, 0.999))}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("part", ["generator", "discriminator"])
def test_dcgan_matches_torch(part, dtype):
    ours = check_step(gan_case(part), dtype)
    assert ours["y"].shape == ((2, 1) if part == "generator" else (4, 1))
    assert len(ours["buffers"]) == (6 if part == "generator" else 2)
