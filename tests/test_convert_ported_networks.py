"""The user-written networks of the ported-network tests (LeNet-5, ESPCN with PixelShuffle,
a 3-D CNN, CharLSTM, ResNet-18, MobileNet with squeeze-excitation, U-Net, the DCGAN parts)
brought across from torch by ``convert_torch`` and by ``torch.onnx.export`` + ``load_onnx``,
and compared with torch autograd by ``check`` in float64: outputs, the input gradient
and every parameter gradient by torch's name, in evaluation and in training mode (none of
them draws random numbers: batch statistics, the running statistics after the step).

Not converted, and why: MobileNetSE by convert_torch (its forward compares tensor shapes,
``h + y if y.shape == h.shape``, which torch.fx cannot trace: refused with fx's reason);
U-Net by convert_torch (``F.max_pool2d`` and ``F.pad`` as functions, not converted yet);
CharLSTM by load_onnx (its int64 ids input and ONNX's LSTM node are not read yet).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")
from handgrad.io import convert_torch, load_onnx  # noqa: E402
from test_ported_networks import (  # noqa: E402
    STEPS,
    VOCAB,
    CharLSTM,
    cnn3d_case,
    espcn_case,
    lenet5_case,
    seeded,
)
from test_ported_networks_resnet import MobileNetSE, ResNet18  # noqa: E402
from test_ported_networks_unet import (  # noqa: E402
    NZ,
    SIZE,
    TorchUNet,
    torch_discriminator,
    torch_generator,
)
from torchvision_support import check, onnx_export  # noqa: E402

nn = torch.nn
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _maps(*shape):
    return lambda: torch.randn(*shape, dtype=torch.float64)


#: network -> (torch module maker, example input maker)
NETWORKS = {
    "lenet5": (lambda: lenet5_case()["net"], _maps(2, 1, 28, 28)),
    "espcn": (lambda: espcn_case()["net"], _maps(2, 1, 8, 8)),
    "cnn3d": (lambda: cnn3d_case()["net"], _maps(2, 1, 6, 8, 8)),
    "char_lstm": (lambda: seeded(lambda: CharLSTM(0.0)),
                  lambda: torch.randint(0, VOCAB, (2, STEPS))),
    "resnet18": (lambda: ResNet18().double(), _maps(2, 3, 48, 48)),
    "mobilenet_se": (lambda: MobileNetSE().double(), _maps(2, 3, 16, 16)),
    "unet": (lambda: TorchUNet().double(), _maps(2, 1, *SIZE)),
    "gan_generator": (lambda: nn.Sequential(torch_generator(), torch_discriminator()).double(),
                      _maps(2, NZ, 1, 1)),
    "gan_discriminator": (lambda: torch_discriminator().double(), _maps(4, 1, 16, 16)),
}
SEQUENCES = {"char_lstm"}  # (N, T) ids in, (N, T, V) logits out: no maps
CONVERTED = ["lenet5", "espcn", "cnn3d", "char_lstm", "resnet18", "unet", "gan_generator",
             "gan_discriminator"]
LOADED = ["lenet5", "espcn", "cnn3d", "resnet18", "mobilenet_se", "unet", "gan_generator",
          "gan_discriminator"]


def network(name):
    make, example = NETWORKS[name]
    torch.manual_seed(0)
    net = make().eval()
    return net, example()


@pytest.mark.parametrize("training", [False, True], ids=["eval", "training"])
@pytest.mark.parametrize("name", CONVERTED)
def test_convert_torch_matches_torch(name, training):
    net, x = network(name)
    check(net, x, convert_torch(net, x), training=training, maps=name not in SEQUENCES)


@pytest.mark.parametrize("training", [False, True], ids=["eval", "training"])
@pytest.mark.parametrize("name", LOADED)
def test_load_onnx_matches_torch(name, training):
    net, x = network(name)
    check(net, x, load_onnx(onnx_export(net, x)), training=training)


def test_shape_dependent_forward_is_refused_with_fx_reason():
    net, x = network("mobilenet_se")
    with pytest.raises(ValueError, match=r"torch\.fx cannot trace MobileNetSE .*control flow"):
        convert_torch(net, x)


class _LSTMState(nn.Module):
    """Reads the LSTM's final hidden state (item 1 of its output), or its sequence only."""

    def __init__(self, use_state, batch_first=True):
        super().__init__()
        self.lstm = nn.LSTM(3, 4, batch_first=batch_first)
        self.use_state = use_state

    def forward(self, x):
        out, (h, _c) = self.lstm(x)
        return h[0] if self.use_state else out


def test_recurrent_state_and_time_major_lstm_are_refused_by_name():
    x = torch.randn(2, 5, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"node 'getitem_1' .* final state of a recurrent"):
        convert_torch(_LSTMState(True).double(), x)
    with pytest.raises(ValueError, match=r"module 'lstm' .* LSTM with batch_first=False"):
        convert_torch(_LSTMState(False, batch_first=False).double(), x)
    net = _LSTMState(False).double().eval()  # the unused state is left alone
    check(net, x, convert_torch(net, x), maps=False)


class _MadeInForward(nn.Module):
    """Activation modules built inside forward (not submodules): fx traces into them."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3)

    def forward(self, x):
        return nn.Hardswish()(nn.ReLU()(self.conv(x)) - 1.0)


def test_modules_made_inside_forward_are_traced_through():
    torch.manual_seed(0)
    net, x = _MadeInForward().double().eval(), torch.randn(2, 2, 6, 6, dtype=torch.float64)
    model = convert_torch(net, x)
    assert {"relu", "hardswish"} <= {layer.name for layer in model.layers}
    check(net, x, model, training=True)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_reads_torch_pixel_shuffle_and_refuses_dcr(mode):
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("DepthToSpace", ["x"], ["y"], name="shuffle", blocksize=2,
                          mode=mode)], "g",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["N", 8, 3, 2])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, ["N", 2, 6, 4])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    if mode == "DCR":
        with pytest.raises(ValueError, match=r"DepthToSpace node 'shuffle': mode DCR"):
            load_onnx(proto)
        return
    x = torch.randn(2, 8, 3, 2, dtype=torch.float64)
    check(nn.PixelShuffle(2), x, load_onnx(proto))
