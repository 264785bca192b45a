"""torchvision's segmentation models (FCN, DeepLabv3, LRASPP; 3 classes, FCN and DeepLabv3
with their auxiliary head) through ``convert_torch`` (torch.fx) and ``load_onnx`` (torch's
TorchScript exporter, opset 17): their dictionary output becomes the Model's named outputs
(``output_names``, in the dictionary's order), compared with torch autograd by name with
the input gradient and every parameter gradient by torch's name (``check``). Also the
pieces on small modules: ``F.interpolate`` as ``Upsample`` and dictionary outputs.
Skips without torchvision."""

import gc

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
from handgrad.io import convert_torch, load_onnx  # noqa: E402
from torchvision_support import (  # noqa: E402
    SPECS,
    check,
    exact_hardsigmoid,
    has_randomness,
    onnx_export,
    torch_model,
)

nn, F = torch.nn, torch.nn.functional

#: model -> its dictionary output's keys (aux_loss=True adds the auxiliary head's "aux")
MODELS = {
    "segmentation.fcn_resnet50": ["out", "aux"],
    "segmentation.deeplabv3_resnet50": ["out", "aux"],
    "segmentation.lraspp_mobilenet_v3_large": ["out"],
}
PATHS = ["convert_torch", "load_onnx"]


@pytest.fixture(autouse=True)
def collect_garbage():
    """The models' reference cycles hold their float64 weights (up to 42M parameters, with
    gradients and torch's copy) until the collector runs: free them after each test."""
    yield
    gc.collect()


def segmentation_model(name, dtype=None):
    """torch's model (float64 unless ``dtype``) and its input."""
    kwargs, shape = SPECS[name]
    if len(MODELS[name]) > 1:
        kwargs = {**kwargs, "aux_loss": True}
    return torch_model(name, dtype, (kwargs, shape))


def converted(name, path, dtype=None, net_x=None):
    """torch's model, its input (``net_x``, or made) and the handgrad model."""
    net, x = net_x or segmentation_model(name, dtype)
    if path == "convert_torch":
        model = convert_torch(net, x)
    else:
        model = load_onnx(onnx_export(net, x, output_names=MODELS[name]))
    exact_hardsigmoid(net)  # after the export, which writes HardSigmoid
    return net, x, model


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", list(MODELS))
def test_segmentation_model_matches_torch_in_float64(name, path, one_torch_thread):
    net, x, model = converted(name, path)
    if path == "convert_torch" or len(MODELS[name]) > 1:  # one ONNX output: a plain one
        assert model.output_names == MODELS[name]
    check(net, x, model)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", list(MODELS))
def test_segmentation_model_trains_as_torch(name, path, one_torch_thread):
    """Training mode (batch statistics, running statistics after the step) where torch
    draws no random numbers: FCN's head and DeepLabv3's ASPP hold Dropout."""
    net_x = segmentation_model(name)
    if has_randomness(net_x[0]):
        pytest.skip(f"{name} draws random numbers in training mode (Dropout in its head)")
    check(*converted(name, path, net_x=net_x), training=True)


@pytest.mark.parametrize("path", PATHS)
def test_segmentation_model_in_float32(path, one_torch_thread):
    net, x, model = converted("segmentation.lraspp_mobilenet_v3_large", path, torch.float32)
    assert model.dtype == np.float32
    check(net, x, model)


class Resize(nn.Module):
    """A convolution, then ``F.interpolate(**kwargs)`` of its maps."""

    def __init__(self, rank=2, **kwargs):
        super().__init__()
        self.conv = getattr(nn, f"Conv{rank}d")(2, 3, 3, padding=1)
        self.kwargs = kwargs

    def forward(self, x):
        return F.interpolate(self.conv(x), **self.kwargs)


@pytest.mark.parametrize("rank, kwargs", [
    (2, {"size": (7, 9), "mode": "bilinear", "align_corners": False}),
    (2, {"size": 5, "mode": "nearest"}),
    (2, {"scale_factor": 2, "mode": "nearest"}),
    (2, {"scale_factor": 1.5, "mode": "bilinear", "align_corners": True}),
    (2, {"scale_factor": 0.7, "mode": "bilinear", "recompute_scale_factor": True}),
    (1, {"scale_factor": 2.5, "mode": "linear"}),
    (3, {"size": (3, 4, 5), "mode": "trilinear"}),
], ids=str)
def test_interpolate_becomes_upsample(rank, kwargs):
    net = Resize(rank, **kwargs).double()
    torch.manual_seed(0)
    x = torch.randn(2, 2, *(6, 5, 4)[:rank], dtype=torch.float64)
    model = convert_torch(net, x)
    assert [type(layer).__name__ for layer in model.layers][-1] == "Upsample"
    check(net, x, model)


def test_interpolate_with_antialias_is_refused():
    x = torch.randn(2, 2, 8, 8)
    net = Resize(size=(4, 4), mode="bilinear", antialias=True)
    with pytest.raises(ValueError, match=r"node 'interpolate'.*antialias=True"):
        convert_torch(net, x)


class TwoHeads(nn.Module):
    """A dictionary output: a map ``"seg"`` resized to the input's size and a vector
    ``"score"``."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, stride=2, padding=1)
        self.fc = nn.Linear(3, 4)

    def forward(self, x):
        y = self.conv(x)
        return {"seg": F.interpolate(y, size=x.shape[-2:], mode="bilinear"),
                "score": self.fc(y.mean((2, 3)))}


def test_dictionary_output_becomes_named_outputs():
    net = TwoHeads().double()
    x = torch.randn(2, 2, 8, 8, dtype=torch.float64)
    model = convert_torch(net, x)
    assert model.output_names == ["seg", "score"]
    out = model.forward(x.numpy().transpose(0, 2, 3, 1))
    assert [o.shape for o in out] == [(2, 8, 8, 3), (2, 4)]
    assert list(model.predict(x.numpy().transpose(0, 2, 3, 1))) == ["seg", "score"]
    check(net, x, model)


@pytest.mark.parametrize("names", [None, ["seg", "score"]])
def test_load_onnx_names_outputs_as_the_graph_does(names):
    """Several ONNX outputs are the Model's named outputs, under the graph's names (the
    exporter numbers them when not given)."""
    net = TwoHeads().double()
    x = torch.randn(2, 2, 8, 8, dtype=torch.float64)
    proto = onnx_export(net, x, output_names=names)
    model = load_onnx(proto)
    assert model.output_names == [o.name for o in proto.graph.output]
    if names is not None:
        assert model.output_names == names
        check(net, x, model)
