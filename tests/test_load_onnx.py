"""load_onnx: export_onnx -> load_onnx round trips, torch.onnx.export -> load_onnx against
torch autograd (outputs, input and parameter gradients), names and refusals."""

import io

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
import handgrad as hg  # noqa: E402
import handgrad.layers as L  # noqa: E402
from handgrad.io import export_onnx, from_torch, load_onnx  # noqa: E402
from handgrad.layers.declarations import conv_weight_perm  # noqa: E402
from handgrad.testing import assert_close  # noqa: E402


def _cnn(x):
    h = L.ReLU()(L.BatchNorm()(L.Conv2D(4, 3, padding=((1, 0), (0, 1)), groups=1)(x)))
    h = L.AvgPool2D(2, padding=1, count_include_pad=False)(L.MaxPool2D(2, ceil_mode=True)(h))
    return L.Dense(5)(L.Flatten()(h))


def _residual(x):
    h = L.Conv2D(4, 3, padding=1)(x)
    h = L.Add()([h, L.ReLU()(L.Conv2D(4, 3, padding=1, groups=2)(h))])
    return L.Dense(3)(L.GlobalAvgPool2D()(h))


def _mlp(x):
    return L.Dense(3)(L.Tanh()(L.Dense(7)(L.Flatten()(x))))


def _unet(x):
    down = L.MaxPool2D(2)(L.ReLU()(L.Conv2D(4, 3, padding=1)(x)))
    up = L.Upsample(scale_factor=2, mode="bilinear")(L.Conv2D(4, 3, padding=1)(down))
    return L.Conv2D(2, 1)(L.Concatenate()([up, x]))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("build", [_cnn, _residual, _mlp, _unet])
def test_round_trip_same_outputs_and_trainable(build, dtype):
    x = hg.Input((8, 8, 3), name="image")
    model = hg.Model(x, build(x), dtype=dtype, seed=0)
    data = np.random.default_rng(1).normal(size=(4, 8, 8, 3)).astype(dtype)
    model.forward(data, training=True)  # running statistics away from their start
    loaded = load_onnx(export_onnx(model, None))
    expected = model.forward(data, training=False)
    actual = loaded.forward(data, training=False)
    assert actual.dtype == np.dtype(dtype)
    assert_close(actual, expected, terms=64, what=f"{build.__name__} output")
    before = {k: p.copy() for k, p in loaded.named_parameters().items()}
    loaded.compile(optimizer="sgd", loss="mse")
    loaded.fit(data, np.zeros_like(expected), epochs=1, batch_size=4, verbose=0)
    after = loaded.named_parameters()
    assert any(not np.array_equal(before[k], after[k]) for k in before)


def _torch_net(torch):
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, 4, 3, padding=1)
            self.bn1 = nn.BatchNorm2d(4)
            self.conv2 = nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=2)
            self.pool = nn.AvgPool2d(2)
            self.fc = nn.Linear(4 * 4 * 4, 5)

        def forward(self, x):
            h = torch.relu(self.bn1(self.conv1(x)))
            h = nn.functional.leaky_relu(self.conv2(h), 0.1) + self.pool(h)
            return self.fc(torch.flatten(h, 1))

    torch.manual_seed(0)
    net = Net().double().eval()
    with torch.no_grad():
        net.bn1.running_mean.normal_()
        net.bn1.running_var.uniform_(0.5, 2.0)
    return net


def _export_torch(torch, net, x):
    buffer = io.BytesIO()
    with pytest.warns(DeprecationWarning):  # the TorchScript exporter (onnxscript is absent)
        torch.onnx.export(net, (x,), buffer, dynamo=False, do_constant_folding=False,
                          training=torch.onnx.TrainingMode.PRESERVE)
    return onnx.load_from_string(buffer.getvalue())


def test_torch_export_matches_torch_autograd_in_float64():
    torch = pytest.importorskip("torch")
    net = _torch_net(torch)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64, requires_grad=True)
    model = load_onnx(_export_torch(torch, net, x.detach()))
    assert [n.layer.name for n in model.nodes if n.layer.parameters] == [
        "conv1", "bn1", "conv2", "fc"]
    y = net(x)
    dy = torch.randn_like(y)
    y.backward(dy)
    out = model.forward(x.detach().numpy().transpose(0, 2, 3, 1), training=False, grad=True)
    assert_close(out, y.detach().numpy(), terms=64, what="output")
    dx = model.backward(dy.numpy())
    assert_close(dx, x.grad.numpy().transpose(0, 2, 3, 1), terms=64, what="input gradient")
    layers = {n.layer.name: n.layer for n in model.nodes}
    for name, key, expected in [
            ("conv1", "W", net.conv1.weight.grad.numpy().transpose(
                np.argsort(conv_weight_perm(2)))),
            ("conv2", "b", net.conv2.bias.grad.numpy()),
            ("bn1", "gamma", net.bn1.weight.grad.numpy()),
            ("fc", "b", net.fc.bias.grad.numpy())]:
        assert_close(layers[name].gradients[key], expected, terms=128, what=f"{name}.{key}")


def test_loaded_model_takes_torch_checkpoints_by_name():
    torch = pytest.importorskip("torch")
    net = _torch_net(torch)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    model = load_onnx(_export_torch(torch, net, x))
    with torch.no_grad():
        for p in net.parameters():
            p.mul_(-0.5)
    from_torch(net.state_dict(), model)
    out = model.forward(x.numpy().transpose(0, 2, 3, 1), training=False)
    assert_close(out, net(x).detach().numpy(), terms=64, what="output after from_torch")


def test_unsupported_op_is_refused_with_its_type_and_node():
    helper = onnx.helper
    node = helper.make_node("Erf", ["x"], ["y"], name="my_erf")
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["N", 3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["N", 3])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ValueError, match="the Erf node 'my_erf' has no handgrad counterpart"):
        load_onnx(proto)


def test_source_type_is_checked():
    with pytest.raises(TypeError, match=r"'source' must be a path or an onnx\.ModelProto"):
        load_onnx(3)


def _one_node(op_type, inputs, shapes, initializers=(), **attributes):
    helper = onnx.helper
    node = helper.make_node(op_type, [*inputs, *(t.name for t in initializers)], ["y"],
                            name="n", **attributes)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(name, onnx.TensorProto.DOUBLE, shape)
                      for name, shape in zip(inputs, shapes)],
        [helper.make_tensor_value_info("y", onnx.TensorProto.DOUBLE, None)],
        initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_broadcasting_mul_of_a_gate_matches_numpy():
    proto = _one_node("Mul", ["g", "x"], [[2, 3, 1, 1], [2, 3, 4, 5]])
    rng = np.random.default_rng(0)
    g, x = rng.normal(size=(2, 1, 1, 3)), rng.normal(size=(2, 4, 5, 3))  # channels last
    assert_close(load_onnx(proto).forward([g, x], training=False), g * x, what="gate")


def test_shapes_that_do_not_broadcast_are_refused():
    proto = _one_node("Add", ["a", "b"], [[2, 3, 4, 4], [2, 2, 4, 4]])
    with pytest.raises(ValueError, match=r"Add node 'n': inputs of shapes .* do not broadcast"):
        load_onnx(proto)


def test_one_sided_clip_is_refused():
    bound = onnx.numpy_helper.from_array(np.array(0.0), "lo")
    proto = _one_node("Clip", ["x"], [[2, 3]], [bound])
    with pytest.raises(ValueError, match=r"Clip node 'n': bounds .* one-sided"):
        load_onnx(proto)


def test_relu6_clip_matches_numpy():
    lo, hi = (onnx.numpy_helper.from_array(np.array(v), n) for v, n in ((0.0, "lo"), (6.0, "hi")))
    proto = _one_node("Clip", ["x"], [[2, 3]], [lo, hi])
    x = np.linspace(-3, 9, 6).reshape(2, 3)
    assert_close(load_onnx(proto).forward(x, training=False), np.clip(x, 0, 6), what="relu6")
