"""torchvision's MaxViT through convert_torch (torch.fx) and torch.onnx.export + load_onnx,
compared with torch autograd by ``torchvision_support.check``; the pieces it needs
(einsum as MatMul, chunk of any axis, a parameter gathered by a constant index, softmax,
swapaxes) on small modules; and their refusals."""

from __future__ import annotations

import numpy as np
import pytest

from torchvision_support import away_from_init, check, onnx_export, torchvision

torch = pytest.importorskip("torch")

#: a small MaxVit: 32x32 input -> 16x16 stem -> 8x8 and 4x4 blocks, windows of 2x2
SMALL = dict(input_size=(32, 32), stem_channels=16, partition_size=2, block_channels=[16, 32],
             block_layers=[1, 1], head_dim=8, stochastic_depth_prob=0.0, num_classes=10)


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch on one thread


def small_maxvit(dtype=torch.float64):
    """The small MaxVit, seeded, in evaluation mode, its running statistics moved off their
    start, and a batch of 2 inputs (the last BatchNorm sees 2 x 4 x 4 values per channel)."""
    torchvision()
    from torchvision.models.maxvit import MaxVit
    torch.manual_seed(0)
    net = away_from_init(MaxVit(**SMALL).to(dtype).eval())
    with torch.no_grad():
        for m in net.modules():
            if hasattr(m, "relative_position_bias_table"):  # trunc_normal(0.02) is tiny
                m.relative_position_bias_table.normal_(0, 1)
    return net, torch.randn(2, 3, 32, 32, dtype=dtype)


def _bias_layers(model):
    return [layer for layer in model.layers if type(layer).__name__ == "Parameter"]


def test_maxvit_convert_torch_float64_eval_and_training():
    from handgrad.io import convert_torch
    net, x = small_maxvit()
    model = convert_torch(net, x)
    tables = [k for k in dict(net.named_parameters()) if k.endswith("bias_table")]
    assert sorted(layer.name for layer in _bias_layers(model)) == sorted(tables)
    report = check(net, x, model)
    print(f"maxvit small convert_torch float64 eval {report}")
    report = check(net, x, convert_torch(net, x), training=True)
    print(f"maxvit small convert_torch float64 training {report}")


def test_maxvit_convert_torch_float32():
    from handgrad.io import convert_torch
    net, x = small_maxvit(torch.float32)
    model = convert_torch(net, x)
    assert np.dtype(model.dtype) == np.float32
    print(f"maxvit small convert_torch float32 eval {check(net, x, model)}")


def test_maxvit_load_onnx_float64():
    from handgrad.io import load_onnx
    net, x = small_maxvit()
    model = load_onnx(onnx_export(net, x))
    tables = [k for k in dict(net.named_parameters()) if k.endswith("bias_table")]
    assert sorted(layer.name for layer in _bias_layers(model)) == sorted(tables)
    print(f"maxvit small load_onnx float64 eval {check(net, x, model)}")


class _Attention(torch.nn.Module):
    """Attention written out as MaxViT's: chunk of the last dim, einsums (one with its
    output transposed), a bias table gathered by a constant index, softmax, swapaxes."""

    def __init__(self, out="bhij"):
        super().__init__()
        self.qkv = torch.nn.Linear(4, 12)
        self.table = torch.nn.Parameter(torch.randn(7, 2))
        self.register_buffer("index", torch.tensor([[0, 1, 2], [3, 4, 5], [6, 0, 1]]))
        self.out = out

    def forward(self, x):  # x: (B, 4, 1, 3), as a sequence (B, 3, 4)
        x = x.flatten(2).transpose(1, 2)
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.reshape(x.shape[0], 3, 2, 2).swapaxes(1, 2) for t in (q, k, v))
        bias = self.table[self.index.view(-1)].view(3, 3, 2).permute(2, 0, 1).unsqueeze(0)
        scores = torch.einsum(f"bhid,bhjd->{self.out}", q, k) + bias
        a = scores.softmax(dim=-1)
        return torch.einsum("bhij,bhjd->bhid", a, v).swapaxes(1, 2).reshape(x.shape[0], 12)


@pytest.mark.parametrize("out", ["bhij", "bhji"])
def test_attention_pieces_convert_torch(out):
    """An einsum whose output is transposed gets a Permute; the gathered bias's gradient is
    scattered back into the table (entries 0 and 1 are used twice)."""
    from handgrad.io import convert_torch
    torch.manual_seed(0)
    net = _Attention(out).double()
    x = torch.randn(2, 4, 1, 3, dtype=torch.float64)
    model = convert_torch(net, x)
    assert [layer.name for layer in _bias_layers(model)] == ["table"]
    check(net, x, model)


def test_chunk_of_channels_convert_torch():
    """chunk along torch's channel dim of a map (held last by handgrad) and along H."""
    from handgrad.io import convert_torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(2, 6, 1)

        def forward(self, x):
            a, b = self.conv(x).chunk(2, dim=1)
            c, d = (a * b).chunk(2, dim=2)
            return c - d

    torch.manual_seed(0)
    net = Net().double()
    x = torch.randn(2, 2, 4, 3, dtype=torch.float64)
    check(net, x, convert_torch(net, x))


@pytest.mark.parametrize("equation, why", [
    ("bij,bkj->bik", None), ("bij,bjk->bik", None), ("bji,bjk->bki", None),
    ("bij,bij->bi", "einsum"), ("bij,bjk,bkl->bil", "einsum")])
def test_einsum_forms(equation, why):
    from handgrad.io import convert_torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(3, 3)

        def forward(self, x):  # (B, 9) -> (B, 3, 3) -> (B, 9)
            x = x.view(x.shape[0], 3, 3)
            y = self.linear(x)
            operands = (x, y, y)[:equation.count(",") + 1]
            return torch.einsum(equation, *operands).reshape(x.shape[0], -1)

    torch.manual_seed(0)
    net, x = Net().double(), torch.randn(2, 9, dtype=torch.float64)
    if why is None:
        check(net, x, convert_torch(net, x))
    else:
        with pytest.raises(ValueError, match=rf"node 'einsum'.*{why}.*batched matrix product"):
            convert_torch(net, x)


def test_parameter_computed_on_outside_its_module_is_refused():
    from handgrad.io import convert_torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Parameter(torch.randn(3))

        def forward(self, x):  # exp computes new values: no gather of the table
            return torch.cat([x, self.table.exp().view(1, 3).expand(x.shape[0], 3)], dim=1)

    with pytest.raises(ValueError, match=r"node 'exp'.*module '\(top level\)'.*parameter "
                                         r"'table' computes new values"):
        convert_torch(Net(), torch.randn(2, 3))


def test_einsum_onnx_refused_names_the_node():
    from handgrad.io import load_onnx

    class Net(torch.nn.Module):
        def forward(self, x):
            return torch.einsum("bij->bji", x)

    x = torch.randn(2, 3, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"Einsum node .*'bij->bji'"):
        load_onnx(onnx_export(Net(), x))
