"""Constructor calls spelled the PyTorch or Keras way: single-parameter activations take
their parameter positionally, and calls in PyTorch's (input size, output size) order get
a message with the handgrad spelling instead of a confusing one (or a wrong layer)."""

import warnings

import numpy as np
import pytest

from handgrad import layers as L
from handgrad.layers.activations import Activation
from handgrad.layers.registry import REGISTRY


def first_values():
    """For each activation with hyper-parameters: a valid value, not the default, of its
    first one, taken from its op declaration's samples (None if no sample sets it)."""
    values = {}
    for name, cls in REGISTRY.items():
        if issubclass(cls, Activation) and cls.defaults:
            key = next(iter(cls.defaults))
            samples = cls.declaration.samples if hasattr(cls, "declaration") else ()
            values[name] = next((s[key] for s in samples
                                 if key in s and s[key] != cls.defaults[key]), None)
    return values


FIRST = first_values()


def test_every_activation_with_hyper_parameters_is_covered():
    assert FIRST and not [name for name, value in FIRST.items() if value is None]


@pytest.mark.parametrize("name", sorted(FIRST))
def test_an_activation_takes_its_parameter_positionally(name):
    cls = REGISTRY[name]
    key = next(iter(cls.defaults))
    positional, by_keyword = cls(FIRST[name]), cls(**{key: FIRST[name]})
    assert positional.hyper == by_keyword.hyper and positional.hyper[key] == FIRST[name]
    x = np.random.default_rng(0).standard_normal((3, 4)) - 0.5
    np.testing.assert_array_equal(positional.forward(x), by_keyword.forward(x))
    assert positional.get_config() == by_keyword.get_config()


def test_leaky_relu_slope_given_positionally_is_used():
    y = L.LeakyReLU(0.2).forward(np.array([[-1.0, 2.0]]))
    np.testing.assert_array_equal(y, [[-0.2, 2.0]])


@pytest.mark.parametrize("call, error, pattern", [
    (lambda: L.ReLU(0.2), TypeError, r"ReLU: takes no positional arguments.*received 1"),
    (lambda: L.LeakyReLU(0.2, 0.3), TypeError,
     r"LeakyReLU: takes at most 1 positional argument\(s\) \['negative_slope'\]; received 2"),
    (lambda: L.ELU(0.5, alpha=0.3), TypeError, r"ELU: 'alpha' given both positionally and by"),
    (lambda: L.LeakyReLU("steep"), TypeError, r"'negative_slope'.*'steep'"),
])
def test_bad_positional_activation_arguments(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call()


def test_torch_style_dense_says_the_handgrad_spelling():
    with pytest.raises(TypeError, match=r"Dense: received bias=32 \(the second argument\); "
                                        r"this reads like PyTorch's Linear\(16, 32\), but "
                                        r"handgrad takes the output size only \(the input "
                                        r"size comes from the data\): write Dense\(32\)"):
        L.Dense(16, 32)
    assert L.Dense(16, False).use_bias is False  # a bool is still the bias flag


@pytest.mark.parametrize("cls, torch_name, shape", [
    (L.Conv2D, "Conv2d", (20, 20, 3)), (L.Conv1D, "Conv1d", (40, 3)),
    (L.ConvTranspose2D, "ConvTranspose2d", (6, 6, 3)),
    (L.ConvTranspose1D, "ConvTranspose1d", (6, 3)),
])
def test_torch_style_convolution_warns_with_the_handgrad_spelling(cls, torch_name, shape):
    with pytest.warns(UserWarning, match=rf"{cls.__name__}: out_channels=3, kernel_size=16, "
                                         rf"stride=3 on inputs with 3 channels; this reads like "
                                         rf"PyTorch's {torch_name}\(3, 16, 3\).*output size "
                                         rf"only.*write {cls.__name__}\(16, 3\)"):
        cls(3, 16, 3).build(shape)


def test_keras_style_convolutions_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        L.Conv2D(3, 3, 2).build((20, 20, 3))     # a small kernel
        L.Conv2D(16, 16, 3).build((40, 40, 3))   # out_channels differ from the data's
        L.Conv1D(3, 7).build((40, 3))


def test_identity_takes_and_ignores_torch_arguments():
    """torch's nn.Identity(54, unused_argument1=0.1) is a placeholder: any arguments."""
    layer = L.Identity(54, unused_argument1=0.1, name="keep")
    assert layer.get_config() == L.Identity(name="keep").get_config()
    x = np.random.default_rng(0).standard_normal((3, 4))
    np.testing.assert_array_equal(layer.forward(x), x)
    with pytest.raises(TypeError, match="'name' must be a string"):
        L.Identity(54, name=3)
