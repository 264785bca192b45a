"""Keras's constructor spellings: ``activation=``, Keras's argument names, Keras's class
names as aliases, ``input_shape=`` on the first layer, and the misspelling messages.

Keras semantics relied on (Keras is not a dependency): ``Dense(units, activation=f)``
computes ``f(x W + b)``; a Keras layer's bias starts at zero ("zeros"); Keras's
BatchNormalization updates ``moving = momentum * moving + (1 - momentum) * batch``
(momentum 0.99, epsilon 1e-3); LayerNormalization's epsilon is 1e-3; UpSampling2D
repeats rows and columns ``size`` times (nearest); ZeroPadding2D's padding is
``((top, bottom), (left, right))``; MaxPooling2D/AveragePooling2D's pool_size is 2 and
strides default to it.
"""

from __future__ import annotations

import numpy as np
import pytest

from handgrad import Sequential
from handgrad import layers as L
from handgrad.layers.keras_args import accepted_names
from handgrad.testing import assert_close, gradcheck

RNG = np.random.default_rng(25)


def _x(*shape):
    return RNG.standard_normal(shape)


def _copy_weights(src, dst):
    for key, value in src.parameters.items():
        dst.parameters[key][...] = value


CONVS = [(L.Dense, (4,), (5, 3)), (L.Conv1D, (3, 2), (2, 6, 2)),
         (L.Conv2D, (3, 2), (2, 5, 5, 2)), (L.Conv3D, (2, 2), (2, 4, 4, 3, 2)),
         (L.ConvTranspose1D, (3, 2), (2, 5, 2)), (L.ConvTranspose2D, (2, 3, 2), (2, 3, 4, 2)),
         (L.ConvTranspose3D, (2, 2), (2, 3, 3, 2, 2))]


@pytest.mark.parametrize("activation, separate", [("relu", L.ReLU), ("tanh", L.Tanh),
                                                  ("softmax", L.Softmax), ("swish", L.SiLU)])
@pytest.mark.parametrize("cls, args, shape", CONVS)
def test_fused_activation_equals_layer_then_activation(cls, args, shape, activation, separate):
    x = _x(*shape)
    fused = cls(*args, activation=activation, dtype="float64")
    plain, act = cls(*args, dtype="float64"), separate()
    fused.build(shape[1:])
    plain.build(shape[1:])
    _copy_weights(fused, plain)
    y = fused.forward(x)
    z = plain.forward(x)
    np.testing.assert_array_equal(y, act.forward(z))
    dy = _x(*y.shape)
    dx = fused.backward(dy)
    np.testing.assert_array_equal(dx, plain.backward(act.backward(dy)))
    for key in fused.gradients:
        np.testing.assert_array_equal(fused.gradients[key], plain.gradients[key])


def test_dense_64_relu_forward_backward():
    x = _x(8, 5)
    fused, plain = L.Dense(64, activation="relu", dtype="float64"), L.Dense(64, dtype="float64")
    fused.build((5,))
    plain.build((5,))
    _copy_weights(fused, plain)
    z = x @ plain.parameters["W"] + plain.parameters["b"]
    assert_close(fused.forward(x), np.maximum(z, 0.0), terms=5)
    dy = _x(8, 64)
    dz = dy * (z > 0)
    assert_close(fused.backward(dy), dz @ plain.parameters["W"].T, terms=64)
    assert_close(fused.gradients["W"], x.T @ dz, terms=8)


@pytest.mark.parametrize("layer, shape", [
    (lambda: L.Dense(3, activation="gelu"), (4, 5)),
    (lambda: L.Conv2D(2, 3, activation="softmax", padding="same"), (2, 4, 4, 2)),
    (lambda: L.ConvTranspose1D(2, 3, stride=2, activation="elu"), (2, 3, 2)),
])
def test_gradcheck_with_activation(layer, shape):
    layer = layer()
    layer.build(shape[1:], rng=0, dtype="float64")
    assert gradcheck(layer, _x(*shape), rng=1).passed


def test_activation_config_round_trip_summary_and_onnx(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx.reference import ReferenceEvaluator

    from handgrad.io import export_onnx
    model = Sequential([L.Conv2D(3, 3, activation="relu"), L.Flatten(),
                        L.Dense(4, activation="sigmoid")], input_shape=(5, 5, 2), seed=0)
    config = model.get_config()
    assert config["layers"][2]["config"]["activation"] == "sigmoid"
    again = Sequential.from_config(config)
    for a, b in zip(again.layers, model.layers):
        _copy_weights(b, a)
    x = _x(2, 5, 5, 2).astype(np.float32)
    np.testing.assert_array_equal(again.predict(x), model.predict(x))
    lines = []
    model.summary(print_fn=lines.append)
    assert "(Dense, sigmoid)" in "\n".join(lines) and "(Conv2D, relu)" in "\n".join(lines)
    path = tmp_path / "m.onnx"
    export_onnx(model, path)
    proto = onnx.load(str(path))
    kinds = [node.op_type for node in proto.graph.node]
    assert "Relu" in kinds and kinds[-1] == "Sigmoid"
    got = ReferenceEvaluator(proto).run(None, {proto.graph.input[0].name: x})[0]
    assert_close(got, model.predict(x), terms=50)


def test_activation_double_backward_is_refused_clearly():
    layer = L.Dense(2, activation="tanh", dtype="float64")
    assert not layer.supports_double_backward()
    layer.forward(_x(3, 2))
    with pytest.raises(TypeError, match="activation='tanh'"):
        layer.double_backward(_x(3, 2), _x(3, 2))


def test_unknown_activation_names_close_matches():
    with pytest.raises(ValueError, match=r"'rellu'.*'relu'"):
        L.Dense(3, activation="rellu")


@pytest.mark.parametrize("keras, handgrad", [
    (lambda: L.Dense(units=4, use_bias=False), lambda: L.Dense(4, bias=False)),
    (lambda: L.Conv2D(filters=3, kernel_size=2, strides=2), lambda: L.Conv2D(3, 2, stride=2)),
    (lambda: L.MaxPool2D(pool_size=3, strides=1), lambda: L.MaxPool2D(3, stride=1)),
    (lambda: L.BatchNorm(epsilon=1e-3), lambda: L.BatchNorm(eps=1e-3)),
    (lambda: L.Reshape(target_shape=(2, 3)), lambda: L.Reshape((2, 3))),
    (lambda: L.LSTM(units=3), lambda: L.LSTM(3)),
    (lambda: L.Conv2D(3, 2, data_format="channels_last"), lambda: L.Conv2D(3, 2)),
])
def test_keras_argument_names(keras, handgrad):
    got, expected = keras().get_config(), handgrad().get_config()
    if "bias_initializer" in got and got is not expected:
        assert got.pop("bias_initializer") in ("zeros", "torch_default")
        expected.pop("bias_initializer")
    assert got == expected


def test_keras_spelling_gives_keras_zero_bias():
    keras, torch_like = L.Dense(units=4), L.Dense(4)
    keras.build((3,), rng=0)
    torch_like.build((3,), rng=0)
    assert not keras.parameters["b"].any() and torch_like.parameters["b"].any()
    assert L.Conv2D(filters=2, kernel_size=3, bias_initializer="ones").bias_initializer == "ones"


def test_both_spellings_of_one_argument_refused():
    with pytest.raises(TypeError, match=r"'units'.*'out_features'"):
        L.Dense(out_features=3, units=4)
    with pytest.raises(TypeError, match=r"'units'.*'out_features'"):
        L.Dense(3, units=4)


def test_channels_first_refused():
    with pytest.raises(ValueError, match="channels_first"):
        L.Conv2D(3, 2, data_format="channels_first")
    with pytest.raises(TypeError, match="data_format"):
        L.Dense(3, data_format="channels_last")


def test_misspelling_names_close_matches():
    with pytest.raises(TypeError, match=r"unexpected argument 'unit'; did you mean 'units'"):
        L.Dense(unit=3)
    with pytest.raises(TypeError, match=r"'stides'.*'strides'"):
        L.MaxPooling2D(stides=1)


@pytest.mark.parametrize("name", sorted(L.REGISTRY))
def test_every_constructor_names_an_unknown_argument(name):
    cls = L.REGISTRY[name]
    if name == "Identity":  # torch's Identity takes and ignores any argument
        assert accepted_names(cls) is None
        return
    with pytest.raises(TypeError, match="zz_unknown"):
        cls(zz_unknown=1)


def _same_output(a, b, shape, training=False):
    x = _x(*shape)
    a.build(shape[1:], rng=0, dtype="float64")
    b.build(shape[1:], rng=0, dtype="float64")
    _copy_weights(a, b)
    np.testing.assert_array_equal(a.forward(x, training=training),
                                  b.forward(x, training=training))
    return a, b


@pytest.mark.parametrize("alias, layer, shape", [
    (lambda: L.MaxPooling1D(), lambda: L.MaxPool1D(2), (2, 6, 3)),
    (lambda: L.MaxPooling2D(pool_size=(2, 3), padding="same"),
     lambda: L.MaxPool2D((2, 3), padding="same"), (2, 5, 5, 2)),
    (lambda: L.MaxPooling3D(), lambda: L.MaxPool3D(2), (1, 4, 4, 4, 2)),
    (lambda: L.AveragePooling1D(3, strides=1), lambda: L.AvgPool1D(3, 1), (2, 6, 3)),
    (lambda: L.AveragePooling2D(), lambda: L.AvgPool2D(2), (2, 4, 4, 2)),
    (lambda: L.AveragePooling3D(), lambda: L.AvgPool3D(2), (1, 4, 4, 4, 2)),
    (lambda: L.GlobalAveragePooling1D(), lambda: L.GlobalAvgPool1D(), (2, 5, 3)),
    (lambda: L.GlobalAveragePooling2D(), lambda: L.GlobalAvgPool2D(), (2, 3, 4, 3)),
    (lambda: L.GlobalAveragePooling3D(), lambda: L.GlobalAvgPool3D(), (1, 2, 3, 4, 3)),
    (lambda: L.GlobalMaxPooling1D(), lambda: L.GlobalMaxPool1D(), (2, 5, 3)),
    (lambda: L.GlobalMaxPooling2D(), lambda: L.GlobalMaxPool2D(), (2, 3, 4, 3)),
    (lambda: L.GlobalMaxPooling3D(), lambda: L.GlobalMaxPool3D(), (1, 2, 3, 4, 3)),
    (lambda: L.Conv1DTranspose(2, 3), lambda: L.ConvTranspose1D(2, 3), (2, 4, 3)),
    (lambda: L.Conv2DTranspose(filters=2, kernel_size=3, strides=2),
     lambda: L.ConvTranspose2D(2, 3, 2), (2, 3, 3, 2)),
    (lambda: L.Conv3DTranspose(2, 2), lambda: L.ConvTranspose3D(2, 2), (1, 2, 2, 2, 2)),
    (lambda: L.LayerNormalization(), lambda: L.LayerNorm(eps=1e-3), (2, 5)),
    (lambda: L.BatchNormalization(), lambda: L.BatchNorm(0.01, 1e-3), (4, 3)),
    (lambda: L.Activation("relu"), lambda: L.ReLU(), (3, 4)),
    (lambda: L.Activation("softmax"), lambda: L.Softmax(), (3, 4)),
    (lambda: L.UpSampling1D(3), lambda: L.Upsample(scale_factor=(3,)), (2, 4, 2)),
    (lambda: L.UpSampling2D(interpolation="bilinear"),
     lambda: L.Upsample(scale_factor=(2, 2), mode="bilinear"), (2, 3, 3, 2)),
    (lambda: L.UpSampling3D(), lambda: L.Upsample(scale_factor=(2, 2, 2)), (1, 2, 2, 2, 1)),
    (lambda: L.ZeroPadding1D((1, 2)), lambda: L.ZeroPad1D((1, 2)), (2, 4, 2)),
    (lambda: L.ZeroPadding2D(((1, 0), (0, 2))), lambda: L.ZeroPad2D((0, 2, 1, 0)), (2, 3, 3, 2)),
    (lambda: L.ZeroPadding3D(1), lambda: L.ZeroPad3D(1), (1, 2, 2, 2, 1)),
])
def test_alias_builds_the_same_layer_and_round_trips(alias, layer, shape):
    a, _ = _same_output(alias(), layer(), shape, training=True)
    again = type(a).from_config(a.get_config())
    assert type(again) is type(a) and again.get_config() == a.get_config()
    _same_output(again, a, shape)


def test_spatial_dropout_is_channel_dropout():
    x = np.ones((4, 6, 6, 8))
    y = L.SpatialDropout2D(0.5, seed=3).forward(x)
    assert set(np.unique(y)) <= {0.0, 2.0}
    assert (y == y[:, :1, :1, :]).all()  # whole channels: constant over the map


def test_keras_layout_spellings_by_hand():
    x = _x(2, 3, 4, 2)
    np.testing.assert_array_equal(L.UpSampling2D(size=(2, 3)).forward(x),
                                  x.repeat(2, axis=1).repeat(3, axis=2))
    np.testing.assert_array_equal(L.ZeroPadding2D(((1, 0), (0, 2))).forward(x),
                                  np.pad(x, ((0, 0), (1, 0), (0, 2), (0, 0))))
    with pytest.raises(TypeError, match="padding"):
        L.ZeroPadding2D((1, 2, 3))


def test_batch_normalization_keras_momentum_against_keras_formula():
    layer = L.BatchNormalization(momentum=0.9, dtype="float64")
    assert layer.get_config()["momentum"] == 0.9
    mean, var = np.zeros(3), np.ones(3)
    for _ in range(3):
        x = _x(16, 3) * 2 + 1
        layer.forward(x)
        # Keras: moving = momentum * moving + (1 - momentum) * batch; the variance is
        # handgrad's (torch's) unbiased batch estimate, where Keras takes the biased one
        mean = 0.9 * mean + 0.1 * x.mean(0)
        var = 0.9 * var + 0.1 * x.var(0, ddof=1)
    assert_close(layer.buffers["running_mean"], mean, terms=16)
    assert_close(layer.buffers["running_var"], var, terms=16)


def test_input_shape_on_first_layer_builds_the_sequential():
    model = Sequential([L.Dense(8, activation="relu", input_shape=(4,)), L.Dense(2)])
    assert model.built and model.input_shape == (4,)
    assert model.count_params() == 4 * 8 + 8 + 8 * 2 + 2
    lines = []
    model.summary(print_fn=lines.append)
    assert "(Dense, relu)" in "\n".join(lines)
    with pytest.raises(TypeError, match="input_shape"):
        L.Dense(3, input_shape=3)


# ------------------------------------------- Embedding's, the regularizers' and utils' names
def test_embedding_takes_keras_input_dim_and_output_dim():
    keras = L.Embedding(input_dim=50, output_dim=8, seed=0)
    own = L.Embedding(50, 8, seed=0)
    ids = np.array([[1, 4, 49]])
    np.testing.assert_array_equal(keras.forward(ids, training=False),
                                  own.forward(ids, training=False))
    with pytest.raises(TypeError, match="output_dim"):
        L.Embedding(50, embedding_dim=8, output_dim=8)


def test_lower_case_regularizers_and_to_categorical_as_keras():
    from handgrad import regularizers
    from handgrad.data import to_categorical

    assert isinstance(regularizers.l2(0.1), regularizers.L2)
    both = regularizers.l1_l2()  # Keras: l1=0.01, l2=0.01
    w = np.array([1.0, -2.0])
    assert both(w) == pytest.approx(0.01 * 3.0 + 0.01 * 5.0)
    # Keras: a trailing axis of 1 is dropped; classes from the largest label; float32 rows
    onehot = to_categorical(np.array([[2], [0], [1]]))
    np.testing.assert_array_equal(onehot, np.eye(3, dtype=np.float32)[[2, 0, 1]])
    assert onehot.dtype == np.float32
    assert to_categorical([1, 0], num_classes=4).shape == (2, 4)
    with pytest.raises(ValueError, match="num_classes"):
        to_categorical([3], num_classes=2)
    with pytest.raises(TypeError, match="integer class labels"):
        to_categorical([0.5])
