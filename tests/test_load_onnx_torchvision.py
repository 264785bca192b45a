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

# models refused, with the operator named in the refusal
REFUSED = {
    # the class token, a parameter expanded over the batch, concatenated to the patches
    "vit_b_16": "Concat node '/Concat_2'",
}


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


@pytest.mark.parametrize("name", list(REFUSED))
def test_unsupported_torchvision_model_is_refused_by_operator(name, one_torch_thread):
    net, x = torch_model(name)
    with pytest.raises(ValueError, match=REFUSED[name]):
        load_onnx(onnx_export(net, x))
