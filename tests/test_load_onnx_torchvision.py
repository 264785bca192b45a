"""load_onnx on torchvision's models (torch.onnx.export, TorchScript exporter, opset 17):
outputs, the input gradient and parameter gradients by torch's names against torch autograd
(``check``): every model exported in float64, evaluation mode, at small inputs (``SPECS``,
or ``EXPORT_SPECS`` where torch's exporter needs more); a float32 export of a model of each
family, held to float32 tolerances against torch in float64; and in training mode (batch
statistics, running statistics updated like torch's) the models without randomness, their
BatchNormalization loaded from the evaluation-mode export. Skips without torchvision."""

import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
from handgrad.io import load_onnx  # noqa: E402
from torchvision_support import (  # noqa: E402
    SPECS,
    check,
    exact_hardsigmoid,
    has_randomness,
    onnx_export,
    torch_model,
)

# vgg11 is left out: torch's exporter writes an adaptive average pool only where the input's
# sizes are multiples of the output's, and vgg11's pool to 7 x 7 needs 224 pixels; there its
# 133 million parameters (1 GB in float64, copied several times over) cost more than this
# file can spend. Its operators are alexnet's.
MODELS = ["resnet18", "mobilenet_v2", "squeezenet1_0", "densenet121", "shufflenet_v2_x0_5",
          "mnasnet0_5", "efficientnet_b0", "mobilenet_v3_small", "googlenet", "regnet_y_400mf",
          "convnext_tiny", "video.r3d_18"]  # segmentation: test_convert_segmentation.py
# wide_resnet50_2 loads and matches as well, but its 69 million parameters cost this file
# ~14 s: its graph is resnext50_32x4d's with ungrouped, twice as wide convolutions.
MODELS += ["alexnet", "resnext50_32x4d", "inception_v3", "efficientnet_v2_s", "video.mc3_18",
           "video.r2plus1d_18", "video.s3d"]

# Inputs torch's exporter needs: an adaptive average pool is written only where the input's
# sizes are multiples of the output's (alexnet's pool to 6 x 6 needs 6 x 6 maps: 224 pixels,
# one example keeps it affordable).
EXPORT_SPECS = {"alexnet": ({}, (1, 3, 224, 224))}

# S3D's AvgPool3d (2, 7, 7) needs 2 x 7 x 7 maps: 13 frames of 209 x 209 pixels, where one
# handgrad forward and backward takes ~20 s. The test takes SPECS' small clip with that pool
# shrunk to the 1 x 1 x 1 maps the clip leaves; every other layer is S3D's.
SHRUNK_POOL = {"video.s3d": (1, 1, 1)}

# float32 exports: a model of each family (the others share their operators; inception_v3's
# are googlenet's and resnet18's). googlenet is left out: one of its max pool windows holds
# two values 3e-9 apart, below float32's resolution, so a float32 model may route that
# gradient to the other one (torch's float32 happens to round them apart).
FLOAT32 = ["resnet18", "squeezenet1_0", "shufflenet_v2_x0_5", "mnasnet0_5",
           "mobilenet_v3_small", "efficientnet_b0", "regnet_y_400mf", "video.mc3_18"]

# Training mode: a model of each family without randomness (no dropout, no stochastic depth;
# resnext50_32x4d, wide_resnet50_2, densenet121 and the other video ResNets pass as well, at
# more cost than this file can spend), at inputs where every BatchNorm normalizes at least 8
# values per channel: at SPECS' 32 pixels ResNet's last maps are 1 x 1, 2 values per
# channel, whose batch variance can be tiny, and the normalized value's error grows like
# 1 / sqrt(variance).
TRAINING = {"resnet18": (2, 3, 64, 64), "shufflenet_v2_x0_5": (2, 3, 64, 64),
            "regnet_y_400mf": (2, 3, 64, 64), "video.mc3_18": (2, 3, 4, 32, 32)}

# vit_b_16 and swin_t load (tests/test_load_onnx_transformers.py: small configurations, and
# swin_t; vit_b_16 at 32 px takes ~45 s); the refusals of what cannot be held are there.


def loaded(name, dtype=None, spec=None):
    """torch's model, its input and the handgrad model loaded from its ONNX export."""
    net, x = torch_model(name, dtype, spec or EXPORT_SPECS.get(name))
    if name in SHRUNK_POOL:
        net.avgpool = torch.nn.AvgPool3d(SHRUNK_POOL[name], stride=1)
    model = load_onnx(onnx_export(net, x))
    exact_hardsigmoid(net)  # after the export, which writes HardSigmoid
    return net, x, model


@pytest.mark.parametrize("name", MODELS)
def test_torchvision_model_matches_torch_in_float64(name, one_torch_thread):
    net, x, model = loaded(name)
    check(net, x, model)


@pytest.mark.parametrize("name", FLOAT32)
def test_float32_export_matches_torch_at_float32_tolerance(name, one_torch_thread):
    net, x, model = loaded(name, torch.float32)
    assert model.dtype == "float32"
    check(net, x, model)


@pytest.mark.parametrize("name", list(TRAINING))
def test_training_mode_matches_torch_with_batch_statistics(name, one_torch_thread):
    net, x, model = loaded(name, spec=(SPECS[name][0], TRAINING[name]))
    assert not has_randomness(net)  # torch's and handgrad's steps must draw nothing
    norms = [(n, m) for n, m in net.named_modules()
             if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    assert norms and all((model.get_layer(n).momentum, model.get_layer(n).eps)
                         == (m.momentum, m.eps) for n, m in norms)
    check(net, x, model, training=True)  # running statistics included
