"""The round trip through handgrad's own ONNX export: a torchvision model brought across
(``convert_torch``, or ``torch.onnx.export`` + ``load_onnx`` for the models in ``VIA_ONNX``),
written by ``export_onnx``, read back by ``load_onnx`` and compared with torch autograd by
``check``: outputs, the input gradient and every parameter gradient by torch's name (so the
layer names survive the trip), in float64 and float32, and in training mode (batch
statistics, the running statistics after the step: BatchNorm comes back trainable).

Small VisionTransformer, Swin and MaxViT configurations come back with their parameters
outside modules (class token, position embedding, relative position bias tables) as
Parameters and their attention's projections under torch's names (``in_proj_weight``).

Left out for time (they round-trip; about 30-130 s each on a busy 2-core machine, mostly
torch's own work): alexnet, vgg11, resnext50_32x4d, densenet121, convnext_tiny,
video.r2plus1d_18, video.r3d_18, vit_b_16, swin_t. Skips without torchvision.
"""

import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
from handgrad.io import convert_torch, export_onnx, load_onnx  # noqa: E402
from test_convert_maxvit import small_maxvit  # noqa: E402
from test_convert_swin import small_swin  # noqa: E402
from test_convert_vit import small_vit  # noqa: E402
from torchvision_support import (  # noqa: E402
    check,
    exact_hardsigmoid,
    has_randomness,
    onnx_export,
    torch_model,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: the models compared after the round trip (the list grows as more models come across)
ROUND_TRIP = ["resnet18", "squeezenet1_0", "googlenet", "mobilenet_v2", "mobilenet_v3_small",
              "mnasnet0_5", "regnet_y_400mf", "shufflenet_v2_x0_5", "efficientnet_b0"]
#: the models convert_torch does not take yet: brought across by torch's ONNX export
VIA_ONNX = {"densenet121", "shufflenet_v2_x0_5", "efficientnet_b0", "convnext_tiny",
            "video.r3d_18"}
#: training mode (a model without randomness): resnet18's last BatchNorm normalizes 2 x 1 x 1
#: values per channel at 32 pixels, an error like 1/sqrt(var) of two samples; 64 gives 2 x 2 x 2
TRAINING = {"resnet18": ({}, (2, 3, 64, 64))}


def round_trip(name, dtype=None, spec=None):
    """torch's model, its input and the handgrad model after export_onnx and load_onnx."""
    net, x = torch_model(name, dtype, spec)
    model = load_onnx(onnx_export(net, x)) if name in VIA_ONNX else convert_torch(net, x)
    back = load_onnx(export_onnx(model, None))
    exact_hardsigmoid(net)  # after the exports, which write HardSigmoid
    return net, x, back


@pytest.mark.parametrize("name", ROUND_TRIP)
def test_round_trip_matches_torch_in_float64(name):
    net, x, back = round_trip(name)
    check(net, x, back)


def test_round_trip_in_float32():
    net, x, back = round_trip("mobilenet_v2", torch.float32)
    assert back.dtype == "float32"
    check(net, x, back)


@pytest.mark.parametrize("name", sorted(TRAINING))
def test_round_trip_trains_like_torch(name):
    net, x, back = round_trip(name, spec=TRAINING[name])
    assert not has_randomness(net)
    check(net, x, back, training=True)


#: small transformers (builder, a layer name that must come back: torch's parameter names)
TRANSFORMERS = {
    "vit": (small_vit, "encoder.layers.encoder_layer_0.self_attention.in_proj_weight"),
    "swin": (small_swin, "features.1.0.attn.relative_position_bias_table"),
    "maxvit": (small_maxvit, "blocks.0.layers.0.layers.window_attention.attn_layer.1"
                             ".relative_position_bias_table"),
}


@pytest.mark.parametrize("name, dtype, training", [
    ("vit", torch.float64, False), ("vit", torch.float64, True), ("vit", torch.float32, False),
    ("swin", torch.float64, False), ("maxvit", torch.float64, False)])
def test_small_transformer_round_trip_matches_torch(name, dtype, training):
    """ViT in training mode too: its dropouts default to p=0, so the step has no
    randomness."""
    builder, parameter = TRANSFORMERS[name]
    net, x = builder(dtype)
    back = load_onnx(export_onnx(convert_torch(net, x), None))
    assert back.dtype == str(dtype).removeprefix("torch.")
    assert parameter in {layer.name for layer in back.layers}
    check(net, x, back, training=training)
