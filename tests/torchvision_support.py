"""torchvision for the tests: ``pytest.importorskip`` plus the two operator schemas its import
needs; the models' small-input specs; and one check of a converted model against torch.

torchvision is a test-only dependency installed with ``--no-deps``; its compiled detection
operators (built for CUDA) do not load with the CPU torch build, but its import registers
fake kernels for ``torchvision::nms`` and ``torchvision::qnms``, which need the schemas to
exist. The model definitions are plain Python.

Tolerance of :func:`check`: ``terms`` is the model's parameter count (a bound on the rounded
terms behind any one result), ``scale`` the largest expected value, for parameter gradients
the largest gradient of the network (a batch norm's gradients are sums that cancel); the
dtype is the converted model's (float32 is compared with torch's float64 as the truth).
"""

from __future__ import annotations

import copy
import importlib.util
import io
import time
import warnings

import numpy as np
import pytest

_SCHEMAS = {
    "nms": "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms": "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
}
_LIBRARY = []  # the torch.library.Library holding the schemas, kept alive

#: model -> (builder keyword arguments, input shape (N, C, ...)): small inputs
SPECS = {
    "alexnet": ({}, (2, 3, 64, 64)),
    "vgg11": ({}, (2, 3, 32, 32)),
    "resnet18": ({}, (2, 3, 32, 32)),
    "resnext50_32x4d": ({}, (2, 3, 32, 32)),
    "wide_resnet50_2": ({}, (2, 3, 32, 32)),
    "densenet121": ({}, (2, 3, 32, 32)),
    "squeezenet1_0": ({}, (2, 3, 48, 48)),
    "googlenet": ({"aux_logits": False, "init_weights": True}, (2, 3, 32, 32)),
    "inception_v3": ({"aux_logits": False, "init_weights": True}, (2, 3, 75, 75)),
    "mobilenet_v2": ({}, (2, 3, 32, 32)),
    "mobilenet_v3_small": ({}, (2, 3, 32, 32)),
    "efficientnet_b0": ({}, (2, 3, 32, 32)),
    "efficientnet_v2_s": ({}, (2, 3, 32, 32)),
    "mnasnet0_5": ({}, (2, 3, 32, 32)),
    "shufflenet_v2_x0_5": ({}, (2, 3, 32, 32)),
    "regnet_y_400mf": ({}, (2, 3, 32, 32)),
    "convnext_tiny": ({}, (2, 3, 32, 32)),
    "vit_b_16": ({"image_size": 32}, (2, 3, 32, 32)),
    "swin_t": ({}, (2, 3, 32, 32)),
    "maxvit_t": ({}, (2, 3, 64, 64)),
    "segmentation.fcn_resnet50": ({"weights_backbone": None, "num_classes": 3},
                                  (2, 3, 32, 32)),
    "segmentation.deeplabv3_resnet50": ({"weights_backbone": None, "num_classes": 3},
                                        (2, 3, 32, 32)),
    "segmentation.lraspp_mobilenet_v3_large": ({"weights_backbone": None, "num_classes": 3},
                                               (2, 3, 32, 32)),
    "video.r3d_18": ({}, (2, 3, 4, 16, 16)),
    "video.mc3_18": ({}, (2, 3, 4, 16, 16)),
    "video.r2plus1d_18": ({}, (2, 3, 4, 16, 16)),
    "video.s3d": ({}, (2, 3, 8, 32, 32)),
}


def import_torchvision():
    """The torchvision module, its import made possible on the CPU torch build (the two
    operator schemas defined first); None when torchvision is not installed."""
    if importlib.util.find_spec("torchvision") is None:
        return None
    import torch
    if not _LIBRARY:
        library = torch.library.Library("torchvision", "FRAGMENT")
        for op, schema in _SCHEMAS.items():
            try:
                torch._C._dispatch_find_schema_or_throw(f"torchvision::{op}", "")
            except RuntimeError:
                library.define(schema)
        _LIBRARY.append(library)
    import torchvision as tv
    return tv


def torchvision():
    """The torchvision module (skip the test when it is not installed)."""
    tv = import_torchvision()
    if tv is None:
        pytest.skip("torchvision is not installed (pip install --no-deps torchvision==0.28.0)")
    return tv


def torch_model(name, dtype=None, spec=None):
    """``(net, x)``: torchvision's ``name`` (``"video.r3d_18"``: in a submodule) built with
    ``weights=None`` from ``SPECS`` (or ``spec``), seeded, in evaluation mode, in ``dtype``
    (default float64), its BatchNorm running statistics moved off their start; ``x`` a
    random input of the spec's shape."""
    import torch
    dtype = dtype or torch.float64
    module = torchvision().models
    for part in name.split(".")[:-1]:
        module = getattr(module, part)
    kwargs, shape = spec or SPECS[name]
    torch.manual_seed(0)
    net = getattr(module, name.split(".")[-1])(weights=None, **kwargs).to(dtype).eval()
    return away_from_init(net), torch.randn(*shape, dtype=dtype)


def away_from_init(net):
    """``net`` with values that would hide a wrong gradient moved off their start: running
    statistics drawn; a parameter of zeros (ViT's classifier head and class token: every
    gradient behind a zero head is zero) drawn from N(0, 0.1); ConvNeXt's ``layer_scale``
    (1e-6: its branch's gradients would vanish below the tolerance) from U(0.5, 1.5)."""
    import torch
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
        for name, p in net.named_parameters():
            if name.endswith("layer_scale"):
                p.uniform_(0.5, 1.5)
            elif not p.any():
                p.normal_(0, 0.1)
    return net


def onnx_export(net, x, output_names=None):
    """``net`` exported by torch's TorchScript exporter (opset 17, evaluation mode, no
    constant folding) as an ``onnx.ModelProto``; ``output_names`` name its outputs (a
    dictionary output's values, in its order; default: numbered by the exporter)."""
    import onnx
    import torch
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracing
        torch.onnx.export(net, (x,), buffer, dynamo=False, opset_version=17,
                          do_constant_folding=False, training=torch.onnx.TrainingMode.EVAL,
                          output_names=output_names)
    return onnx.load_from_string(buffer.getvalue())


def exact_hardsigmoid(net):
    """torch's float64 hardsigmoid backward multiplies by float32's 1/6 (0.1666666716), a
    relative error of 3e-8; the reference takes relu6(x + 3) / 6 instead (exact 1/6).
    Call it after any ONNX export (which writes HardSigmoid)."""
    import torch
    for m in net.modules():
        if isinstance(m, torch.nn.Hardsigmoid):
            m.forward = lambda x: torch.nn.functional.relu6(x + 3) / 6


def has_randomness(net):
    """Whether ``net`` draws random numbers in training mode (dropout, stochastic depth)."""
    return any((getattr(m, "p", 0) > 0 and "Dropout" in type(m).__name__)
               or (type(m).__name__ == "StochasticDepth" and m.p > 0) for m in net.modules())


def channels_last(a):
    a = a.detach().numpy() if hasattr(a, "detach") else a
    return np.moveaxis(a, 1, -1) if a.ndim > 2 else a


def torch_gradients(model):
    """{torch name: gradient} of ``model``'s parameters in torch's layouts."""
    from handgrad.io import to_torch_state_dict
    params, grads = model.named_parameters(), model.named_gradients()
    saved = {k: p.copy() for k, p in params.items()}
    try:
        for k, p in params.items():
            p[...] = grads[k]
        return to_torch_state_dict(model, numpy=True)
    finally:
        for k, p in params.items():
            p[...] = saved[k]


def _outputs(y):
    """torch's output(s) as a list, and their names (a dict's keys) or None."""
    if isinstance(y, dict):
        return list(y.values()), list(y)
    return (list(y), None) if isinstance(y, (list, tuple)) else ([y], None)


def check(net, x, model, training=False, seed=1, maps=True):
    """Compare ``model`` (converted from ``net``) with torch autograd on ``x`` (any float
    dtype, torch runs a float64 copy as the truth; or integer ids, as they are): outputs (a
    dictionary's by name: several, or a model with named outputs, must have its keys as
    ``output_names``, and get their gradients by name), the input gradient (of a float
    input), every parameter gradient by torch's name, and in training mode the running
    statistics after the step. ``maps``: tensors of rank > 2 are torch maps (handgrad's are
    channels last); False: sequences (N, T, F) as they are.
    Returns ``{"error": largest relative error, "hg_s": ..., "torch_s": ...}``."""
    import torch

    from handgrad.testing import assert_close, finite_max
    # a copy only where the caller's net would change (its running statistics in training,
    # its dtype): a float64 vgg11 copied peaks at twice its 0.5 GB
    if training or any(p.dtype != torch.float64 for p in net.parameters()):
        net = copy.deepcopy(net).double().train(training)
    else:
        net.eval()
        net.zero_grad(set_to_none=True)
    ids = not x.is_floating_point()  # an Embedding's input: no gradient
    layout = channels_last if maps else (lambda a: a.detach().numpy())
    xt = x.detach().clone() if ids else x.detach().double().clone().requires_grad_(True)
    start = time.perf_counter()
    ys, names = _outputs(net(xt))
    torch.manual_seed(seed)
    dys = [torch.randn_like(t) for t in ys]
    torch.autograd.backward(ys, dys)
    torch_s = time.perf_counter() - start
    dtype = np.dtype(model.dtype)
    model.zero_grad()
    start = time.perf_counter()
    out = model.forward(x.numpy() if ids else layout(x.detach()).astype(dtype),
                        training=training, grad=True)
    ours = list(out) if isinstance(out, dict) else getattr(model, "output_names", None)
    if names is not None and (len(names) > 1 or getattr(model, "output_keys", None)):
        assert ours == names, f"output names {ours}; torch's {names}"
    dy = [layout(d).astype(dtype) for d in dys]
    # several named outputs: their gradients by name
    dx = model.backward(dy[0] if len(dy) == 1 else dy if names is None else dict(zip(names, dy)))
    hg_s = time.perf_counter() - start
    outs = list(out.values()) if isinstance(out, dict) else \
        list(out) if isinstance(out, (list, tuple)) else [out]
    terms, worst = model.count_params(), 0.0

    def close(actual, expected, what, scale=None):
        nonlocal worst
        assert_close(actual, expected, dtype=dtype, terms=terms, scale=scale, what=what)
        worst = max(worst, float(np.abs(actual - expected).max()) / max(
            scale or finite_max(expected), 1e-300))

    for i, (o, t) in enumerate(zip(outs, ys)):
        close(o, layout(t), f"output {i}")
    if not ids:
        close(dx, layout(xt.grad), "input gradient")
    grads, named = torch_gradients(model), dict(net.named_parameters())
    scale = max((finite_max(p.grad.numpy()) for p in named.values()), default=0.0)
    for name, p in named.items():
        close(grads[name].reshape(p.shape), p.grad.numpy(), f"grad {name}", scale)
    if training:
        state = to_torch_state(model)
        buffers = {name: b.numpy() for name, b in net.named_buffers()}
        for name, b in buffers.items():
            if name.endswith(("running_mean", "running_var")):
                # a batch mean rounds like the values it sums, |x| <~ |mean| + std: the
                # mean of a map just normalized is 0 up to rounding, not a scale to hold to
                var = buffers.get(name.replace("running_mean", "running_var"), b * 0)
                std = finite_max(var) ** 0.5 if name.endswith("running_mean") else 0.0
                close(state[name], b, name, max(finite_max(b), std))
    return {"error": worst, "hg_s": hg_s, "torch_s": torch_s}


def to_torch_state(model):
    from handgrad.io import to_torch_state_dict
    return to_torch_state_dict(model, numpy=True)
