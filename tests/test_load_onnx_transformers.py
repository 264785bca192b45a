"""load_onnx on torchvision's transformers (torch.onnx.export, TorchScript exporter, opset
17): a small VisionTransformer (batch moved off axis 0 and merged into the heads by
nn.MultiheadAttention) and a small SwinTransformer (batch folded into the windows, shift
mask, relative position bias) against torch autograd: float64 eval and training (no
randomness: dropout and stochastic depth 0), float32 eval; swin_t once at 32 px. Also the
refusals of what grouped layouts cannot hold. Skips without torchvision."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
torch = pytest.importorskip("torch")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from handgrad.io import load_onnx  # noqa: E402
from torchvision_support import (  # noqa: E402
    away_from_init,
    check,
    onnx_export,
    torch_model,
    torchvision,
)


def small(name, dtype):
    tv = torchvision()
    torch.manual_seed(0)
    if name == "vit":
        net = tv.models.vision_transformer.VisionTransformer(
            image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64,
            mlp_dim=128)
    else:
        net = tv.models.swin_transformer.SwinTransformer(
            patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4],
            window_size=[4, 4], stochastic_depth_prob=0.0)
    net = away_from_init(net.to(dtype).eval())
    return net, torch.randn(2, 3, 32, 32, dtype=dtype)


@pytest.mark.parametrize("name", ["vit", "swin"])
@pytest.mark.parametrize("dtype, training", [(torch.float64, False), (torch.float64, True),
                                             (torch.float32, False)])
def test_small_transformer_matches_torch(name, dtype, training, one_torch_thread):
    net, x = small(name, dtype)
    model = load_onnx(onnx_export(net, x))
    names = {layer.name for layer in model.layers}
    if name == "vit":  # the class token and position embedding keep torch's names
        assert {"class_token", "encoder.pos_embedding"} <= names
    check(net, x, model, training=training)


def test_swin_t_matches_torch_in_float64(one_torch_thread):
    net, x = torch_model("swin_t")
    check(net, x, load_onnx(onnx_export(net, x)))


def _graph(nodes, out_shape, inits=()):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, out_shape)],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_batch_moved_then_restored_is_bookkeeping():
    """(2, 3, 4) -> Transpose -> (3, 2, 4) -> Reshape (3*2, 4) -> Reshape (3, 2, 4) ->
    Transpose back: the same tensor, no layer in between."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
             helper.make_node("Reshape", ["t", "s1"], ["r"]),
             helper.make_node("Reshape", ["r", "s2"], ["r2"]),
             helper.make_node("Transpose", ["r2"], ["y"], perm=[1, 0, 2])]
    model = load_onnx(_graph(nodes, [2, 3, 4], [("s1", np.array([6, 4])),
                                                  ("s2", np.array([3, 2, 4]))]))
    x = np.random.default_rng(0).normal(size=(2, 4, 3))  # channels last: ONNX (2, 3, 4)
    np.testing.assert_array_equal(model.forward(x), x)
    assert model.layers == []


def test_split_of_the_batch_is_refused_naming_the_node():
    """(2, 3, 4) -> (4, 6) splits no axis evenly: the batch of 2 would need a split."""
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="split_batch")]
    with pytest.raises(ValueError, match=r"Reshape node 'split_batch'.*moves the batch"):
        load_onnx(_graph(nodes, [4, 6], [("s", np.array([4, 6]))]))


def test_operator_on_merged_batch_is_refused_naming_the_node():
    """A Conv-free op that needs the batch alone first (Concat) after a merge."""
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0, 2]),
             helper.make_node("Reshape", ["t", "s"], ["r"]),
             helper.make_node("Concat", ["r", "r"], ["y"], axis=1, name="cat")]
    with pytest.raises(ValueError, match=r"Concat node 'cat'.*batch merged"):
        load_onnx(_graph(nodes, [3, 16], [("s", np.array([3, 8]))]))


def test_failed_fold_is_refused_naming_the_node():
    """A constant (2, 1, 4) expanded to the Shape of an input with a symbolic batch (folded
    to -1) has a batch of its own: no Parameter, and computing it at load time fails; the
    error names the node and its constants (it was NumPy's 'negative dimensions')."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Expand", ["c", "s"], ["e"], name="expand_c"),
             helper.make_node("Add", ["x", "e"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.DOUBLE, ["N", 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, ["N", 3, 4])],
        [numpy_helper.from_array(np.ones((2, 1, 4)), "c")])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ValueError, match=r"Expand node 'expand_c'.*load time.*\[-1, 3, 4\]"):
        load_onnx(proto)
