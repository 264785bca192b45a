"""Keras's DepthwiseConv1D/2D and SeparableConv1D/2D (layers/separable.py).

Keras semantics relied on (Keras itself is not a dependency):
- DepthwiseConv2D(kernel_size, depth_multiplier=m) convolves each input channel c with its
  own m filters; output channel c * m + j; weights ``depthwise_kernel`` (KH, KW, C, m) and
  a bias (C * m,) -> KH*KW*C*m + C*m parameters;
- SeparableConv2D(filters, kernel_size, depth_multiplier=m) is that depthwise convolution
  (no bias) then a 1x1 convolution to ``filters`` channels with the bias and the
  activation: KH*KW*C*m + C*m*filters + filters parameters (``pointwise_kernel``
  (1, 1, C*m, filters), ``bias`` (filters,));
- both start their bias at zero.
The torch reference: ``Conv2d(C, C*m, k, groups=C, bias=False)`` then ``Conv2d(C*m, F, 1)``.
"""

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

import handgrad as hg
from handgrad import layers as L
from handgrad.io import export_onnx
from handgrad.model import Sequential
from handgrad.testing import assert_close, gradcheck

from optional_torch import F, needs_torch, torch
from tolerances_composite import network_bounds

RNG = np.random.default_rng(0)


@pytest.mark.parametrize(("make", "shape", "expected"), [
    # by hand, as Keras's summary counts them
    (lambda: L.DepthwiseConv2D(3, depth_multiplier=2), (8, 8, 3), 3 * 3 * 3 * 2 + 3 * 2),
    (lambda: L.DepthwiseConv2D(3, use_bias=False), (8, 8, 4), 3 * 3 * 4),
    (lambda: L.DepthwiseConv1D(5, depth_multiplier=3), (9, 2), 5 * 2 * 3 + 2 * 3),
    (lambda: L.SeparableConv2D(16, 3), (8, 8, 3), 3 * 3 * 3 + 3 * 16 + 16),
    (lambda: L.SeparableConv2D(8, 3, depth_multiplier=2, use_bias=False), (8, 8, 3),
     3 * 3 * 3 * 2 + 6 * 8),
    (lambda: L.SeparableConv1D(4, 3), (9, 5), 3 * 5 + 5 * 4 + 4),
])
def test_parameter_counts_are_keras(make, shape, expected):
    layer = make().build(shape)
    assert layer.count_params() == expected


def test_weights_are_named_and_shaped_as_documented():
    layer = L.SeparableConv2D(filters=8, kernel_size=3, depth_multiplier=2).build((8, 8, 3))
    shapes = {k: v.shape for k, v in layer.named_parameters().items()}
    assert shapes == {"depthwise.W": (3, 3, 1, 6), "pointwise.W": (1, 1, 6, 8),
                      "pointwise.b": (8,)}
    assert not layer.named_parameters()["pointwise.b"].any()  # Keras's zero bias


@needs_torch
@pytest.mark.parametrize(("strides", "padding", "multiplier", "dilation"), [
    (1, "valid", 1, 1), (2, "valid", 2, 1), (1, "same", 3, 1), (1, "valid", 2, 2)])
def test_separable_matches_torch_grouped_then_pointwise(strides, padding, multiplier,
                                                        dilation):
    channels, filters = 3, 5
    layer = L.SeparableConv2D(filters, 3, strides=strides, padding=padding,
                              depth_multiplier=multiplier, dilation=dilation,
                              activation="relu", dtype="float64", seed=1)
    x = RNG.standard_normal((2, 9, 9, channels))
    y = layer.forward(x)
    dy = RNG.standard_normal(y.shape)
    dx = layer.backward(dy)
    params = layer.named_parameters()
    xt = torch.tensor(x.transpose(0, 3, 1, 2), requires_grad=True)
    # handgrad's (KH, KW, Cg, C_out) -> torch's (C_out, Cg, KH, KW)
    wd = torch.tensor(params["depthwise.W"].transpose(3, 2, 0, 1), requires_grad=True)
    wp = torch.tensor(params["pointwise.W"].transpose(3, 2, 0, 1), requires_grad=True)
    b = torch.tensor(params["pointwise.b"], requires_grad=True)
    h = F.conv2d(xt, wd, None, stride=strides, padding=padding, dilation=dilation,
                 groups=channels)
    yt = F.relu(F.conv2d(h, wp, b))
    yt.backward(torch.tensor(dy.transpose(0, 3, 1, 2)))
    tol = dict(dtype=np.float64, terms=9 * channels * multiplier)
    assert_close(y, yt.detach().numpy().transpose(0, 2, 3, 1), **tol)
    assert_close(dx, xt.grad.numpy().transpose(0, 2, 3, 1), **tol, scale=np.abs(dy).max())
    grads = layer.named_gradients()
    assert_close(grads["depthwise.W"], wd.grad.numpy().transpose(2, 3, 1, 0), **tol,
                 scale=float(np.abs(x).max() * np.abs(dy).max() * y.size))
    assert_close(grads["pointwise.W"], wp.grad.numpy().transpose(2, 3, 1, 0), **tol,
                 scale=float(np.abs(h.detach().numpy()).max() * np.abs(dy).max() * y.size))
    assert_close(grads["pointwise.b"], b.grad.numpy(), **tol, scale=float(np.abs(dy).sum()))


@pytest.mark.parametrize("make", [
    lambda: L.SeparableConv2D(3, 3, padding="same", activation="tanh", dtype="float64"),
    lambda: L.SeparableConv1D(2, 3, strides=2, depth_multiplier=2, activation="sigmoid",
                              dtype="float64"),
    lambda: L.DepthwiseConv2D(3, depth_multiplier=2, activation="tanh", dtype="float64"),
])
def test_fused_activation_gradients_match_finite_differences(make):
    layer = make()
    rank = layer.pointwise.rank if hasattr(layer, "pointwise") else layer.rank
    x = RNG.standard_normal((2, *(6,) * rank, 2))
    assert gradcheck(layer, x, rng=0).passed


def test_save_and_load_restore_config_and_weights(tmp_path):
    model = Sequential([L.SeparableConv2D(4, 3, depth_multiplier=2, activation="relu",
                                          input_shape=(8, 8, 3)),
                        L.DepthwiseConv2D(3, strides=2, padding="same"),
                        L.GlobalAveragePooling2D(), L.Dense(2)], seed=0)
    x = RNG.standard_normal((3, 8, 8, 3)).astype(np.float32)
    model.save(tmp_path / "m.safetensors")
    loaded = hg.load_model(tmp_path / "m.safetensors")
    assert [type(layer) for layer in loaded.layers] == [type(layer) for layer in model.layers]
    assert loaded.layers[0].get_config() == model.layers[0].get_config()
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), model.predict(x, verbose=0))


def test_onnx_export_is_two_conv_nodes_matching_predict():
    model = Sequential([L.SeparableConv2D(4, 3, depth_multiplier=2, padding="same",
                                          activation="relu"),
                        L.DepthwiseConv2D(3, strides=2)], seed=0)
    model.build((7, 7, 3))
    x = RNG.standard_normal((2, 7, 7, 3)).astype(np.float32)
    proto = export_onnx(model, None)
    onnx.checker.check_model(proto, full_check=True)
    convs = [node for node in proto.graph.node if node.op_type == "Conv"]
    groups = [next(a.i for a in node.attribute if a.name == "group") for node in convs]
    assert groups == [3, 1, 4]  # depthwise on 3 channels, pointwise, depthwise on 4
    got = ReferenceEvaluator(proto).run(None, {"input": x})[0]
    terms, scale = network_bounds(model, x)
    assert_close(got, model.predict(x, verbose=0), dtype=np.float32, terms=terms, scale=scale)


@pytest.mark.parametrize(("make", "error", "match"), [
    (lambda: L.DepthwiseConv2D(3, depth_multiplier=0), ValueError, "depth_multiplier"),
    (lambda: L.DepthwiseConv2D(3, filters=4), TypeError, "unexpected argument 'filters'"),
    (lambda: L.SeparableConv2D(0, 3), ValueError, "out_channels"),
    (lambda: L.SeparableConv2D(4, 3, activation="relux"), ValueError, "did you mean 'relu'"),
    (lambda: L.SeparableConv2D(4, 3, filters=4), TypeError, "both 'filters'"),
])
def test_bad_arguments_are_refused_by_name(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_wrong_rank_input_is_refused_by_name():
    with pytest.raises(ValueError, match=r"expects per-example inputs \(H, W, C\)"):
        L.SeparableConv2D(4, 3).forward(np.zeros((2, 5, 3), np.float32))
