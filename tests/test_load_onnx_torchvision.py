"""load_onnx on torchvision's models (torch.onnx.export, TorchScript exporter, opset 17):
eval-mode outputs, the input gradient and parameter gradients by torch's names against
torch autograd in float64, at small inputs. Skips without torchvision."""

import io
import time
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
from handgrad.io import load_onnx  # noqa: E402
from handgrad.layers.declarations import conv_weight_perm  # noqa: E402
from handgrad.testing import assert_close  # noqa: E402
from torchvision_support import torchvision  # noqa: E402

# model -> (builder keyword arguments, input shape (N, C, ...)). vgg11 is left out: torch's
# exporter refuses its adaptive pool to 7 x 7 below 224-pixel inputs.
MODELS = {
    "resnet18": ({}, (2, 3, 32, 32)),
    "mobilenet_v2": ({}, (2, 3, 32, 32)),
    "squeezenet1_0": ({}, (2, 3, 48, 48)),
    "densenet121": ({}, (2, 3, 32, 32)),
    "shufflenet_v2_x0_5": ({}, (2, 3, 32, 32)),
    "mnasnet0_5": ({}, (2, 3, 32, 32)),
    "efficientnet_b0": ({}, (2, 3, 32, 32)),
    "mobilenet_v3_small": ({}, (2, 3, 32, 32)),
    "googlenet": ({"aux_logits": False, "init_weights": True}, (2, 3, 32, 32)),
    "regnet_y_400mf": ({}, (2, 3, 32, 32)),
    "convnext_tiny": ({}, (2, 3, 32, 32)),
    "segmentation.fcn_resnet50": ({"weights_backbone": None, "num_classes": 3},
                                  (2, 3, 32, 32)),
    "segmentation.lraspp_mobilenet_v3_large": ({"weights_backbone": None, "num_classes": 3},
                                               (2, 3, 32, 32)),
    "video.r3d_18": ({}, (2, 3, 4, 16, 16)),
}


# models refused, with the operator named in the refusal
REFUSED = {
    # the class token, a parameter expanded over the batch, concatenated to the patches
    "vit_b_16": ({"image_size": 32}, (2, 3, 32, 32), "Concat node '/Concat_2'"),
}


def build(name):
    """The torch model (float64, eval mode, running statistics moved off their start) and
    its loaded handgrad model."""
    tv = torchvision()
    module = tv.models
    for part in name.split(".")[:-1]:
        module = getattr(module, part)
    kwargs, shape = (MODELS.get(name) or REFUSED[name])[:2]
    torch.manual_seed(0)
    net = getattr(module, name.split(".")[-1])(weights=None, **kwargs).double().eval()
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                m.running_mean.normal_(0, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    x = torch.randn(*shape, dtype=torch.float64)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation and tracing
        torch.onnx.export(net, (x,), buffer, dynamo=False, opset_version=17,
                          do_constant_folding=False, training=torch.onnx.TrainingMode.EVAL)
    return net, x, load_onnx(onnx.load_from_string(buffer.getvalue()))


def channels_last(a):
    return a.transpose(0, *range(2, a.ndim), 1) if a.ndim > 2 else a


def hg_param(key, grad):
    """torch's gradient of a parameter in handgrad's layout."""
    if key == "W" and grad.ndim > 2:
        return grad.transpose(np.argsort(conv_weight_perm(grad.ndim - 2)))
    return grad.T if key == "W" else grad


def exact_hardsigmoid(net):
    """torch's float64 hardsigmoid backward multiplies by float32's 1/6 (0.1666666716), a
    relative error of 3e-8; the reference takes relu6(x + 3) / 6 instead (exact 1/6)."""
    for m in net.modules():
        if isinstance(m, torch.nn.Hardsigmoid):
            m.forward = lambda x: torch.nn.functional.relu6(x + 3) / 6


def compare(name):
    """Largest relative error of outputs, input and parameter gradients; timings."""
    net, x, model = build(name)
    exact_hardsigmoid(net)  # after the export, which writes HardSigmoid
    x = x.clone().requires_grad_(True)
    start = time.perf_counter()
    y = net(x)
    ys = list(y.values()) if isinstance(y, dict) else [y]
    dys = [torch.randn_like(t) for t in ys]
    torch.autograd.backward(ys, dys)
    torch_time = time.perf_counter() - start
    start = time.perf_counter()
    out = model.forward(channels_last(x.detach().numpy()), training=False, grad=True)
    dx = model.backward([channels_last(d.numpy()) for d in dys] if len(dys) > 1
                        else channels_last(dys[0].numpy()))
    hg_time = time.perf_counter() - start
    outs = out if isinstance(out, (list, tuple)) else [out]
    checks = [(o, channels_last(t.detach().numpy()), f"output {i}")
              for i, (o, t) in enumerate(zip(outs, ys))]
    checks.append((dx, channels_last(x.grad.numpy()), "input gradient"))
    layers = {n.layer.name: n.layer for n in model.nodes}
    keys = {"weight": ("W", "gamma"), "bias": ("b", "beta")}
    named = 0
    for pname, p in net.named_parameters():
        owner, kind = pname.rsplit(".", 1)
        if pname in layers:  # a per-channel factor (layer_scale): a depthwise 1x1 Conv
            checks.append((layers[pname].gradients["W"].ravel(), p.grad.numpy().ravel(),
                           pname))
        elif owner in layers:
            layer = layers[owner]
            key = next(k for k in keys[kind] if k in layer.gradients)
            checks.append((layer.gradients[key], hg_param(key, p.grad.numpy()), pname))
        else:
            continue
        named += 1
    worst = 0.0
    for actual, expected, what in checks:
        assert_close(actual, expected, terms=4096, what=f"{name} {what}")
        scale = max(np.abs(expected).max(), 1e-300)
        worst = max(worst, float(np.abs(actual - expected).max() / scale))
    return {"named": named, "params": len(list(net.parameters())), "error": worst,
            "hg_time": hg_time, "torch_time": torch_time}


@pytest.fixture
def one_torch_thread():
    """torch on one thread: on a shared, busy machine its worker threads spin-wait."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", list(MODELS))
def test_torchvision_model_matches_torch_in_float64(name, one_torch_thread):
    result = compare(name)
    assert result["named"] == result["params"], f"{name}: parameters not found by torch's name"


@pytest.mark.parametrize("name", list(REFUSED))
def test_unsupported_torchvision_model_is_refused_by_operator(name, one_torch_thread):
    with pytest.raises(ValueError, match=REFUSED[name][2]):
        build(name)
