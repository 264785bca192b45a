"""End to end against PyTorch: the same small CNN, the same initial weights and the same
batches give the same loss at every step and the same final weights."""

from __future__ import annotations

import numpy as np
import pytest

from handgrad import layers as L
from handgrad import optimizers
from handgrad.model import Sequential
from handgrad.testing import assert_close
from handgrad.training.callbacks import Callback

from tolerances_composite import UPDATE_ROUNDINGS, Trajectory, network_bounds

torch = pytest.importorskip("torch")

N, H, W, C_IN, C_OUT, CLASSES, BATCH = 24, 6, 6, 2, 4, 3, 8
# Each step's update rounds UPDATE_ROUNDINGS times after a gradient that sums up to
# BATCH * H * W terms (the convolution's, over a batch's positions).
STEP_TERMS = UPDATE_ROUNDINGS + BATCH * H * W


class LossLog(Callback):
    def __init__(self):
        self.losses = []

    def on_train_batch_end(self, step, logs):
        self.losses.append(logs["loss"])


class TorchCNN(torch.nn.Module):
    """Conv2D -> ReLU -> MaxPool2D -> Flatten (channels last, as handgrad) -> Dense."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(C_IN, C_OUT, 3, padding=1)
        self.dense = torch.nn.Linear((H // 2) * (W // 2) * C_OUT, CLASSES)

    def forward(self, x_nchw):
        h = torch.nn.functional.max_pool2d(torch.relu(self.conv(x_nchw)), 2)
        return self.dense(h.permute(0, 2, 3, 1).flatten(1))


def twin_models(dtype):
    model = Sequential([L.Conv2D(C_OUT, 3, padding=1), L.ReLU(), L.MaxPool2D(2), L.Flatten(),
                        L.Dense(CLASSES)], seed=11, dtype=dtype, input_shape=(H, W, C_IN))
    net = TorchCNN().to(getattr(torch, dtype))
    p = model.named_parameters()
    with torch.no_grad():
        net.conv.weight.copy_(torch.from_numpy(p["conv2d_0.W"].transpose(3, 2, 0, 1).copy()))
        net.conv.bias.copy_(torch.from_numpy(p["conv2d_0.b"]))
        net.dense.weight.copy_(torch.from_numpy(p["dense_4.W"].T.copy()))
        net.dense.bias.copy_(torch.from_numpy(p["dense_4.b"]))
    return model, net


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["sgd_momentum", "adam"])
def test_cnn_training_matches_torch(dtype, name):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((N, H, W, C_IN)).astype(dtype)
    y = rng.integers(0, CLASSES, N)
    model, net = twin_models(dtype)
    # The weights carry STEP_TERMS per step, of the size of the updates (Trajectory); a
    # loss carries its forward's rounding (the logits' condition on a batch) and that of
    # the weights it was computed from.
    forward_terms, forward_scale = network_bounds(model, x[:BATCH])
    trajectory = Trajectory([p.detach().numpy() for p in net.parameters()])
    if name == "adam":
        optimizer = optimizers.Adam(lr=0.01)
        torch_opt = torch.optim.Adam(net.parameters(), lr=0.01)
    else:
        optimizer = optimizers.SGD(lr=0.05, momentum=0.9)
        torch_opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    model.compile(optimizer, "cross_entropy")
    log = LossLog()
    model.fit(x, y, epochs=3, batch_size=BATCH, shuffle=False, callbacks=[log], verbose=0)

    nchw = np.ascontiguousarray(x.transpose(0, 3, 1, 2))
    torch_losses = []
    for _ in range(3):
        for start in range(0, N, BATCH):
            xb = torch.from_numpy(nchw[start:start + BATCH])
            yb = torch.from_numpy(y[start:start + BATCH])
            torch_opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(xb), yb)
            loss.backward()
            torch_opt.step()
            torch_losses.append(loss.item())
            trajectory.step([p.detach().numpy() for p in net.parameters()])

    assert len(log.losses) == len(torch_losses) == 9
    for step, (ours, theirs) in enumerate(zip(log.losses, torch_losses)):
        assert_close(ours, theirs, dtype=dtype, terms=forward_terms + step * STEP_TERMS,
                     scale=max(forward_scale, theirs), what=f"loss at step {step + 1}")
    assert torch_losses[-1] < torch_losses[0]  # it did train
    p = model.named_parameters()
    final = {
        "conv2d_0.W": net.conv.weight.detach().numpy().transpose(2, 3, 1, 0),
        "conv2d_0.b": net.conv.bias.detach().numpy(),
        "dense_4.W": net.dense.weight.detach().numpy().T,
        "dense_4.b": net.dense.bias.detach().numpy(),
    }
    for key, expected in final.items():
        assert p[key].dtype == np.dtype(dtype)
        assert_close(p[key], expected, dtype=dtype, terms=len(torch_losses) * STEP_TERMS,
                     scale=trajectory.scale,
                     what=key)
