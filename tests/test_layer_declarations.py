"""A layer is added in one place: a weighted layer class defined here declares its torch
twin and its ONNX form, and is then imported from torch, exported to torch and to ONNX
and summarized with no other edit; the registry refuses a second class under a taken
name when it is registered."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
from onnx.reference import ReferenceEvaluator  # noqa: E402

from handgrad import layers as L  # noqa: E402
from handgrad.io import export_onnx, from_torch, to_torch_state_dict  # noqa: E402
from handgrad.layers import declarations as twins  # noqa: E402
from handgrad.layers.registry import REGISTRY, register  # noqa: E402
from handgrad.model import Sequential  # noqa: E402
from handgrad.testing import assert_close  # noqa: E402

from tolerances_composite import network_bounds  # noqa: E402


def _scale_shift_params(layer, layout):
    return [twins.TorchParam("weight", ("W",), features=True),
            twins.TorchParam("bias", ("b",), features=True)]


class ScaleShift(L.Layer):
    """y = x * W + b per feature; W, b (F,). Its torch twin is :class:`TorchScaleShift`."""

    torch_twin = twins.TorchTwin("ScaleShift", _scale_shift_params, twins.KEEP)
    receptive_field = "pointwise"

    def get_config(self):
        return {"name": self.name}

    def _build(self, input_shape, rng):
        self.add_parameter("W", input_shape[-1:], "glorot_uniform", rng)
        self.add_parameter("b", input_shape[-1:], "zeros", rng)

    def _forward(self, x, training):
        return x * self.parameters["W"] + self.parameters["b"], x

    def _backward(self, dy, x):
        return dy * self.parameters["W"], {"W": (dy * x).reshape(-1, x.shape[-1]).sum(0),
                                           "b": dy.reshape(-1, x.shape[-1]).sum(0)}

    def onnx_form(self, g, v):
        v = g.channels_last(v)
        y = g.op("Mul", [v.name, g.const(self.parameters["W"], "W")], "scale")
        y = g.op("Add", [y, g.const(self.parameters["b"], "b")], "shift")
        return g.value(y, self.output_shape(v.shape), False)


class TorchScaleShift(torch.nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(features))
        self.bias = torch.nn.Parameter(torch.randn(features))

    def forward(self, x):
        return x * self.weight + self.bias


@pytest.fixture
def scale_shift():
    """ScaleShift registered for the test only (rebuilding a model from its config, as
    the tolerance twin does, finds layers by class name)."""
    register(ScaleShift)
    yield ScaleShift
    REGISTRY.pop("ScaleShift")


def test_a_new_weighted_layer_needs_only_its_declaration(scale_shift):
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(3, 4), TorchScaleShift(4), torch.nn.Tanh())
    model = from_torch(module, Sequential([L.Dense(4), ScaleShift(), L.Tanh()],
                                          input_shape=(3,), seed=1))
    x = np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32)
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    terms, scale = network_bounds(model, x)
    assert_close(model.predict(x), expected, dtype=np.float32, terms=terms, scale=scale,
                 what="output")
    state = to_torch_state_dict(model, numpy=True)
    assert sorted(state) == ["0.bias", "0.weight", "1.bias", "1.weight"]
    for name, tensor in module.state_dict().items():
        assert np.array_equal(state[name], tensor.numpy()), name
    proto = export_onnx(model, None)
    assert [n.op_type for n in proto.graph.node] == ["MatMul", "Add", "Mul", "Add", "Tanh"]
    got = ReferenceEvaluator(proto).run(None, {"input": x})[0]
    assert_close(got, model.predict(x), dtype=np.float32, terms=terms, scale=scale,
                 what="output")
    assert "1 (ScaleShift)" in model.summary(print_fn=None)


def test_the_new_layer_follows_a_flatten_of_maps(scale_shift):
    """Its weight declares ``features``: after a Flatten of (H, W, C) maps torch's order
    of the features is (C, H, W), and the weights are reordered as the Dense rows are."""
    model = Sequential([L.Conv2D(2, 1), L.Flatten(), ScaleShift()], input_shape=(2, 3, 1),
                       seed=0)
    w = model.named_parameters()["scale_shift_2.W"]
    state = to_torch_state_dict(model, numpy=True)
    assert np.array_equal(state["2.weight"], w.reshape(2, 3, 2).transpose(2, 0, 1).ravel())
    twin = from_torch(state, Sequential([L.Conv2D(2, 1), L.Flatten(), ScaleShift()],
                                        input_shape=(2, 3, 1), seed=5))
    assert np.array_equal(twin.named_parameters()["scale_shift_2.W"], w)


def test_supported_layer_lists_come_from_the_declarations(scale_shift):
    """The error messages name what is declared, the new layer included."""

    class Unknown(L.Layer):
        def _build(self, input_shape, rng):
            self.add_parameter("W", (1,), "zeros", rng)

        def _forward(self, x, training):
            return x, None

    model = Sequential([Unknown(name="odd")], input_shape=(2,))
    with pytest.raises(ValueError, match=r"'odd' has weights but no torch twin \(interop "
                                         r"covers .*ScaleShift"):
        to_torch_state_dict(model)
    with pytest.raises(ValueError, match=r"'odd' \(Unknown\) has no ONNX export; "
                                         r"exportable: .*ScaleShift"):
        export_onnx(model, None)


def test_a_taken_layer_name_is_refused_when_registered():
    class Dense(L.Layer):
        pass

    with pytest.raises(ValueError, match=r"register: the layer name 'Dense' is taken by "
                                         r"handgrad\.layers\.core\.Dense; .*needs another name"):
        register(Dense)
    assert REGISTRY["Dense"] is L.Dense


def test_the_same_definition_run_again_replaces_itself():
    def define():
        class Rerun(L.Layer):
            pass
        return Rerun

    first, second = define(), define()
    try:
        assert register(first) is first and register(second) is second
        assert REGISTRY["Rerun"] is second
    finally:
        REGISTRY.pop("Rerun")
