"""The model-import table of ``docs/model_import.md``: ``python -m benchmarks.model_import
[--models a,b] [--paths fx,onnx,trip]``.

Each torchvision model at the tests' small input (``tests/torchvision_support.py`` SPECS;
the exceptions are in ``BUILD``) comes across three ways: ``convert_torch`` (fx),
``torch.onnx.export`` + ``load_onnx`` (onnx), and ``convert_torch`` -> ``export_onnx`` ->
``load_onnx`` (trip). Each result is compared with torch autograd in float64 by the tests'
``check``: eval-mode outputs, the input gradient and every parameter gradient by torch's
name; the error is the largest max |handgrad - torch| / max |torch| over those arrays.
Time: one forward + backward in evaluation mode with gradients, the faster of two runs
after the comparison's, torch on one thread. Prints the table's rows (markdown).
Needs torchvision (``pip install --no-deps torchvision==0.28.0``) and onnx.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests"))  # the tests' torchvision support

import numpy as np
import torch

from handgrad.io import convert_torch, export_onnx, load_onnx
from torchvision_support import (
    SPECS,
    away_from_init,
    channels_last,
    check,
    exact_hardsigmoid,
    onnx_export,
    torch_model,
    torchvision,
)


def _maxvit_small(dtype):
    MaxVit = torchvision().models.maxvit.MaxVit
    torch.manual_seed(0)
    net = MaxVit(input_size=(32, 32), stem_channels=16, partition_size=2,
                 block_channels=[16, 32], block_layers=[1, 1], head_dim=8,
                 stochastic_depth_prob=0.0, num_classes=10)
    return away_from_init(net.to(dtype).eval()), torch.randn(2, 3, 32, 32, dtype=dtype)


def _s3d_small(dtype):
    net, x = torch_model("video.s3d", dtype)
    net.avgpool = torch.nn.AvgPool3d((1, 1, 1), stride=1)
    return net, x


#: models built otherwise than from SPECS: name -> (builder(dtype), input note)
BUILD = {
    "video.s3d": (_s3d_small, "2 x 3 x 8 x 32 x 32, last pool (1, 1, 1) in place of "
                              "(2, 7, 7), which needs 16 x 224 x 224 clips"),
    "maxvit_t": (_maxvit_small, "2 x 3 x 32 x 32, MaxVit(stem 16, partition 2, channels "
                                "[16, 32], layers [1, 1]): maxvit_t needs 224 pixels"),
}
#: torch's exporter needs another input (alexnet's adaptive pool to 6 x 6: 224 pixels)
EXPORT_INPUT = {"alexnet": (1, 3, 224, 224)}


def build(name, shape=None):
    if name in BUILD:
        return BUILD[name][0](torch.float64)
    return torch_model(name, None, (SPECS[name][0], shape) if shape else None)


def _timed(net, x, model, runs=2):
    """The faster of ``runs`` forward + backward passes of each: (handgrad s, torch s)."""
    hg, th = [], []
    xt = x.clone().requires_grad_(True)
    for _ in range(runs):
        start = time.perf_counter()
        y = net(xt)
        ys = list(y.values()) if isinstance(y, dict) else [y]
        torch.autograd.backward(ys, [torch.ones_like(t) for t in ys])
        th.append(time.perf_counter() - start)
        dy = [np.ones_like(channels_last(t)) for t in ys]
        start = time.perf_counter()
        model.forward(channels_last(x), training=False, grad=True)
        model.backward(dy[0] if len(dy) == 1 else dy)
        hg.append(time.perf_counter() - start)
    return min(hg), min(th)


def row(name, paths):
    """One markdown row: per path the largest relative error (or why it does not come
    across), and the times of the first path that converts."""
    cells, times = [], None
    for path in paths:
        try:
            shape = EXPORT_INPUT.get(name) if path == "onnx" else None
            net, x = build(name, shape)
            if path == "onnx":
                model = load_onnx(onnx_export(net, x))
            else:
                model = convert_torch(net, x)
                if path == "trip":
                    model = load_onnx(export_onnx(model, None))
            exact_hardsigmoid(net)
            error = check(net, x, model)["error"]
            cells.append(f"{error:.1e}")
            if times is None:
                times = _timed(net, x, model)
        except Exception as failure:
            cells.append(f"no: {type(failure).__name__}: {str(failure)[:80]}")
        gc.collect()
    note = BUILD[name][1] if name in BUILD else " x ".join(map(str, SPECS[name][1]))
    hg, th = times or (float("nan"), float("nan"))
    return f"| {name} | {note} | " + " | ".join(cells) + f" | {hg:.2f} | {th:.2f} |"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated names (default: all)")
    parser.add_argument("--paths", default="fx,onnx,trip")
    args = parser.parse_args(argv)
    torch.set_num_threads(2)  # as NumPy's BLAS (benchmarks.__main__ sets both to 2)
    names = args.models.split(",") if args.models else [*SPECS, *[n for n in BUILD
                                                                  if n not in SPECS]]
    paths = args.paths.split(",")
    print("| model | input (N x C x ...) | " + " | ".join(paths) + " | handgrad s | torch s |")
    print("|---" * (len(paths) + 4) + "|")
    for name in names:
        print(row(name, paths), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
