"""``handgrad.io.convert_torch``: torch modules traced by torch.fx into graph Models.

Each network is a hand-written torch module; its conversion is compared with torch
autograd in float64: the evaluation-mode output, the input gradient and every parameter
gradient by torch's name (``forward(x, training=False, grad=True)``), and for networks
without randomness a training-mode forward and backward with the running statistics
after it. Tolerance: ``terms`` is the number of parameters (a bound on the rounded terms
behind any one result); ``scale`` the largest expected value, for gradients the largest
gradient of the network (a batch norm's gradients are sums that cancel).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import handgrad as hg
from handgrad.io import convert_torch, from_torch, to_torch_state_dict
from handgrad.testing import assert_close, finite_max
from test_ported_networks import lenet5_case
from test_ported_networks_resnet import ResNet18
from torchvision_support import torch_gradients, torchvision

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional


def channels_last(t):
    a = t.detach().numpy()
    return np.moveaxis(a, 1, -1) if a.ndim > 2 else a


def check_against_torch(net, shape, training=False, seed=0):
    """Convert ``net`` (float64) and compare one forward and backward in the given mode."""
    torch.manual_seed(seed)
    x = torch.randn(*shape, dtype=torch.float64)
    model = convert_torch(net, x)
    assert model.dtype == np.float64
    net = copy.deepcopy(net).train(training)
    xt = x.clone().requires_grad_(True)
    y = net(xt)
    dy = torch.randn_like(y)
    y.backward(dy)
    model.zero_grad()
    ours = model.forward(channels_last(x), training=training, grad=True)
    dx = model.backward(channels_last(dy))
    terms, check = model.count_params(), dict(dtype=np.float64)
    assert_close(ours, channels_last(y), terms=terms, what="output", **check)
    assert_close(dx, channels_last(xt.grad), terms=terms, what="input gradient", **check)
    grads = torch_gradients(model)
    named = dict(net.named_parameters())
    assert set(named) <= set(grads), sorted(set(named) - set(grads))
    scale = max(finite_max(p.grad.numpy()) for p in named.values())
    for name, p in named.items():
        assert_close(grads[name], p.grad.numpy(), terms=terms, scale=scale,
                     what=f"grad {name}", **check)
    if training:  # the running statistics after the batch
        state = to_torch_state_dict(model, numpy=True)
        for name, b in net.named_buffers():
            if not name.endswith("num_batches_tracked"):
                assert_close(state[name], b.numpy(), terms=terms, what=name, **check)
    return model


class SEBlock(nn.Module):
    """A MobileNetV2 inverted residual with squeeze-excitation and a concatenated skip."""

    def __init__(self, c, t=3):
        super().__init__()
        hidden = c * t
        self.expand = nn.Sequential(nn.Conv2d(c, hidden, 1, bias=False), nn.BatchNorm2d(hidden),
                                    nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(hidden, hidden, 3, 1, 1, groups=hidden, bias=False),
                                nn.BatchNorm2d(hidden), nn.Hardswish())
        self.se_reduce, self.se_expand = nn.Linear(hidden, hidden // 4), nn.Linear(
            hidden // 4, hidden)
        self.project = nn.Sequential(nn.Conv2d(hidden, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        y = self.dw(self.expand(x))
        s = torch.sigmoid(self.se_expand(F.silu(self.se_reduce(y.mean(dim=(2, 3))))))
        y = self.project(y * s[:, :, None, None])
        return torch.cat([x + y, x * 0.5], dim=1)


class MobileNetSE(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.Hardswish())
        self.block = SEBlock(8)
        self.head = nn.Conv2d(16, 12, 1)
        self.classifier = nn.Linear(12 * 4 * 4, 10)

    def forward(self, x):
        h = F.adaptive_avg_pool2d(self.head(self.block(self.stem(x))), 4)
        return self.classifier(h.view(h.size(0), -1))


def test_lenet_matches_torch():
    check_against_torch(lenet5_case()["net"], (2, 1, 28, 28))


@pytest.mark.parametrize("training", [False, True])
def test_resnet18_matches_torch(training):
    torch.manual_seed(0)
    model = check_against_torch(ResNet18().double(), (2, 3, 48, 48), training)
    assert "layer2.0.downsample.0" in [layer.name for layer in model.layers]


@pytest.mark.parametrize("training", [False, True])
def test_mobilenet_se_block_matches_torch(training):
    torch.manual_seed(0)
    check_against_torch(MobileNetSE().double(), (2, 3, 16, 16), training)


class FlattenPaths(nn.Module):
    """Maps flattened three ways: straight from the input (no convolution before it: the
    map goes to torch's order), after a convolution into a Linear (the Linear's rows are
    permuted) and after a convolution into a concatenation (torch's order again)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.raw, self.fc = nn.Linear(3 * 5 * 6, 7), nn.Linear(4 * 5 * 6, 7)

    def forward(self, x):
        h = F.relu(self.conv(x))
        twice = (h * 2.0).flatten(1)[:, None, :]
        return torch.cat([self.raw(x.reshape(x.shape[0], -1)),
                          F.relu(self.fc(torch.flatten(h, 1))), twice.flatten(1)], dim=1)


@pytest.mark.parametrize("training", [False, True])
def test_flatten_of_maps_keeps_torch_order(training):
    torch.manual_seed(0)
    model = check_against_torch(FlattenPaths().double(), (2, 3, 5, 6), training)
    kinds = [type(layer).__name__ for layer in model.layers]
    assert kinds.count("Flatten") == 1  # into the Linear: its rows permuted, no transpose
    assert kinds.count("Permute") == 2  # the input's and the concatenated map's


def test_float32_module_gives_a_float32_model():
    torch.manual_seed(0)
    net = lenet5_case()["net"].float()
    model = convert_torch(net, torch.randn(2, 1, 28, 28))
    assert model.dtype == np.float32
    assert all(p.dtype == np.float32 for p in model.named_parameters().values())


def test_from_torch_loads_a_later_checkpoint_by_torch_names(tmp_path):
    torch.manual_seed(0)
    net, x = ResNet18().double().eval(), torch.randn(2, 3, 32, 32, dtype=torch.float64)
    model = convert_torch(net, x)
    torch.manual_seed(1)
    later = ResNet18().double().eval()
    from_torch(later.state_dict(), model)
    terms = model.count_params()
    assert_close(model.forward(channels_last(x), training=False), channels_last(later(x)),
                 dtype=np.float64, terms=terms)
    path = tmp_path / "resnet.safetensors"
    hg.io.save(model, path)
    loaded = hg.io.load(path)
    assert [layer.name for layer in loaded.layers] == [layer.name for layer in model.layers]
    np.testing.assert_array_equal(loaded.forward(channels_last(x), training=False),
                                  model.forward(channels_last(x), training=False))


class Erf(nn.Module):
    def forward(self, x):
        return torch.erf(x)


class Outer(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 1), inner)

    def forward(self, x):
        return self.features(x)


@pytest.mark.parametrize("inner, named", [(Erf(), ["erf", "features.1"]),
                                          (nn.Threshold(0.1, 20.0), ["Threshold",
                                                                     "features.1"])])
def test_unmapped_nodes_are_refused_with_target_and_module_path(inner, named):
    with pytest.raises(ValueError, match="convert_torch") as info:
        convert_torch(Outer(inner), torch.randn(1, 3, 4, 4))
    assert all(word in str(info.value) for word in named), str(info.value)


def test_untraceable_module_is_refused():
    class Branchy(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x

    with pytest.raises(ValueError, match=r"torch\.fx cannot trace Branchy"):
        convert_torch(Branchy(), torch.randn(1, 3))


class ParameterFactors(nn.Module):
    def __init__(self, shape=(4, 1, 1)):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 1)
        self.scale = nn.Parameter(torch.randn(*shape))
        self.shift = nn.Parameter(torch.randn(*shape))

    def forward(self, x):
        return self.scale * self.conv(x) + self.shift


def test_per_channel_parameters_are_parameter_layers_named_by_torch():
    net = ParameterFactors().double()
    x = torch.randn(2, 3, 4, 4, dtype=torch.float64)
    model = convert_torch(net, x)
    assert {"scale", "shift"} <= {layer.name for layer in model.layers}
    y = model.forward(x.permute(0, 2, 3, 1).numpy())
    assert_close(y, net(x).detach().permute(0, 2, 3, 1).numpy(), dtype=np.float64)
    later = ParameterFactors().double()  # a later checkpoint loads by torch's names
    from_torch(later.state_dict(), model)
    y = model.forward(x.permute(0, 2, 3, 1).numpy())
    assert_close(y, later(x).detach().permute(0, 2, 3, 1).numpy(), dtype=np.float64)


def test_parameter_that_differs_per_example_is_refused():
    with pytest.raises(ValueError, match=r"node 'mul'.*the parameter 'scale' differs along "
                                         r"the batch"):
        convert_torch(ParameterFactors((2, 4, 1, 1)), torch.randn(2, 3, 4, 4))


def stochastic_depth(x, p, mode, training):
    """torchvision's function, kept as one fx node (as torchvision's own calls are)."""
    return torchvision().ops.stochastic_depth(x, p, mode, training)


torch.fx.wrap("stochastic_depth")


class RowDrop(nn.Module):
    def forward(self, x):
        return stochastic_depth(x, 0.5, "row", self.training)


@pytest.mark.parametrize("make", [RowDrop, lambda: torchvision().ops.StochasticDepth(
    0.5, "row")], ids=["function", "module"])
def test_stochastic_depth_traced_in_eval_still_drops_in_training(make):
    net = make().eval()
    x = np.ones((64, 3), dtype=np.float32)
    model = convert_torch(net, torch.from_numpy(x))
    assert [type(layer).__name__ for layer in model.layers] == ["StochasticDepth"]
    np.testing.assert_array_equal(model.forward(x, training=False), x)  # the identity
    y = model.forward(x, training=True)
    rows = set(np.unique(y.max(axis=1)))
    assert rows == {0.0, 2.0}  # whole examples dropped, the others scaled by 1 / (1 - p)


class Paddings(nn.Module):
    """torch's padding modules and F.pad in every mode, widths for fewer axes than the
    spatial ones included (the others unpadded)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.zero, self.mirror = nn.ZeroPad2d((1, 2, 0, 1)), nn.ReflectionPad2d(1)

    def forward(self, x):
        y = self.mirror(self.zero(self.conv(x)))
        y = F.pad(y, (1, 0, 0, 2), mode="replicate")
        y = F.pad(y, (1, 1), value=0.25)
        return F.pad(y, (1, 1, 1, 1), mode="circular")


def test_padding_modules_and_functions_match_torch():
    torch.manual_seed(0)
    check_against_torch(Paddings().double(), (2, 3, 8, 9))


def test_padding_of_the_channels_is_refused_by_node():
    class PadChannels(nn.Module):
        def forward(self, x):
            return F.pad(x, (1, 1, 1, 1, 1, 1))

    with pytest.raises(ValueError, match=r"node .pad.*6 widths on a tensor of shape"):
        convert_torch(PadChannels(), torch.randn(2, 3, 4, 4))
