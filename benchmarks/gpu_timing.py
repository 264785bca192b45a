"""The timed sections of the device check (:mod:`benchmarks.gpu`): the default MNIST-1D
network on the device and the CPU, a converted ResNet-18 training step and the
convolution cases against torch on the same device. Times are medians of rounds that
alternate handgrad and torch, each round synchronized."""

from __future__ import annotations

import statistics
import time
from functools import partial

import numpy as np

from handgrad import ops
from handgrad._device import to_host
from handgrad.training import Callback


def _timed(device, fn) -> float:
    device.sync()
    start = time.perf_counter()
    fn()
    device.sync()
    return time.perf_counter() - start


def alternate(device, fns: dict, rounds: int, deadline: float, clock) -> dict:
    """Median seconds of each function of ``fns``, one warm-up call each, then rounds
    alternating them, stopping early (at least 3 rounds) when ``clock()`` passes
    ``deadline``."""
    times = {name: [] for name in fns}
    for fn in fns.values():
        _timed(device, fn)
    for i in range(rounds):
        for name, fn in fns.items():
            times[name].append(_timed(device, fn))
        if i >= 2 and clock() > deadline:
            break
    return {name: statistics.median(t) for name, t in times.items()} | \
        {"rounds": len(next(iter(times.values())))}


# -------------------------------------------------------------- 3. MNIST-1D, default
def mnist1d_data(dry: bool):
    """(Dataset, where it came from): the ``mnist1d`` package's standard data set if it is
    installed, else a synthetic one of the same shapes (10 shifted, scaled, noisy
    templates of length 40), so that both devices still train on the same data."""
    from handgrad.data import Dataset
    try:
        from handgrad.data import load_mnist1d
        data = load_mnist1d()
        source = "mnist1d (standard, 4000 train / 1000 test)"
    except Exception as error:  # the package may be missing on the device machine
        rng = np.random.default_rng(0)
        templates = np.cumsum(rng.standard_normal((10, 40)), axis=1)
        n = 5000
        y = rng.integers(0, 10, n)
        shifts = rng.integers(-4, 5, n)
        x = np.stack([np.roll(templates[c], s) for c, s in zip(y, shifts)])
        x = x * rng.uniform(0.8, 1.2, (n, 1)) + 0.5 * rng.standard_normal((n, 40))
        x = ((x - x.mean()) / x.std()).astype(np.float32)[..., None]
        data = Dataset(x[:4000], y[:4000], x[4000:], y[4000:], num_classes=10,
                       name="synthetic-mnist1d")
        source = f"synthetic stand-in (mnist1d not loadable: {type(error).__name__})"
    if dry:
        data = Dataset(data.x_train[:256], data.y_train[:256], data.x_test[:128],
                       data.y_test[:128], num_classes=10, name=data.name)
    return data, source


class _Deadline(Callback):
    def __init__(self, deadline, clock):
        super().__init__()
        self.deadline, self.clock = deadline, clock

    def on_epoch_end(self, epoch, logs=None):
        if self.clock() > self.deadline:
            self.model.stop_training = True


def train_default(data, device_name, epochs, deadline, clock, keep=None) -> dict:
    """The CLI's default recipe (``train --dataset mnist1d``: resnet, adamw, label
    smoothing, augmentation; no validation split) for ``epochs`` on ``device_name``."""
    from handgrad.cli.args import settings
    from handgrad.cli.train import _compile
    from handgrad.data.augment import augmentation
    from handgrad.zoo import networks
    run = settings("mnist1d", "resnet")
    model = networks.build("resnet", data, seed=0, dtype="float32").to(device_name)
    _compile(model, run, run.lr)
    start = time.perf_counter()
    history = model.fit(data.x_train, data.y_train, epochs=epochs, batch_size=run.batch_size,
                        rng=0, verbose=0, augment=augmentation(**run.augment),
                        callbacks=[_Deadline(deadline, clock)])
    seconds = time.perf_counter() - start
    loss, accuracy = model.evaluate(data.x_test, data.y_test)
    done = len(history.history["loss"])
    if keep is not None:  # for the step profile: the trained model and one batch
        keep.update(model=model, batch=(data.x_train[:run.batch_size],
                                        data.y_train[:run.batch_size]))
    return {"device": device_name, "epochs": done, "train_s": round(seconds, 2),
            "s_per_epoch": round(seconds / max(done, 1), 3), "test_accuracy":
            round(100 * float(accuracy), 2), "test_loss": round(float(loss), 4),
            "full_recipe_epochs": run.epochs,
            "full_recipe_s_estimate": round(seconds / max(done, 1) * run.epochs, 1)}


def run_mnist1d(report, device):
    data, source = mnist1d_data(device.dry)
    report.note("mnist1d", f"data: {source}")
    epochs = 2 if device.dry else 30
    share = report.deadline("mnist1d") - report.elapsed()
    # the device first, up to half of the share; the CPU then trains the same epochs
    first, kept = {}, {}

    def on_device():
        first.update(train_default(data, device.name, epochs,
                                   report.elapsed() + share / 2, report.elapsed, kept))
        return first
    report.guarded("mnist1d", on_device, name="device")
    done = first.get("epochs", 1)
    if kept:
        xd, yd = (device.put(a) for a in kept["batch"])
        _profile_step(report, "mnist1d", kept["model"],
                      lambda: kept["model"].train_step(xd, yd), device)
    report.guarded("mnist1d", lambda: train_default(data, "cpu", done, report.deadline(
        "mnist1d"), report.elapsed), name="cpu")
    rows = {r["name"]: r for r in report.sections.get("mnist1d", []) if r["status"] == "pass"}
    if {"device", "cpu"} <= set(rows):
        speedup = rows["cpu"]["s_per_epoch"] / rows["device"]["s_per_epoch"]
        gap = rows["device"]["test_accuracy"] - rows["cpu"]["test_accuracy"]
        report.note("mnist1d", f"device {speedup:.2f}x the CPU's speed per epoch; accuracy "
                               f"device - cpu = {gap:+.2f} points after "
                               f"{rows['cpu']['epochs']} epochs each")


# ---------------------------------------------------------------- 4. ResNet-18 step
def _torch_resnet18(num_classes):
    """torchvision's ResNet-18, else the same architecture built here."""
    import torch.nn as nn
    try:
        from torchvision.models import resnet18
        return resnet18(num_classes=num_classes), "torchvision.models.resnet18"
    except Exception:  # absent, or installed against another torch (operator errors)
        pass

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1, self.relu = nn.BatchNorm2d(cout), nn.ReLU()
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None if stride == 1 and cin == cout else nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            skip = x if self.down is None else self.down(x)
            return self.relu(self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))) + skip)

    layers, cin = [], 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
        cin = cout
    net = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                        nn.MaxPool2d(3, 2, 1), *layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                        nn.Linear(512, num_classes))
    return net, "ResNet-18 built in benchmarks/gpu_timing.py (torchvision absent)"


def run_resnet18(report, device):
    import torch

    from handgrad.io import convert_torch
    batch, size = (2, 32) if device.dry else (32, 224)
    net, source = _torch_resnet18(10)
    report.note("resnet18", f"model: {source}; batch {batch}, {size}x{size}, float32, SGD")
    model = convert_torch(net.train(), torch.zeros(1, 3, size, size)).to(device.name)
    model.compile("sgd", "cross_entropy")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, size, size, 3)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    xd, yd = device.put(x), device.put(y)
    tnet = net.to(device.torch).train()
    tx = torch.tensor(np.moveaxis(x, -1, 1).copy(), device=device.torch)
    ty = torch.tensor(y, device=device.torch)
    opt = torch.optim.SGD(tnet.parameters(), lr=0.01)

    def torch_step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(tnet(tx), ty).backward()
        opt.step()

    def measure():
        t = alternate(device, {"handgrad": lambda: model.train_step(xd, yd),
                               "torch": torch_step}, 7, report.deadline("resnet18"),
                      report.elapsed)
        return {"handgrad_ms": round(1e3 * t["handgrad"], 2), "torch_ms":
                round(1e3 * t["torch"], 2), "ratio": round(t["handgrad"] / t["torch"], 2),
                "rounds": t["rounds"]}
    report.guarded("resnet18", measure, name=f"train step b{batch} {size}px")
    _profile_step(report, "resnet18", model, lambda: model.train_step(xd, yd), device)


def _profile_step(report, section, model, step, device):
    """Rows ``<section>_layers`` (per layer class, forward and backward ms) and a row
    ``host vs gpu`` (a step's host and GPU ms) for ``step``, within the section's time."""
    from .gpu_profile import host_and_gpu_ms, layer_breakdown
    if report.elapsed() > report.deadline(section):
        report.note(section, "budget: no per-layer breakdown")
        return
    report.guarded(section, lambda: host_and_gpu_ms(step, device.dry, 10), name="host vs gpu")
    rounds = 1 if report.deadline(section) - report.elapsed() < 20 else 3
    try:
        for row in layer_breakdown(model, step, device.sync, rounds):
            report.row(f"{section}_layers", name=row.pop("layer"), status="pass", **row)
    except Exception as error:  # recorded; the run goes on
        report.row(f"{section}_layers", name="breakdown", status="error",
                   error=f"{type(error).__name__}: {error}")


# ------------------------------------------------------- 5. conv layers vs torch
def _conv_case(case, device, dry, deadline, clock):

    from .cases import TorchRunner, make_inputs
    x, w, b = make_inputs(case, np.float32, dry)
    fwd, bwd = getattr(ops, case.op), getattr(ops, case.op + "_backward")
    args = [device.put(a) for a in (x, w, b) if a is not None]
    y, _ = fwd(*args, **case.kwargs)
    dy = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
    dyd = device.put(dy)
    runner = TorchRunner(case, x, w, b, dy)
    for attr in ("x", "w", "b"):
        tensor = getattr(runner, attr)
        if tensor is not None:
            setattr(runner, attr, tensor.detach().to(device.torch).requires_grad_(True))
    runner.dy = runner.dy.to(device.torch)

    def ours():
        out, cache = fwd(*args, **case.kwargs)
        return out, bwd(dyd, cache)

    got = to_host(ours()[0])
    want = runner().detach().cpu().numpy()
    want = np.moveaxis(want, 1, -1) if want.ndim > 2 else want
    error = float(np.max(np.abs(got - want))) / max(float(np.max(np.abs(want))), 1e-30)
    t = alternate(device, {"handgrad": ours, "torch": runner}, 15, deadline, clock)
    return {"handgrad_ms": round(1e3 * t["handgrad"], 3), "torch_ms": round(
        1e3 * t["torch"], 3), "ratio": round(t["handgrad"] / t["torch"], 2),
        "rel_error_y": f"{error:.1e}", "rounds": t["rounds"]}


def run_conv(report, device):
    from .cases import CASES
    cases = [c for c in CASES if hasattr(c, "x_shape") and not hasattr(c, "runners")]
    report.note("conv", "forward+backward float32, handgrad on the device vs torch on the "
                        "same device; ratio = handgrad / torch (lower is better)")
    for case in cases:
        if report.elapsed() > report.deadline("conv"):
            report.note("conv", f"budget: stopped before {case.name}")
            break
        report.guarded("conv", partial(_conv_case, case, device, device.dry,
                                       report.deadline("conv"), report.elapsed), name=case.name)
