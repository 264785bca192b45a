"""Tests for handgrad.data: Dataset, MNIST-1D, digits and load_dataset.

IDX files: test_data_idx.py; batching: test_data_batching.py."""

import importlib.util
import random
import subprocess
import sys

import numpy as np
import pytest

from handgrad.data import Dataset, load_dataset, load_digits, load_mnist1d
from handgrad.data import loaders as loaders_module
from handgrad.testing import assert_close

needs_mnist1d = pytest.mark.skipif(
    importlib.util.find_spec("mnist1d") is None, reason="needs the optional package mnist1d"
)
needs_sklearn = pytest.mark.skipif(
    importlib.util.find_spec("sklearn") is None, reason="needs the optional package scikit-learn"
)


@pytest.fixture(scope="module")
def sklearn_digits():
    """scikit-learn's own digits bunch, the reference for load_digits."""
    return pytest.importorskip("sklearn.datasets").load_digits()


def _global_states():
    """Snapshot of NumPy's and Python's global random states."""
    return np.random.get_state(), random.getstate()  # noqa: NPY002


def _assert_same_states(before, after):
    (np_before, py_before), (np_after, py_after) = before, after
    assert np_before[0] == np_after[0]
    np.testing.assert_array_equal(np_before[1], np_after[1])
    assert np_before[2:] == np_after[2:]
    assert py_before == py_after


@pytest.fixture(scope="module")
def mnist1d_generation():
    """Load MNIST-1D once (generated at most once per session, then cached),
    recording the global random state around the first load."""
    pytest.importorskip("mnist1d")
    before = _global_states()
    dataset = load_mnist1d()
    return dataset, before, _global_states()


# ---------------------------------------------------------------- import hygiene


def test_import_needs_no_optional_packages():
    code = (
        "import sys\n"
        "sys.modules['mnist1d'] = None\n"
        "sys.modules['sklearn'] = None\n"
        "import handgrad, handgrad.data\n"
        "from handgrad.data import batches, read_idx\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("module", "load"), [("mnist1d.data", load_mnist1d), ("sklearn.datasets", load_digits)]
)
def test_missing_optional_package_raises_clear_import_error(monkeypatch, module, load):
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImportError, match=r'pip install "handgrad\[data\]"'):
        load()


# ---------------------------------------------------------------- MNIST-1D


def test_mnist1d_shapes_dtypes_and_classes(mnist1d_generation):
    ds, _, _ = mnist1d_generation
    assert ds.name == "mnist1d" and ds.num_classes == 10
    assert ds.x_train.shape == (4000, 40, 1) and ds.x_test.shape == (1000, 40, 1)
    assert ds.y_train.shape == (4000,) and ds.y_test.shape == (1000,)
    assert ds.x_train.dtype == np.float32 and ds.x_test.dtype == np.float32
    assert ds.y_train.dtype == np.int64 and ds.y_test.dtype == np.int64
    assert ds.input_shape == (40, 1)
    assert np.all(np.isfinite(ds.x_train))
    # 500 signals per class before the split; the generator standardizes the whole set
    counts = np.bincount(np.concatenate([ds.y_train, ds.y_test]), minlength=10)
    np.testing.assert_array_equal(counts, np.full(10, 500))
    everything = np.concatenate([ds.x_train, ds.x_test]).astype(np.float64)
    # standardized in float64, then each value rounded to float32 (relative eps / 2)
    assert_close(everything.mean(), 0.0, dtype=np.float32, scale=np.abs(everything).mean(),
                 what="mean")
    assert_close(everything.std(), 1.0, dtype=np.float32, scale=1.0, what="std")


def test_mnist1d_leaves_global_random_state_unchanged(mnist1d_generation):
    _, before, after = mnist1d_generation
    _assert_same_states(before, after)


def test_mnist1d_default_seed_is_the_package_default_and_cached(mnist1d_generation):
    ds, _, _ = mnist1d_generation
    from mnist1d.data import get_dataset_args

    hits = loaders_module._generate_mnist1d.cache_info().hits
    again = load_mnist1d(get_dataset_args().seed)
    assert loaders_module._generate_mnist1d.cache_info().hits == hits + 1
    np.testing.assert_array_equal(again.x_train, ds.x_train)
    np.testing.assert_array_equal(again.y_test, ds.y_test)


def test_mnist1d_returns_independent_copies(mnist1d_generation):
    ds, _, _ = mnist1d_generation
    first = load_mnist1d()
    original = first.x_train[0, 0, 0]
    first.x_train[0, 0, 0] += 100
    first.y_train[0] = 9 - first.y_train[0]
    second = load_mnist1d()
    assert second.x_train[0, 0, 0] == original
    np.testing.assert_array_equal(second.y_train, ds.y_train)


@needs_mnist1d
def test_mnist1d_generation_is_deterministic_per_seed(monkeypatch):
    """Regenerate a small MNIST-1D (200 signals) bypassing the cache."""
    import mnist1d.data

    real_args = mnist1d.data.get_dataset_args

    def small_args(as_dict=False):
        args = real_args()
        args.num_samples = 200
        return args

    monkeypatch.setattr(mnist1d.data, "get_dataset_args", small_args)
    generate = loaders_module._generate_mnist1d.__wrapped__
    before = _global_states()
    first, second, other = generate(7), generate(7), generate(8)
    _assert_same_states(before, _global_states())
    assert first[0].shape == (160, 40, 1) and first[2].shape == (40, 40, 1)
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(first[0], other[0])


@pytest.mark.parametrize("seed", [-1, 2**32, 1.5, "42", True])
def test_mnist1d_bad_seed(seed):
    with pytest.raises(ValueError, match=r"load_mnist1d: 'seed' must be None or an int"):
        load_mnist1d(seed)


# ---------------------------------------------------------------- digits


def test_digits_shapes_ranges_and_content(sklearn_digits):
    ds = load_digits()
    reference = sklearn_digits
    assert ds.name == "digits" and ds.num_classes == 10
    assert ds.x_train.shape == (1438, 8, 8, 1) and ds.x_test.shape == (359, 8, 8, 1)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    assert ds.input_shape == (8, 8, 1)
    both = np.concatenate([ds.x_train, ds.x_test])
    assert both.min() == 0 and both.max() == 1
    # same multiset of (image, label) pairs as scikit-learn's, pixels / 16
    ours = sorted(
        (x.tobytes(), int(y))
        for x, y in zip(both[..., 0], np.concatenate([ds.y_train, ds.y_test]), strict=True)
    )
    theirs = sorted(
        ((img / 16).astype(np.float32).tobytes(), int(y))
        for img, y in zip(reference.images, reference.target, strict=True)
    )
    assert ours == theirs


@pytest.mark.parametrize("fraction", [0.2, 0.5])
def test_digits_split_is_stratified(sklearn_digits, fraction):
    ds = load_digits(test_fraction=fraction)
    per_class = np.bincount(sklearn_digits.target)
    expected_test = np.array([round(fraction * n) for n in per_class])
    np.testing.assert_array_equal(np.bincount(ds.y_test, minlength=10), expected_test)
    np.testing.assert_array_equal(np.bincount(ds.y_train, minlength=10), per_class - expected_test)


@needs_sklearn
def test_digits_split_extreme_fraction_keeps_every_class_in_both_sets():
    ds = load_digits(test_fraction=0.001)
    assert np.all(np.bincount(ds.y_test, minlength=10) == 1)
    ds = load_digits(test_fraction=0.999)
    assert np.all(np.bincount(ds.y_train, minlength=10) == 1)


@needs_sklearn
def test_digits_split_is_fixed_by_seed():
    a, b, c = load_digits(seed=0), load_digits(seed=0), load_digits(seed=1)
    np.testing.assert_array_equal(a.x_test, b.x_test)
    np.testing.assert_array_equal(a.y_train, b.y_train)
    assert not np.array_equal(a.x_test, c.x_test)
    from_generator = load_digits(seed=np.random.default_rng(0))
    np.testing.assert_array_equal(a.x_test, from_generator.x_test)


@needs_sklearn
def test_digits_leaves_global_random_state_unchanged():
    before = _global_states()
    load_digits()
    _assert_same_states(before, _global_states())


@pytest.mark.parametrize(
    ("kwargs", "error", "pattern"),
    [
        ({"test_fraction": 0}, ValueError, "'test_fraction' must be a float in"),
        ({"test_fraction": 1.0}, ValueError, "'test_fraction' must be a float in"),
        ({"test_fraction": -0.5}, ValueError, "'test_fraction' must be a float in"),
        ({"test_fraction": "0.2"}, TypeError, "'test_fraction' must be a float in"),
        ({"test_fraction": True}, TypeError, "'test_fraction' must be a float in"),
        ({"seed": -3}, ValueError, "'seed' must be an int seed >= 0"),
        ({"seed": "zero"}, TypeError, "'seed' must be a numpy.random.Generator"),
        ({"seed": np.random.RandomState(0)}, TypeError, "'seed' must be a numpy.random"),
    ],
)
def test_digits_bad_arguments(kwargs, error, pattern):
    with pytest.raises(error, match=f"load_digits: .*{pattern}"):
        load_digits(**kwargs)


# ---------------------------------------------------------------- load_dataset


@needs_sklearn
def test_load_dataset_builtin_specs(mnist1d_generation):
    assert load_dataset("mnist1d").x_train.shape == (4000, 40, 1)
    np.testing.assert_array_equal(load_dataset("digits").y_test, load_digits().y_test)


@pytest.mark.parametrize(
    ("spec", "error", "pattern"),
    [
        ("mnist", ValueError, "'spec' must be one of 'mnist1d', 'digits', 'idx:PATH'"),
        ("", ValueError, "'spec' must be one of"),
        ("idx:", ValueError, "names no directory"),
        (None, TypeError, "'spec' must be a str"),
    ],
)
def test_load_dataset_bad_spec(spec, error, pattern):
    with pytest.raises(error, match=f"load_dataset: .*{pattern}"):
        load_dataset(spec)


# ---------------------------------------------------------------- Dataset


def _tiny_dataset(**overrides):
    fields = {
        "x_train": np.zeros((3, 2, 1), np.float32),
        "y_train": np.array([0, 1, 2]),
        "x_test": np.zeros((2, 2, 1), np.float32),
        "y_test": np.array([1, 0]),
        "num_classes": 3,
        "name": "tiny",
    }
    fields.update(overrides)
    return Dataset(**fields)


def test_dataset_basics():
    ds = _tiny_dataset()
    assert ds.input_shape == (2, 1)
    assert repr(ds) == (
        "Dataset(name='tiny', train=3, test=2, input_shape=(2, 1), num_classes=3, dtype=float32)"
    )


@pytest.mark.parametrize(
    ("overrides", "error", "pattern"),
    [
        ({"num_classes": 0}, ValueError, "'num_classes' must be an int >= 1"),
        ({"name": 3}, TypeError, "'name' must be a str"),
        ({"x_train": np.zeros(3, np.float32)}, ValueError, "'x_train' must be an array"),
        ({"y_test": np.zeros(2, np.float32)}, ValueError, "'y_test' must be a 1-D integer"),
        ({"y_train": np.array([0, 1])}, ValueError, "'x_train' has 3 examples but"),
        ({"y_test": np.array([1, 3])}, ValueError, r"labels must lie in \[0, 3\)"),
        ({"x_test": np.zeros((2, 3, 1))}, ValueError, "'x_test' examples have shape"),
    ],
)
def test_dataset_validation(overrides, error, pattern):
    with pytest.raises(error, match=f"Dataset: .*{pattern}"):
        _tiny_dataset(**overrides)
