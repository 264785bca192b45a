"""Ported networks written as handgrad ``Sequential`` s: LeNet-5, ESPCN and a 3-D CNN.

Each network is defined twice, in torch (channels first) and in handgrad (channels
last); torch's float64 weights are imported with ``from_torch`` and one training step
is compared (``ported_networks.check_step``: output, loss, input gradient, every
parameter gradient, BatchNorm running statistics, the weights after one optimizer
step), in float64 and float32. LeNet-5's ``Flatten`` of (C, H, W) maps before the first
``Linear`` needs nothing from the user: ``from_torch`` reorders that layer's rows to
handgrad's (H, W, C) flattening.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

from handgrad import layers as L
from handgrad import losses, optimizers
from handgrad.io import from_torch
from handgrad.model import Sequential

from ported_networks import assert_matches, check_step, nn, torch

F = torch.nn.functional
DTYPES = [np.float64, np.float32]


def seeded(make):
    torch.manual_seed(0)
    return make().double()


def lenet5_case():
    net = seeded(lambda: nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.Tanh(), nn.AvgPool2d(2),
        nn.Conv2d(6, 16, 5), nn.Tanh(), nn.AvgPool2d(2), nn.Flatten(),
        nn.Linear(400, 120), nn.Tanh(), nn.Linear(120, 84), nn.Tanh(), nn.Linear(84, 10)))

    def build(dtype):
        return Sequential([
            L.Conv2D(6, 5, padding=2), L.Tanh(), L.AvgPool2D(2),
            L.Conv2D(16, 5), L.Tanh(), L.AvgPool2D(2), L.Flatten(),
            L.Dense(120), L.Tanh(), L.Dense(84), L.Tanh(), L.Dense(10)],
            input_shape=(28, 28, 1), dtype=dtype, seed=1)

    rng = np.random.default_rng(0)
    return {"net": net, "build": build, "maps": True,
            "x": rng.standard_normal((2, 28, 28, 1)), "target": np.array([3, 7]),
            "torch_loss": F.cross_entropy, "loss": losses.softmax_cross_entropy,
            "torch_optimizer": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
            "optimizer": lambda: optimizers.SGD(lr=0.1, momentum=0.9)}


UPSCALE = 3


def espcn_case():
    """ESPCN (Shi et al. 2016) at reduced width: 5x5 and 3x3 convolutions with tanh, a
    3x3 convolution to r^2 channels and a pixel shuffle; MSE against a target image."""
    net = seeded(lambda: nn.Sequential(
        nn.Conv2d(1, 16, 5, padding=2), nn.Tanh(), nn.Conv2d(16, 8, 3, padding=1), nn.Tanh(),
        nn.Conv2d(8, UPSCALE ** 2, 3, padding=1), nn.PixelShuffle(UPSCALE)))

    def build(dtype):
        return Sequential([
            L.Conv2D(16, 5, padding=2), L.Tanh(), L.Conv2D(8, 3, padding=1), L.Tanh(),
            L.Conv2D(UPSCALE ** 2, 3, padding=1), L.PixelShuffle(UPSCALE)],
            input_shape=(8, 8, 1), dtype=dtype, seed=1)

    rng = np.random.default_rng(1)
    return {"net": net, "build": build, "maps": True,
            "x": rng.standard_normal((2, 8, 8, 1)),
            "target": rng.standard_normal((2, 8 * UPSCALE, 8 * UPSCALE, 1)),
            "torch_loss": F.mse_loss, "loss": losses.mse,
            "torch_optimizer": lambda p: torch.optim.Adam(p, lr=1e-3),
            "optimizer": lambda: optimizers.Adam(lr=1e-3)}


def cnn3d_case():
    """Conv3D + BatchNorm3D + ReLU + MaxPool3D, again, AdaptiveAvgPool3D(1) + Dense. The
    convolutions before a BatchNorm have no bias, as usual: its gradient is zero up to
    rounding, and Adam's step on that noise has no precision to compare."""
    net = seeded(lambda: nn.Sequential(
        nn.Conv3d(1, 4, 3, padding=1, bias=False), nn.BatchNorm3d(4), nn.ReLU(), nn.MaxPool3d(2),
        nn.Conv3d(4, 8, 3, padding=1, bias=False), nn.BatchNorm3d(8), nn.ReLU(),
        nn.AdaptiveAvgPool3d(1), nn.Flatten(), nn.Linear(8, 5)))

    def build(dtype):
        return Sequential([
            L.Conv3D(4, 3, padding=1, bias=False), L.BatchNorm(), L.ReLU(), L.MaxPool3D(2),
            L.Conv3D(8, 3, padding=1, bias=False), L.BatchNorm(), L.ReLU(),
            L.AdaptiveAvgPool3D(1), L.Flatten(), L.Dense(5)],
            input_shape=(6, 8, 8, 1), dtype=dtype, seed=1)

    rng = np.random.default_rng(2)
    return {"net": net, "build": build, "maps": True,
            "x": rng.standard_normal((2, 6, 8, 8, 1)), "target": np.array([4, 0]),
            "torch_loss": F.cross_entropy, "loss": losses.softmax_cross_entropy,
            "torch_optimizer": lambda p: torch.optim.Adam(p, lr=1e-2),
            "optimizer": lambda: optimizers.Adam(lr=1e-2)}


@pytest.mark.parametrize("dtype", DTYPES)
def test_lenet5_matches_torch(dtype):
    ours = check_step(lenet5_case(), dtype)
    assert ours["y"].shape == (2, 10)


@pytest.mark.parametrize("dtype", DTYPES)
def test_espcn_matches_torch(dtype):
    ours = check_step(espcn_case(), dtype)
    assert ours["y"].shape == (2, 24, 24, 1)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cnn3d_matches_torch(dtype):
    ours = check_step(cnn3d_case(), dtype)
    # the running statistics moved from their initial (0, 1) in the training forward
    assert all(np.any(b != b.flat[0]) for b in ours["buffers"].values())
    assert len(ours["buffers"]) == 4


# ------------------------------------------------------------------- char-LSTM
VOCAB, STEPS = 12, 7


class CharLSTM(nn.Module):
    def __init__(self, dropout):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, 6)
        self.lstm = nn.LSTM(6, 10, num_layers=2, dropout=dropout, batch_first=True)
        self.head = nn.Linear(10, VOCAB)

    def forward(self, ids):
        return self.head(self.lstm(self.embed(ids))[0])


def char_lstm(dropout):
    def build(dtype):
        return Sequential([L.Embedding(VOCAB, 6), L.LSTM(10, num_layers=2, dropout=dropout),
                           L.Dense(VOCAB)], input_shape=(STEPS,), dtype=dtype, seed=1)
    return build


def next_char_loss(logits, labels):
    """Cross-entropy of (N, T, V) logits against (N, T) ids, over all N T positions."""
    value, grad = losses.softmax_cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1))
    return value, grad.reshape(logits.shape)


def char_lstm_case(dropout):
    rng = np.random.default_rng(3)
    ids = rng.integers(0, VOCAB, (2, STEPS + 1))
    return {"net": seeded(lambda: CharLSTM(dropout)), "build": char_lstm(dropout),
            "maps": False, "x": ids[:, :-1], "target": ids[:, 1:],
            "torch_loss": lambda out, t: F.cross_entropy(out.reshape(-1, VOCAB), t.reshape(-1)),
            "loss": next_char_loss,
            "torch_optimizer": lambda p: torch.optim.Adam(p, lr=1e-2),
            "optimizer": lambda: optimizers.Adam(lr=1e-2)}


@pytest.mark.parametrize("dtype", DTYPES)
def test_char_lstm_matches_torch(dtype):
    """Training without dropout (the dropout masks are drawn from different streams)."""
    ours = check_step(char_lstm_case(0.0), dtype)
    assert ours["y"].shape == (2, STEPS, VOCAB)
    assert len(ours["grads"]) == 1 + 2 * 4 + 2


def lstm_layer(x, w_ih, w_hh, b_ih, b_hh):
    """One batch-first LSTM layer from zero states, by hand (gates i, f, g, o)."""
    h = c = x.new_zeros(x.shape[0], w_hh.shape[1])
    out = []
    for t in range(x.shape[1]):
        i, f, g, o = (x[:, t] @ w_ih.T + b_ih + h @ w_hh.T + b_hh).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
        out.append(h)
    return torch.stack(out, dim=1)


class MaskedCharLSTM(CharLSTM):
    """``CharLSTM`` (the same modules and names) whose two LSTM layers run by hand with
    a given dropout ``mask`` between them in training: torch's own mask cannot be set."""

    def __init__(self, dropout, mask):
        super().__init__(dropout)
        self.mask = mask

    def forward(self, ids):
        h = self.embed(ids)
        for k in range(2):
            if k and self.training:
                h = h * torch.tensor(self.mask, dtype=h.dtype)
            h = lstm_layer(h, *(getattr(self.lstm, f"{name}_l{k}") for name in
                                ("weight_ih", "weight_hh", "bias_ih", "bias_hh")))
        return self.head(h)


@pytest.mark.parametrize("dtype", DTYPES)
def test_char_lstm_training_with_dropout_matches_torch(dtype):
    """The mask handgrad draws between the layers (``ops.dropout``: keep where
    ``u >= rate``, scale by ``1 / (1 - rate)``, ``u`` from the layer's generator), given
    to a torch twin that applies it: one training step with dropout 0.5 matches."""
    rate, case = 0.5, char_lstm_case(0.5)
    rng = copy.deepcopy(case["build"](dtype).layers[1].rng)
    mask = (rng.random((2, STEPS, 10), dtype=dtype) >= rate) / (1 - rate)
    assert 0 < np.count_nonzero(mask) < mask.size
    case["net"] = seeded(lambda: MaskedCharLSTM(rate, mask))
    ids = torch.tensor(case["x"])
    by_hand = case["net"].eval()(ids).detach().numpy()  # the twin is the LSTM of torch
    assert_matches(by_hand, seeded(lambda: CharLSTM(rate)).eval()(ids).detach().numpy(),
                   [by_hand], np.float64, "hand-written torch LSTM")
    check_step(case, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_char_lstm_with_dropout_in_eval_mode_matches_torch(dtype):
    case = char_lstm_case(0.5)
    model = from_torch(case["net"], case["build"](dtype))
    assert model.layers[1].dropout == 0.5
    ours = model.forward(case["x"], training=False)
    ids = torch.tensor(case["x"])
    wide, narrow = (case["net"].to(t).eval()(ids).detach().numpy()
                    for t in (torch.float64, torch.float32))
    assert_matches(ours, wide, [narrow], dtype, "eval output")
    trained = model.forward(case["x"], training=True)  # dropout is active in training
    assert not np.allclose(trained, ours)
