"""convert_torch on torchvision's VisionTransformer: the class token and position embedding
(parameters read outside their module's call) as Parameter layers under torch's names,
nn.MultiheadAttention and nn.LayerNorm modules, the class-token readout ``x[:, 0]``;
outputs, the input gradient and every parameter gradient against torch autograd
(tests/torchvision_support.py ``check``). Skips without torchvision."""

import pytest

torch = pytest.importorskip("torch")
from handgrad.io import convert_torch  # noqa: E402
from torchvision_support import away_from_init, check, torch_model, torchvision  # noqa: E402

#: a small VisionTransformer (2 layers, 4 heads, width 64): vit_b_16's structure, fast
SMALL = dict(image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64,
             mlp_dim=128)


def small_vit(dtype=torch.float64):
    """The small ViT with its class token, position embedding and head drawn away from
    torchvision's zeros (a zero token or head would hide a wrong gradient)."""
    VisionTransformer = torchvision().models.vision_transformer.VisionTransformer
    torch.manual_seed(0)
    net = away_from_init(VisionTransformer(**SMALL).to(dtype).eval())
    return net, torch.randn(2, 3, 32, 32, dtype=dtype)


@pytest.mark.parametrize("training", [False, True])
def test_small_vit_matches_torch_in_float64(training, one_torch_thread):
    """Training mode too: ViT's dropouts default to p=0, so the step has no randomness."""
    net, x = small_vit()
    model = convert_torch(net, x)
    names = {layer.name for layer in model.layers}
    assert {"class_token", "encoder.pos_embedding",
            "encoder.layers.encoder_layer_0.self_attention"} <= names
    check(net, x, model, training=training)


def test_small_vit_in_float32(one_torch_thread):
    net, x = small_vit(torch.float32)
    model = convert_torch(net, x)
    assert model.dtype == "float32"
    check(net, x, model)


def test_vit_b_16_matches_torch_in_float64(one_torch_thread):
    net, x = torch_model("vit_b_16")
    check(net, x, convert_torch(net, x))


class _Weights(torch.nn.Module):
    """Attention whose weights are used: handgrad's layer does not return them."""

    def __init__(self):
        super().__init__()
        self.attention = torch.nn.MultiheadAttention(8, 2, batch_first=True)

    def forward(self, x):
        out, weights = self.attention(x, x, x)
        return out.sum(-1) + weights.sum(-1)


class _TwoReads(torch.nn.Module):
    """A parameter gathered two different ways (handgrad holds one gather of it)."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(4, 3))

    def forward(self, x):
        return x + self.table[0] + self.table[1]


class _PerExample(torch.nn.Module):
    """A parameter with a batch axis of its own, not broadcast."""

    def __init__(self):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(2, 3))

    def forward(self, x):
        return x + self.table


@pytest.mark.parametrize("net, match", [
    (_Weights(), r"'getitem_1'.*attention weights"),
    (_TwoReads(), "'table' is read in two different ways"),
    (_PerExample(), "'table' differs along the batch axis"),
])
def test_what_is_not_converted_is_refused_by_node(net, match):
    x = torch.randn(2, 5, 8) if isinstance(net, _Weights) else torch.randn(2, 3)
    with pytest.raises(ValueError, match=match):
        convert_torch(net, x)
