"""Initializers: fans, dtypes, determinism, distributions (against torch.nn.init), errors."""

import math

import numpy as np
import pytest

from handgrad import initializers as init

from tolerances import mean_bound, proportion_bound, std_bound, uniform_max_gap

torch = pytest.importorskip("torch")

SHAPES = [(10,), (6, 4), (5, 3, 7), (3, 3, 2, 5), (2, 3, 3, 4, 6)]
RANDOM = ["glorot_uniform", "glorot_normal", "he_uniform", "he_normal", "lecun_normal",
          "truncated_normal", "torch_default"]
ALL = [*RANDOM, "zeros", "ones"]
BIG = (3, 3, 64, 128)  # 73,728 samples: sample std within ~0.3% (1 sigma)


def fraction_bound(p, n):
    """Allowed error of the fraction of n draws with |x| < their sample std, near p: the
    binomial's, plus the sample std's own (the density at sigma times sigma is < 1)."""
    return proportion_bound(p, n) + std_bound(1.0, n)


def torch_layout(shape):
    """(*kernel, C_in, C_out) -> torch's (C_out, C_in, *kernel)."""
    return (shape[-1], shape[-2], *shape[:-2])


def torch_sample(name, shape):
    t = torch.empty(torch_layout(shape), dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    nn_init = torch.nn.init
    {
        "glorot_uniform": lambda: nn_init.xavier_uniform_(t, generator=gen),
        "glorot_normal": lambda: nn_init.xavier_normal_(t, generator=gen),
        "he_uniform": lambda: nn_init.kaiming_uniform_(t, nonlinearity="relu", generator=gen),
        "he_normal": lambda: nn_init.kaiming_normal_(t, nonlinearity="relu", generator=gen),
        "lecun_normal": lambda: nn_init.kaiming_normal_(t, nonlinearity="linear", generator=gen),
        "torch_default": lambda: nn_init.kaiming_uniform_(t, a=math.sqrt(5), generator=gen),
        "truncated_normal": lambda: nn_init.trunc_normal_(t, std=0.02, a=-0.04, b=0.04,
                                                          generator=gen),
    }[name]()
    return t.numpy()


@pytest.mark.parametrize("shape", [s for s in SHAPES if len(s) >= 2])
def test_fans_match_torch(shape):
    expected = torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(torch_layout(shape)))
    assert init.fans(shape) == expected


def test_fans_of_biases_and_ints():
    assert init.fans((7,)) == (7, 7)
    assert init.fans(7) == (7, 7)
    assert init.fans([3, 3, 4, 8]) == (36, 72)
    assert init.fans((np.int64(4), np.int64(5))) == (4, 5)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, "float32"])
@pytest.mark.parametrize("shape", SHAPES)
def test_shape_dtype_and_seeded_determinism(name, dtype, shape):
    f = init.get(name)
    a = f(shape, dtype=dtype, rng=3)
    b = f(list(shape), dtype, np.random.default_rng(3))
    assert a.shape == shape and a.dtype == np.dtype(dtype) and isinstance(a, np.ndarray)
    np.testing.assert_array_equal(a, b)
    assert np.all(np.isfinite(a))
    if name in RANDOM:
        assert not np.array_equal(a, f(shape, dtype=dtype, rng=4))
        assert not np.array_equal(f(shape, dtype=dtype), f(shape, dtype=dtype))


def test_default_dtype_is_float32_and_constants():
    assert init.glorot_uniform((3, 4)).dtype == np.float32
    assert np.all(init.zeros((2, 3)) == 0) and np.all(init.ones(4) == 1)
    assert init.ones((), np.float64).shape == ()


@pytest.mark.parametrize("name", RANDOM)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_distribution_matches_torch_nn_init(name, dtype):
    ours = getattr(init, name)(BIG, dtype=dtype, rng=0).astype(np.float64)
    theirs = torch_sample(name, BIG)
    n, sigma = ours.size, theirs.std()
    assert abs(ours.mean()) <= mean_bound(sigma, n)
    # two samples' stds, each within std_bound (a normal's kurtosis, 3, is the largest)
    assert abs(ours.std() - sigma) <= math.sqrt(2) * std_bound(sigma, n)
    if name.endswith("uniform") or name == "torch_default":
        # torch's largest draw is within a relative uniform_max_gap(n) of the bound, and
        # ours too; rounding to the dtype may add half an ulp (monotonic, to at most it)
        bound = float(np.abs(theirs).max())
        assert np.abs(ours).max() <= bound / (1 - uniform_max_gap(n)) * (
            1 + np.finfo(dtype).eps)
        assert np.abs(ours).max() >= bound * (1 - uniform_max_gap(n))
        fraction = np.mean(np.abs(ours) < ours.std())  # P(|x| < sigma) = 1 / sqrt(3)
        assert abs(fraction - 1 / math.sqrt(3)) <= fraction_bound(1 / math.sqrt(3), n)
    elif name == "truncated_normal":
        assert np.abs(ours).max() <= np.float32(0.04)
        # the density at the bound b = 2 std: P(max < b - t) ~ exp(-n density t) < e^-15
        density = math.exp(-2) / (math.sqrt(2 * math.pi) * 0.02 * math.erf(2**0.5))
        assert np.abs(ours).max() >= 0.04 - 15 / (n * density)
    else:  # plain normal: P(|x| < sigma) = erf(1 / sqrt(2))
        fraction = np.mean(np.abs(ours) < ours.std())
        assert abs(fraction - math.erf(2**-0.5)) <= fraction_bound(math.erf(2**-0.5), n)


def truncated_std(std, bound):
    """Standard deviation of N(0, std^2) restricted to [-bound, bound]."""
    c = bound / std
    pdf = math.exp(-c * c / 2) / math.sqrt(2 * math.pi)
    mass = math.erf(c / math.sqrt(2))
    return std * math.sqrt(1 - 2 * c * pdf / mass)


@pytest.mark.parametrize(("std", "bound"), [(1.0, None), (0.5, 0.25), (2.0, 2.0), (1.0, 3.5)])
def test_truncated_normal_moments(std, bound):
    """Both proposal branches (normal when bound >= std, uniform otherwise)."""
    x = init.truncated_normal(10**6, np.float64, rng=1, std=std, bound=bound)
    bound = 2 * std if bound is None else bound
    assert np.abs(x).max() <= bound
    sigma = truncated_std(std, bound)  # a truncated normal's kurtosis is below 3
    assert abs(x.mean()) <= mean_bound(sigma, x.size)
    assert abs(x.std() - sigma) <= std_bound(sigma, x.size)
    # histogram of |x| against the exact truncated-normal bin probabilities
    edges = np.linspace(0, bound, 11)
    cdf = np.array([math.erf(e / (std * math.sqrt(2))) for e in edges]) / math.erf(
        bound / (std * math.sqrt(2)))
    expected = x.size * np.diff(cdf)
    counts, _ = np.histogram(np.abs(x), bins=edges)
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected) + 1)


def test_torch_default_bounds_match_torch_layers():
    linear, conv = torch.nn.Linear(48, 20), torch.nn.Conv2d(6, 16, 3)
    w_lin = init.torch_default((48, 20), np.float64, rng=0)
    w_conv = init.torch_default((3, 3, 6, 16), np.float64, rng=0)
    for ours, layer in ((w_lin, linear), (w_conv, conv)):
        fan_in = int(np.prod(layer.weight.shape[1:]))
        bound = 1 / math.sqrt(fan_in)
        assert np.abs(layer.weight.detach().numpy()).max() <= bound
        assert bound * (1 - uniform_max_gap(ours.size)) <= np.abs(ours).max() <= bound
        bias = init.torch_default_bias(fan_in)((layer.bias.shape[0],), np.float64, rng=0)
        assert bias.shape == tuple(layer.bias.shape)
        assert np.abs(bias).max() <= bound and np.abs(layer.bias.detach().numpy()).max() <= bound
    big_bias = init.torch_default_bias(25)(10**5, np.float32, rng=2)
    assert big_bias.dtype == np.float32
    sigma = 0.2 / math.sqrt(3)  # U(-0.2, 0.2), a uniform's kurtosis is 1.8
    assert abs(big_bias.std() - sigma) <= std_bound(sigma, big_bias.size, kurtosis=1.8)
    np.testing.assert_array_equal(init.torch_default_bias(0)((5,), rng=0), np.zeros(5))


def test_empty_shapes_give_empty_arrays():
    for name in ALL:
        out = init.get(name)((0, 5), np.float64, rng=0)
        assert out.shape == (0, 5) and out.dtype == np.float64


def test_global_random_state_is_untouched():
    before = np.random.get_state()  # noqa: NPY002 (checking the legacy global state)
    for name in ALL:
        for rng in (None, 0, np.random.default_rng(0)):
            init.get(name)((3, 4), rng=rng)
    init.torch_default_bias(4)((4,))
    after = np.random.get_state()  # noqa: NPY002
    assert before[0] == after[0] and before[2:] == after[2:]
    np.testing.assert_array_equal(before[1], after[1])


def test_get():
    assert init.get("glorot_uniform") is init.glorot_uniform
    assert init.get("He_Normal") is init.he_normal
    assert init.get("torch_default") is init.torch_default
    custom = init.torch_default_bias(3)
    assert init.get(custom) is custom


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: init.glorot_uniform((3, 4), dtype=np.int32), TypeError,
         "glorot_uniform: 'dtype' must be float32 or float64; received"),
        (lambda: init.zeros((3, 4), dtype=None), TypeError, "zeros: 'dtype'"),
        (lambda: init.he_normal((3, 4), dtype="banana"), TypeError, "he_normal: 'dtype'"),
        (lambda: init.he_uniform((3, -4)), ValueError, "he_uniform: 'shape' must be"),
        (lambda: init.ones((3, 2.0)), TypeError, "ones: 'shape' must be an int or a tuple"),
        (lambda: init.lecun_normal("3"), TypeError, "lecun_normal: 'shape'"),
        (lambda: init.glorot_normal((3, 4), rng="seed"), TypeError,
         "glorot_normal: 'rng' must be a numpy.random.Generator"),
        (lambda: init.glorot_normal((3, 4), rng=-1), ValueError, "'rng'"),
        (lambda: init.zeros(3, rng=np.random.RandomState(0)), TypeError, "zeros: 'rng'"),
        (lambda: init.glorot_uniform(()), ValueError, "fans: 'shape' must have at least 1"),
        (lambda: init.fans(-1), ValueError, "fans: 'shape'"),
        (lambda: init.truncated_normal((3,), std=0.0), ValueError,
         "truncated_normal: 'std' must be .* > 0"),
        (lambda: init.truncated_normal((3,), bound=-1.0), ValueError, "'bound'"),
        (lambda: init.truncated_normal((3,), std="1"), TypeError, "'std'"),
        (lambda: init.torch_default_bias(-1), ValueError, "torch_default_bias: 'fan_in'"),
        (lambda: init.torch_default_bias(2.5), TypeError, "torch_default_bias: 'fan_in'"),
        (lambda: init.torch_default_bias(4)((4,), dtype=np.float16), TypeError, "'dtype'"),
        (lambda: init.get("xavier"), ValueError,
         r"initializers.get: unknown name 'xavier'; expected one of .*'glorot_uniform'"),
        (lambda: init.get(3), TypeError, "initializers.get: expected a name"),
    ],
)
def test_bad_inputs(call, error, match):
    with pytest.raises(error, match=match):
        call()
