"""torchvision's Swin Transformer through convert_torch (its fx-wrapped window attention
and patch merging built from handgrad layers): outputs, input and parameter gradients by
torch's names against torch autograd, in evaluation and training mode, float64 and
float32; Swin V2 and the ONNX export are refused with the node named. Skips without
torchvision."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from handgrad.io import convert_torch, from_torch  # noqa: E402
from handgrad.io.torch_convert_swin import shift_mask  # noqa: E402
from handgrad.testing import assert_close  # noqa: E402
from torchvision_support import (  # noqa: E402
    away_from_init,
    check,
    has_randomness,
    torch_model,
    torchvision,
)

# 24 pixels: 6 x 6 patches padded to 8 x 8 windows and shifted, merged to 3 x 3 (padded
# to 4 x 4 for the next merge), then 2 x 2: every branch of the attention and merging
SMALL = {"patch_size": [4, 4], "embed_dim": 16, "depths": [2, 2, 2], "num_heads": [2, 2, 4],
         "window_size": [4, 4], "stochastic_depth_prob": 0.0, "num_classes": 10}

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # torch on one thread


def small_swin(dtype=torch.float64, **kwargs):
    swin = torchvision().models.swin_transformer
    torch.manual_seed(0)
    net = away_from_init(swin.SwinTransformer(**{**SMALL, **kwargs}).to(dtype).eval())
    return net, torch.randn(2, 3, 24, 24, dtype=dtype)


def test_small_swin_matches_torch_in_float64():
    net, x = small_swin()
    check(net, x, convert_torch(net, x))


def test_small_swin_training_step_matches_torch():
    net, x = small_swin()
    assert not has_randomness(net)  # no dropout, stochastic depth 0: a deterministic step
    check(net, x, convert_torch(net, x), training=True)


def test_small_swin_in_float32_is_within_float32_tolerance():
    net, x = small_swin(torch.float32)
    model = convert_torch(net, x)
    assert str(model.dtype) == "float32"
    check(net, x, model)


def test_swin_t_matches_torch_in_float64():
    net, x = torch_model("swin_t")  # its stochastic depth (0.2): StochasticDepth layers
    model = convert_torch(net, x)
    assert any(type(layer).__name__ == "StochasticDepth" for layer in model.layers)
    check(net, x, model)


def test_converted_swin_loads_a_later_checkpoint():
    net, x = small_swin()
    model = convert_torch(net, x)
    later, _ = small_swin()
    with torch.no_grad():
        for p in later.parameters():
            p.add_(0.1 * torch.randn_like(p))
    # the state dict holds relative_position_index, a buffer folded into the bias's index
    assert any(k.endswith("relative_position_index") for k in later.state_dict())
    from_torch(later.state_dict(), model)
    y = model.forward(x.permute(0, 2, 3, 1).numpy(), training=False)
    assert_close(y, later(x).detach().numpy(), dtype=np.float64)


def test_shift_mask_separates_the_rolled_regions():
    mask = shift_mask(8, 8, [4, 4], [2, 2])
    assert mask.shape == (4, 16, 16)
    assert (mask[0] == 0).all()  # the top-left window holds one region
    # the bottom-right window holds four regions of 2 x 2 tokens; token 0 sees its own
    assert (mask[3][0] == -100).sum() == 12 and mask[3][0][[0, 1, 4, 5]].tolist() == [0] * 4


def test_swin_v2_is_refused_with_the_node_named():
    swin = torchvision().models.swin_transformer
    net, x = small_swin(block=swin.SwinTransformerBlockV2,
                        downsample_layer=swin.PatchMergingV2)
    # its continuous position bias (an MLP of a coordinate table) is met first
    with pytest.raises(ValueError, match=r"node '\w+' .* in module 'features\.1\.0\.attn"):
        convert_torch(net, x)


def test_relative_position_bias_used_elsewhere_is_refused():
    swin = torchvision().models.swin_transformer

    class Leaky(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = swin.ShiftedWindowAttention(8, [2, 2], [0, 0], 2)

        def forward(self, x):
            return self.attn(x) + self.attn.get_relative_position_bias().sum()

    net = Leaky().double()
    with pytest.raises(ValueError, match=r"sum of the parameter "
                                         r"'attn\.relative_position_bias_table' computes"):
        convert_torch(net, torch.randn(2, 4, 4, 8, dtype=torch.float64))
