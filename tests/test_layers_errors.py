"""Bad input to layers: every bad constructor argument, bad input at build time and
a bad upstream gradient raises ValueError/TypeError naming the argument and the
received value (never an assert or a bare NumPy error)."""

import numpy as np
import pytest

from handgrad import layers as L
from handgrad.testing import LAYER_CASES


def bad(cls, kwargs, exc, *fragments, owner=True, base=None):
    """A constructor call ``cls(**base, **kwargs)`` expected to raise ``exc`` whose message
    contains every fragment (and the class name when the layer itself validates)."""
    arg, value = next(iter(kwargs.items()))
    shown = fragments or (f"'{arg}'", repr(value))
    if owner:
        shown = (cls.__name__, *shown)
    label = f"{cls.__name__}-{'-'.join(f'{k}={v!r}' for k, v in kwargs.items())}"
    return pytest.param(cls, {**(base or {}), **kwargs}, exc, shown, id=label)


def conv_cases(cls):
    rank = cls.rank
    base = {"out_channels": 4, "kernel_size": 3}
    cases = [
        bad(cls, {"out_channels": 0}, ValueError, "'out_channels'", "received 0"),
        bad(cls, {"out_channels": 2.5}, TypeError),
        bad(cls, {"kernel_size": -1}, ValueError),
        bad(cls, {"kernel_size": (3,) * (rank + 1)}, TypeError),
        bad(cls, {"stride": 0}, ValueError, "'stride'", "received 0"),
        bad(cls, {"dilation": 0}, ValueError, "'dilation'", "received 0"),
        bad(cls, {"padding": "full"}, ValueError),
        bad(cls, {"padding": -1}, ValueError),
        bad(cls, {"groups": 0}, ValueError, "'groups'", "received 0"),
        bad(cls, {"groups": 3}, ValueError, "'out_channels'", "(4)", "groups (3)"),
        bad(cls, {"bias": "yes"}, TypeError),
        bad(cls, {"name": 3}, TypeError),
        bad(cls, {"dtype": "int32"}, TypeError),
        bad(cls, {"dtype": "float16"}, TypeError),
        bad(cls, {"trainable": "no"}, TypeError),
        bad(cls, {"kernel_initializer": "nope"}, ValueError),
        bad(cls, {"bias_initializer": 3}, TypeError),
        bad(cls, {"seed": 1.5}, TypeError),
    ]
    if cls.transposed:
        cases.append(bad(cls, {"output_padding": -1}, ValueError))
        cases.append(bad(cls, {"padding_mode": "reflect"}, ValueError, "'padding_mode'",
                         "'zeros'", "transposed", "received 'reflect'"))
    else:
        cases.append(bad(cls, {"padding_mode": "mirror"}, ValueError, "'padding_mode'",
                         "'circular'", "received 'mirror'"))
    if cls is not L.Conv1D:
        cases.append(bad(cls, {"padding": "causal"}, ValueError))
    return [pytest.param(*p.values[:1], {**base, **p.values[1]}, *p.values[2:], id=p.id)
            for p in cases]


CONSTRUCTOR_CASES = [
    *conv_cases(L.Conv1D),
    *conv_cases(L.Conv2D),
    *conv_cases(L.ConvTranspose1D),
    *conv_cases(L.ConvTranspose2D),
    *conv_cases(L.Conv3D),
    *conv_cases(L.ConvTranspose3D),
    bad(L.Dense, {"out_features": 0}, ValueError, "'out_features'", "received 0"),
    bad(L.Dense, {"out_features": 2.5}, TypeError),
    bad(L.Dense, {"out_features": "3"}, TypeError),
    bad(L.Dense, {"bias": "yes"}, TypeError, base={"out_features": 2}),
    bad(L.Dense, {"name": 3}, TypeError, base={"out_features": 2}),
    bad(L.Dense, {"dtype": "int32"}, TypeError, base={"out_features": 2}),
    bad(L.Dense, {"kernel_initializer": "nope"}, ValueError, base={"out_features": 2}),
    bad(L.Dense, {"bias_initializer": 3.5}, TypeError, base={"out_features": 2}),
    bad(L.Dropout, {"rate": 1.0}, ValueError),
    bad(L.Dropout, {"rate": -0.1}, ValueError),
    bad(L.Dropout, {"rate": "a"}, TypeError),
    bad(L.Dropout, {"rate": True}, TypeError),
    bad(L.Dropout, {"seed": 1.5}, TypeError, base={"rate": 0.5}),
    bad(L.Dropout, {"name": 3}, TypeError, base={"rate": 0.5}),
    bad(L.Reshape, {"shape": (0,)}, ValueError),
    bad(L.Reshape, {"shape": (-1, -1)}, ValueError),
    bad(L.Reshape, {"shape": (3, -2)}, ValueError),
    bad(L.Reshape, {"shape": "a"}, TypeError),
    bad(L.Reshape, {"shape": (2.0,)}, TypeError),
    bad(L.Reshape, {"name": 3}, TypeError, base={"shape": (2,)}),
    bad(L.Flatten, {"name": 3}, TypeError),
    bad(L.MaxPool2D, {"kernel_size": 0}, ValueError, owner=False),
    bad(L.MaxPool2D, {"stride": 0}, ValueError, "'stride'", "received 0", owner=False,
        base={"kernel_size": 2}),
    bad(L.MaxPool2D, {"padding": -1}, ValueError, owner=False, base={"kernel_size": 2}),
    bad(L.MaxPool2D, {"padding": 2}, ValueError, "'padding'", "received 2", owner=False,
        base={"kernel_size": 2}),
    bad(L.MaxPool2D, {"dilation": 0}, ValueError, "'dilation'", "received 0", owner=False,
        base={"kernel_size": 2}),
    bad(L.MaxPool2D, {"ceil_mode": "yes"}, TypeError, owner=False, base={"kernel_size": 2}),
    bad(L.MaxPool2D, {"name": 3}, TypeError, base={"kernel_size": 2}),
    bad(L.MaxPool1D, {"kernel_size": 2.5}, TypeError, owner=False),
    bad(L.AvgPool1D, {"count_include_pad": "yes"}, TypeError, owner=False,
        base={"kernel_size": 2}),
    bad(L.AvgPool2D, {"kernel_size": (2, 2, 2)}, TypeError, owner=False),
    bad(L.AvgPool2D, {"padding": "full"}, ValueError, owner=False, base={"kernel_size": 2}),
    bad(L.GlobalMaxPool2D, {"keepdims": "yes"}, TypeError, owner=False),
    bad(L.GlobalAvgPool1D, {"name": 3}, TypeError),
    bad(L.LeakyReLU, {"unknown": 1}, TypeError, "'unknown'"),
    bad(L.ReLU, {"negative_slope": 0.1}, TypeError, "'negative_slope'"),
    bad(L.LeakyReLU, {"negative_slope": "a"}, TypeError, owner=False),
    bad(L.ELU, {"alpha": "x"}, TypeError, owner=False),
    bad(L.GELU, {"approximate": "x"}, ValueError, owner=False),
    bad(L.Softplus, {"beta": 0}, ValueError, "'beta'", "0", owner=False),
    bad(L.Softmax, {"axis": 1.5}, TypeError, owner=False),
    bad(L.Tanh, {"name": 3}, TypeError),
]


@pytest.mark.parametrize(("cls", "kwargs", "exc", "fragments"), CONSTRUCTOR_CASES)
def test_bad_constructor_argument(cls, kwargs, exc, fragments):
    with pytest.raises(exc) as info:
        cls(**kwargs)
    message = str(info.value)
    missing = [f for f in fragments if f not in message]
    assert not missing, f"message {message!r} does not name {missing}"


def x32(*shape):
    return np.random.default_rng(0).standard_normal(shape).astype(np.float32)


# (layer, input, exception, message fragments)
FORWARD_CASES = {
    "Conv2D-rank": (lambda: L.Conv2D(2, 3), x32(2, 6, 3), ValueError, ["Conv2D", "(6, 3)"]),
    "Conv1D-rank": (lambda: L.Conv1D(2, 3), x32(2, 6, 6, 3), ValueError, ["Conv1D", "(6, 6, 3)"]),
    "ConvTranspose2D-rank": (lambda: L.ConvTranspose2D(2, 3), x32(2, 6, 3), ValueError,
                             ["ConvTranspose2D", "(6, 3)"]),
    "Conv2D-groups": (lambda: L.Conv2D(4, 2, groups=2), x32(1, 4, 4, 3), ValueError,
                      ["Conv2D", "input channels (3)", "groups (2)"]),
    "ConvTranspose1D-groups": (lambda: L.ConvTranspose1D(4, 2, groups=4), x32(1, 5, 6),
                               ValueError, ["ConvTranspose1D", "(6)", "groups (4)"]),
    "Conv2D-kernel-too-large": (lambda: L.Conv2D(2, 5), x32(1, 3, 3, 1), ValueError,
                                ["conv2d", "kernel"]),
    "ConvTranspose2D-output_padding": (
        lambda: L.ConvTranspose2D(2, 3, stride=2, output_padding=2), x32(1, 4, 4, 2),
        ValueError, ["'output_padding'", "2"]),
    "Conv3D-rank": (lambda: L.Conv3D(2, 3), x32(2, 6, 6, 3), ValueError,
                    ["Conv3D", "(D, H, W, C)", "(6, 6, 3)"]),
    "Conv1D-reflect-too-wide": (lambda: L.Conv1D(2, 3, padding=4, padding_mode="reflect"),
                                x32(1, 4, 2), ValueError,
                                ["Conv1D", "padding_mode='reflect'", "size 4", "(4, 4)"]),
    "Conv2D-circular-too-wide": (
        lambda: L.Conv2D(2, 3, padding=(1, 5), padding_mode="circular"), x32(1, 4, 4, 2),
        ValueError, ["Conv2D", "padding_mode='circular'", "axis 1", "size 4", "(5, 5)"]),
    "Dense-rank": (lambda: L.Dense(3), x32(4), ValueError, ["Dense", "()"]),
    "MaxPool2D-rank": (lambda: L.MaxPool2D(2), x32(1, 4, 3), ValueError,
                       ["'x'", "(1, 4, 3)"]),
    "AvgPool1D-rank": (lambda: L.AvgPool1D(2), x32(1, 4, 4, 3), ValueError,
                       ["'x'", "(1, 4, 4, 3)"]),
    "GlobalAvgPool2D-rank": (lambda: L.GlobalAvgPool2D(), x32(1, 4, 3), ValueError,
                             ["GlobalAvgPool2D", "(1, 4, 3)"]),
    "MaxPool3D-rank": (lambda: L.MaxPool3D(2), x32(1, 4, 4, 3), ValueError,
                       ["'x'", "(N, D, H, W, C)", "(1, 4, 4, 3)"]),
    "GlobalAvgPool3D-rank": (lambda: L.GlobalAvgPool3D(), x32(1, 4, 4, 3), ValueError,
                             ["GlobalAvgPool3D", "(N, D, H, W, C)", "(1, 4, 4, 3)"]),
    "GlobalMaxPool1D-rank": (lambda: L.GlobalMaxPool1D(), x32(1, 4, 4, 3), ValueError,
                             ["GlobalMaxPool1D", "(1, 4, 4, 3)"]),
    "Reshape-size": (lambda: L.Reshape((5,)), x32(1, 4, 3), ValueError,
                     ["Reshape", "(4, 3)", "12", "(5,)"]),
    "Reshape-size-inferred": (lambda: L.Reshape((5, -1)), x32(1, 4, 3), ValueError,
                              ["Reshape", "(4, 3)", "(5, -1)"]),
    "int-input": (lambda: L.ReLU(), np.ones((2, 3), dtype=np.int64), TypeError,
                  ["ReLU", "'x'", "int64"]),
    "float16-input": (lambda: L.Dense(2), np.ones((2, 3), dtype=np.float16), TypeError,
                      ["Dense", "'x'", "float16"]),
    "not-an-array": (lambda: L.Flatten(), "abc", TypeError, ["Flatten", "'x'", "'abc'"]),
    "scalar": (lambda: L.Dense(2), np.float32(1.0), ValueError, ["Dense", "batch axis"]),
    "dtype-mismatch": (lambda: L.Conv1D(2, 2, dtype="float64"), x32(1, 4, 2), TypeError,
                       ["Conv1D", "float32", "float64"]),
}


@pytest.mark.parametrize("key", list(FORWARD_CASES))
def test_bad_input_at_build_or_forward(key):
    make_layer, x, exc, fragments = FORWARD_CASES[key]
    layer = make_layer()
    with pytest.raises(exc) as info:
        layer.forward(x)
    message = str(info.value)
    missing = [f for f in fragments if f not in message]
    assert not missing, f"message {message!r} does not name {missing}"


def test_output_shape_checks_the_rank_too():
    with pytest.raises(ValueError, match=r"Conv2D.*\(5, 2\)"):
        L.Conv2D(2, 3).output_shape((5, 2))


def test_softmax_accepts_any_axis_of_the_input():
    """Validation at construction must not reject an axis that is valid for the input."""
    x = x32(2, 3, 4)
    y = L.Softmax(axis=2).forward(x)
    np.testing.assert_array_equal(y, L.Softmax(axis=-1).forward(x))
    y = L.LogSoftmax(axis=2).forward(x)
    np.testing.assert_array_equal(y, L.LogSoftmax(axis=-1).forward(x))
    with pytest.raises(ValueError, match="'axis'"):
        L.Softmax(axis=3).forward(x)


NAMES = sorted(LAYER_CASES)


def forward_once(name):
    layer, shape = LAYER_CASES[name](np.random.default_rng(0))
    x = np.random.default_rng(1).standard_normal((2, *shape))
    return layer, layer.forward(x)


@pytest.mark.parametrize("name", NAMES)
def test_backward_with_a_wrong_shape_dy(name):
    layer, y = forward_once(name)
    with pytest.raises(ValueError) as info:
        layer.backward(np.zeros((3, *y.shape[1:])))
    message = str(info.value)
    assert "'dy'" in message and str(y.shape) in message, message


@pytest.mark.parametrize("name", NAMES)
def test_backward_with_a_wrong_dtype_dy(name):
    layer, y = forward_once(name)
    with pytest.raises(TypeError) as info:
        layer.backward(np.zeros(y.shape, dtype=np.float32))
    message = str(info.value)
    assert "'dy'" in message and "float64" in message and "float32" in message, message
