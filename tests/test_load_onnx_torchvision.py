"""load_onnx on torchvision's models (torch.onnx.export, TorchScript exporter, opset 17):
eval-mode outputs, the input gradient and parameter gradients by torch's names against
torch autograd in float64, at small inputs (``SPECS``). Skips without torchvision."""

import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
from handgrad.io import load_onnx  # noqa: E402
from torchvision_support import check, exact_hardsigmoid, onnx_export, torch_model  # noqa: E402

# vgg11 is left out: torch's exporter refuses its adaptive pool to 7 x 7 below 224 pixels.
MODELS = ["resnet18", "mobilenet_v2", "squeezenet1_0", "densenet121", "shufflenet_v2_x0_5",
          "mnasnet0_5", "efficientnet_b0", "mobilenet_v3_small", "googlenet", "regnet_y_400mf",
          "convnext_tiny", "video.r3d_18"]  # segmentation: test_convert_segmentation.py

# vit_b_16 and swin_t load (tests/test_load_onnx_transformers.py: small configurations, and
# swin_t; vit_b_16 at 32 px takes ~45 s); the refusals of what cannot be held are there.


def loaded(name):
    """torch's model, its input and the handgrad model loaded from its ONNX export."""
    net, x = torch_model(name)
    model = load_onnx(onnx_export(net, x))
    exact_hardsigmoid(net)  # after the export, which writes HardSigmoid
    return net, x, model


@pytest.mark.parametrize("name", MODELS)
def test_torchvision_model_matches_torch_in_float64(name, one_torch_thread):
    net, x, model = loaded(name)
    check(net, x, model)
