"""convert_torch on torchvision's classification and video models (torch.fx): eval-mode
outputs, the input gradient and every parameter gradient by torch's name against torch
autograd in float64 at small inputs (``SPECS``); a training-mode step (batch statistics,
running statistics after it) for the models without randomness; float32 models against
the float64 truth for one model of several families. Skips without torchvision."""

import pytest

torch = pytest.importorskip("torch")
from handgrad.io import convert_torch  # noqa: E402
from torchvision_support import (  # noqa: E402
    SPECS,
    check,
    exact_hardsigmoid,
    has_randomness,
    torch_model,
)

MODELS = ["alexnet", "vgg11", "resnet18", "resnext50_32x4d", "wide_resnet50_2", "densenet121",
          "squeezenet1_0", "googlenet", "inception_v3", "mobilenet_v2", "mobilenet_v3_small",
          "efficientnet_b0", "efficientnet_v2_s", "mnasnet0_5", "shufflenet_v2_x0_5",
          "regnet_y_400mf", "convnext_tiny", "video.r3d_18", "video.mc3_18",
          "video.r2plus1d_18", "video.s3d"]

# Training mode normalizes by batch statistics: a batch norm that sees two values per
# channel (batch 2 of 1x1 maps, which these models reach at 32 pixels or 4x16x16 clips)
# has an error that grows like 1 / sqrt(var) of two samples, so these inputs leave at
# least 2x2 maps (8 values per channel) at the last batch norm.
TRAINING = {
    "resnet18": (2, 3, 64, 64), "densenet121": (2, 3, 64, 64),
    "shufflenet_v2_x0_5": (2, 3, 64, 64), "regnet_y_400mf": (2, 3, 64, 64),
    "video.r3d_18": (2, 3, 8, 32, 32), "video.mc3_18": (2, 3, 8, 32, 32),
    "video.r2plus1d_18": (2, 3, 8, 32, 32),
}

FLOAT32 = ["resnet18", "densenet121", "mobilenet_v3_small", "shufflenet_v2_x0_5",
           "convnext_tiny", "video.r3d_18"]


def model_and_input(name, dtype=None, shape=None):
    """torch's model and input (``shape``: instead of the spec's) and its conversion."""
    kwargs, spec_shape = SPECS[name]
    net, x = torch_model(name, dtype, (kwargs, shape or spec_shape))
    if name == "video.s3d":
        # S3D's last pool is fixed at (2, 7, 7), the map of 16 x 224 x 224 clips (one
        # forward and backward there: 80 s in handgrad, 40 s in torch on one thread);
        # at the spec's 8 x 32 x 32 the features are 1 x 1 x 1, pooled by a (1, 1, 1) pool
        net.avgpool = torch.nn.AvgPool3d((1, 1, 1), stride=1)
    model = convert_torch(net, x)
    exact_hardsigmoid(net)
    return net, x, model


@pytest.mark.parametrize("name", MODELS)
def test_eval_matches_torch_in_float64(name, one_torch_thread):
    net, x, model = model_and_input(name)
    check(net, x, model)


@pytest.mark.parametrize("name", list(TRAINING))
def test_training_step_matches_torch_in_float64(name, one_torch_thread):
    net, x, model = model_and_input(name, shape=TRAINING[name])
    assert not has_randomness(net)
    check(net, x, model, training=True)


@pytest.mark.parametrize("name", FLOAT32)
def test_float32_model_matches_torch(name, one_torch_thread):
    net, x, model = model_and_input(name, torch.float32)
    assert model.dtype == "float32"
    check(net, x, model)
