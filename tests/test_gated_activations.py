"""PReLU, RReLU and GLU layers against torch's modules; RReLU's random slopes given to
the op as torch drew them; the new activations' argument errors and conventions."""

import warnings

import numpy as np
import pytest

from handgrad import layers as L
from handgrad import ops
from handgrad.testing import assert_close

torch = pytest.importorskip("torch")
nn = torch.nn

DTYPES = [np.float64, np.float32]
TORCH_DTYPE = {np.float64: torch.float64, np.float32: torch.float32}


def _cf(a, dtype):
    """A channels-last array as a channels-first torch tensor that records gradients."""
    return torch.tensor(np.moveaxis(a, -1, 1), dtype=TORCH_DTYPE[dtype], requires_grad=True)


def _cl(t):
    return np.moveaxis(t.detach().numpy(), 1, -1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("num_parameters", [1, 3])
def test_prelu_layer_matches_torch_module(num_parameters, dtype):
    rng = np.random.default_rng(num_parameters)
    x = rng.standard_normal((2, 4, 5, 3)).astype(dtype)
    x[0, 0, 0] = 0.0  # the kink: slope w there, as torch
    dy = rng.standard_normal(x.shape).astype(dtype)
    layer = L.PReLU(num_parameters, init=-0.3, dtype=dtype)
    y = layer.forward(x)
    dx = layer.backward(dy)
    module = nn.PReLU(num_parameters).to(TORCH_DTYPE[dtype])
    with torch.no_grad():
        module.weight.copy_(torch.tensor(layer.parameters["weight"]))
    tx = _cf(x, dtype)
    ty = module(tx)
    ty.backward(torch.tensor(np.moveaxis(dy, -1, 1)))
    np.testing.assert_array_equal(layer.parameters["weight"], np.full(num_parameters, -0.3,
                                                                      dtype))
    assert_close(y, _cl(ty), dtype=dtype, what="y")
    assert_close(dx, _cl(tx.grad), dtype=dtype, what="dx")
    # sums over the batch and positions: sqrt(count) roundings at the size of |x dy|
    count = x.size // num_parameters
    assert_close(layer.gradients["weight"], module.weight.grad.numpy(), dtype=dtype,
                 terms=count, scale=float(np.sum(np.abs(x * dy))), what="dweight")


def test_prelu_default_slope_and_parameter_count():
    layer = L.PReLU(4)
    layer.build((3, 4))
    np.testing.assert_array_equal(layer.parameters["weight"], np.full(4, 0.25, np.float32))
    assert layer.count_params() == 4 == sum(p.numel() for p in nn.PReLU(4).parameters())


@pytest.mark.parametrize("dtype", DTYPES)
def test_rrelu_matches_torch_given_its_slopes(dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 6)).astype(dtype)
    x[0, 0] = 0.0  # torch draws a slope for x <= 0: the gradient there is r dy
    dy = rng.standard_normal(x.shape).astype(dtype)
    tx = torch.tensor(x, requires_grad=True)
    noise = torch.zeros_like(tx)
    ty = torch.ops.aten.rrelu_with_noise(tx, noise, 0.1, 0.4, True)  # fills noise
    ty.backward(torch.tensor(dy))
    slopes = noise.numpy().copy()
    assert np.all((slopes[x <= 0] >= 0.1) & (slopes[x <= 0] < 0.4))
    y, cache = ops.rrelu(x, slopes, 0.1, 0.4, training=True)
    assert_close(y, ty.detach().numpy(), dtype=dtype, what="y")
    assert_close(ops.rrelu_backward(dy, cache), tx.grad.numpy(), dtype=dtype, what="dx")


def test_rrelu_layer_draws_seeded_slopes_and_uses_their_mean_in_evaluation():
    x = -1.0 - np.random.default_rng(1).random((50, 40))  # all negative: y / x is r
    slopes = [L.RReLU(0.2, 0.5, seed=3).forward(x) / x for _ in range(2)]
    np.testing.assert_array_equal(slopes[0], slopes[1])  # the seed fixes the draw
    assert slopes[0].min() >= 0.2 and slopes[0].max() < 0.5
    layer = L.RReLU(0.2, 0.5, seed=3)
    first, second = layer.forward(x), layer.forward(x)
    assert not np.array_equal(first, second)  # a fresh draw per forward
    dx = layer.backward(np.ones_like(x))
    # the backward uses the forward's slopes (second / x: two roundings)
    assert_close(dx, second / x, dtype=np.float64, terms=2, what="slopes")
    module = nn.RReLU(0.2, 0.5).eval()
    assert_close(layer.forward(x, training=False), module(torch.tensor(x)).numpy(),
                 dtype=np.float64, what="evaluation")


@pytest.mark.parametrize("dtype", DTYPES)
def test_glu_layer_matches_torch_module_on_the_channels(dtype):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 5, 6)).astype(dtype)
    layer = L.GLU()
    y = layer.forward(x)
    dy = rng.standard_normal(y.shape).astype(dtype)
    dx = layer.backward(dy)
    tx = _cf(x, dtype)
    ty = nn.GLU(dim=1)(tx)
    ty.backward(torch.tensor(np.moveaxis(dy, -1, 1)))
    assert y.shape == (2, 3, 5, 3)
    assert_close(y, _cl(ty), dtype=dtype, what="y")
    assert_close(dx, _cl(tx.grad), dtype=dtype, terms=4, what="dx")


@pytest.mark.parametrize("call, error, match", [
    (lambda: L.PReLU(3).forward(np.ones((2, 4))), ValueError,
     r"num_parameters must be 1 or the number of channels \(the last axis, 4\); received 3"),
    (lambda: L.PReLU(0), ValueError, "num_parameters"),
    (lambda: ops.prelu(np.ones((2, 4)), np.ones(3)), ValueError,
     r"'weight' must have shape \(1,\) or \(4,\).*received \(3,\)"),
    (lambda: ops.prelu(np.ones((2, 4)), np.ones(4, np.float32)), TypeError,
     "'weight' must have x's dtype float64"),
    (lambda: ops.glu(np.ones((2, 5))), ValueError, "must have an even size.*received shape"),
    (lambda: L.GLU(axis=0), ValueError, "the batch axis"),
    (lambda: L.GLU(axis=1.5), TypeError, "'axis' must be an int"),
    (lambda: ops.rrelu(np.ones(3), training=True), ValueError, "'noise'.*is required"),
    (lambda: ops.rrelu(np.ones(3), np.ones(2), training=True), ValueError,
     r"'noise' must have x's shape \(3,\); received \(2,\)"),
    (lambda: L.RReLU(0.5, 0.1), ValueError, "'upper' must be >= 'lower'"),
    (lambda: L.Hardtanh(1.0, -1.0), ValueError, "'max_val' must be >= 'min_val'"),
    (lambda: L.Softshrink(-0.5), ValueError, "'lambd' must be a finite real number >= 0"),
    (lambda: L.CELU(0.0), ValueError, "'alpha' must be nonzero"),
    (lambda: L.Threshold("a"), TypeError, "'threshold' must be a finite real number"),
])
def test_bad_arguments_are_clear_errors(call, error, match):
    with pytest.raises(error, match=match):
        call()


def test_hyper_parameters_by_position_as_torch():
    assert L.Hardtanh(-2.0, 3.0).hyper == {"min_val": -2.0, "max_val": 3.0}
    assert L.Threshold(0.5, -1.0).hyper == {"threshold": 0.5, "value": -1.0}
    assert L.Affine(2.0, 1.0).hyper == {"slope": 2.0, "intercept": 1.0}
    x = np.array([[-3.0, 0.2, 4.0]])
    np.testing.assert_array_equal(L.Hardtanh(-2.0, 3.0).forward(x), [[-2.0, 0.2, 3.0]])


def test_exponential_overflows_to_inf_without_a_warning_as_torch():
    x = np.array([1.0, 800.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y, cache = ops.exponential(x)
        dx = ops.exponential_backward(np.ones(2), cache)
    np.testing.assert_array_equal(np.isinf(y), torch.tensor(x).exp().isinf().numpy())
    assert np.isinf(dx[1]) and dx[0] == y[0]
