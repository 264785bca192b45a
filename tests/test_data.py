"""Tests for handgrad.data: datasets, IDX files and minibatch iteration."""

import gzip
import random
import struct
import subprocess
import sys

import numpy as np
import pytest

from handgrad.data import (
    Dataset,
    batches,
    load_dataset,
    load_digits,
    load_idx,
    load_mnist1d,
    num_batches,
    read_idx,
    write_idx,
)
from handgrad.data import loaders as loaders_module

pytest.importorskip("mnist1d", reason="mnist1d is needed for the MNIST-1D tests")
sklearn_datasets = pytest.importorskip("sklearn.datasets")


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
    assert abs(everything.mean()) < 1e-3 and abs(everything.std() - 1) < 1e-3


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


def test_digits_shapes_ranges_and_content():
    ds = load_digits()
    reference = sklearn_datasets.load_digits()
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
def test_digits_split_is_stratified(fraction):
    ds = load_digits(test_fraction=fraction)
    per_class = np.bincount(sklearn_datasets.load_digits().target)
    expected_test = np.array([round(fraction * n) for n in per_class])
    np.testing.assert_array_equal(np.bincount(ds.y_test, minlength=10), expected_test)
    np.testing.assert_array_equal(np.bincount(ds.y_train, minlength=10), per_class - expected_test)


def test_digits_split_extreme_fraction_keeps_every_class_in_both_sets():
    ds = load_digits(test_fraction=0.001)
    assert np.all(np.bincount(ds.y_test, minlength=10) == 1)
    ds = load_digits(test_fraction=0.999)
    assert np.all(np.bincount(ds.y_train, minlength=10) == 1)


def test_digits_split_is_fixed_by_seed():
    a, b, c = load_digits(seed=0), load_digits(seed=0), load_digits(seed=1)
    np.testing.assert_array_equal(a.x_test, b.x_test)
    np.testing.assert_array_equal(a.y_train, b.y_train)
    assert not np.array_equal(a.x_test, c.x_test)
    from_generator = load_digits(seed=np.random.default_rng(0))
    np.testing.assert_array_equal(a.x_test, from_generator.x_test)


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


# ---------------------------------------------------------------- IDX files

IDX_DTYPES = {
    np.uint8: 0x08,
    np.int8: 0x09,
    np.int16: 0x0B,
    np.int32: 0x0C,
    np.float32: 0x0D,
    np.float64: 0x0E,
}


def _sample(dtype, shape, rng):
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dtype)
        values.flat[:2] = [info.min, info.max]
        return values
    return (rng.standard_normal(shape) * 1e3).astype(dtype)


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("dtype", list(IDX_DTYPES))
@pytest.mark.parametrize("shape", [(7,), (3, 5, 4), (2, 1, 3, 2)])
def test_idx_round_trip(tmp_path, dtype, compress, shape):
    array = _sample(dtype, shape, np.random.default_rng(0))
    path = tmp_path / "array.idx"
    write_idx(path, array, gzip=compress)
    raw = path.read_bytes()
    assert (raw[:2] == b"\x1f\x8b") == compress
    header = gzip.decompress(raw)[:4] if compress else raw[:4]
    assert header == bytes([0, 0, IDX_DTYPES[dtype], len(shape)])
    loaded = read_idx(str(path))
    assert loaded.dtype == np.dtype(dtype) and loaded.dtype.isnative
    assert loaded.shape == shape and loaded.flags.writeable
    np.testing.assert_array_equal(loaded, array)


def test_idx_reads_and_writes_hand_written_big_endian_files(tmp_path):
    """Header and data are big-endian exactly as the IDX specification says."""
    raw = b"\x00\x00\x0b\x02" + struct.pack(">II4h", 2, 2, 1, -2, 300, -32768)
    expected = np.array([[1, -2], [300, -32768]], dtype=np.int16)
    path = tmp_path / "hand.idx"
    path.write_bytes(raw)
    np.testing.assert_array_equal(read_idx(path), expected)
    out = tmp_path / "written.idx"
    write_idx(out, expected)
    assert out.read_bytes() == raw
    floats = tmp_path / "floats.idx"
    floats.write_bytes(b"\x00\x00\x0d\x01" + struct.pack(">I2f", 2, 1.5, -0.25))
    np.testing.assert_array_equal(read_idx(floats), np.array([1.5, -0.25], np.float32))


def test_idx_gzip_is_detected_by_content_not_name(tmp_path):
    array = np.arange(12, dtype=np.uint8).reshape(3, 4)
    compressed_plain_name, plain_gz_name = tmp_path / "a.idx", tmp_path / "b.idx.gz"
    write_idx(compressed_plain_name, array, gzip=True)
    write_idx(plain_gz_name, array, gzip=False)
    np.testing.assert_array_equal(read_idx(compressed_plain_name), array)
    np.testing.assert_array_equal(read_idx(plain_gz_name), array)


def _valid_idx_bytes():
    return b"\x00\x00\x08\x02" + struct.pack(">II", 2, 3) + bytes(range(6))


@pytest.mark.parametrize(
    ("content", "pattern"),
    [
        (b"\x00\x00", "too short for an IDX header"),
        (b"\x01\x00\x08\x01" + struct.pack(">I", 1) + b"\x00", "bad magic number 0x01000801"),
        (b"\x00\x00\x0a\x01" + struct.pack(">I", 1) + b"\x00", "unknown IDX type code 0x0A"),
        (b"\x00\x00\x08\x00", "declares 0 dimensions"),
        (b"\x00\x00\x08\x03" + struct.pack(">I", 2), "truncated inside its header"),
        (_valid_idx_bytes()[:-1], r"truncated: the header declares shape \(2, 3\)"),
        (_valid_idx_bytes() + b"\x00", "has trailing bytes"),
        (gzip.compress(_valid_idx_bytes())[:-6], "not a valid gzip stream"),
        (b"\x1f\x8b" + b"garbage" * 3, "not a valid gzip stream"),
        (gzip.compress(_valid_idx_bytes()[:-2]), "truncated"),
    ],
)
def test_idx_corrupted_files(tmp_path, content, pattern):
    path = tmp_path / "broken-idx1-ubyte"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=pattern) as info:
        read_idx(path)
    assert "read_idx" in str(info.value) and str(path) in str(info.value)


def test_idx_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"read_idx: IDX file .*nothing.idx"):
        read_idx(tmp_path / "nothing.idx")


@pytest.mark.parametrize(
    ("array", "kwargs", "error", "pattern"),
    [
        (np.zeros(3, np.int64), {}, TypeError, "received dtype int64; cast it explicitly"),
        (np.zeros(3, np.float16), {}, TypeError, "received dtype float16"),
        (np.zeros(3, bool), {}, TypeError, "received dtype bool"),
        (np.uint8(3), {}, ValueError, "between 1 and 255 dimensions"),
        ([1, 2, 3], {}, TypeError, "'array' must be a NumPy array"),
        (np.zeros(3, np.uint8), {"gzip": "yes"}, TypeError, "'gzip' must be a bool"),
    ],
)
def test_write_idx_bad_arguments(tmp_path, array, kwargs, error, pattern):
    with pytest.raises(error, match=f"write_idx: .*{pattern}"):
        write_idx(tmp_path / "out.idx", array, **kwargs)


def test_idx_bad_path_type():
    with pytest.raises(TypeError, match=r"read_idx: 'path' must be a str or os.PathLike"):
        read_idx(3)
    with pytest.raises(TypeError, match=r"write_idx: 'path' must be a str or os.PathLike"):
        write_idx(None, np.zeros(2, np.uint8))


# ---------------------------------------------------------------- load_idx

STANDARD_NAMES = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)
DOTTED_NAMES = (
    "train-images.idx3-ubyte.gz",
    "train-labels.idx1-ubyte",
    "t10k-images.idx3-ubyte",
    "t10k-labels.idx1-ubyte.gz",
)


def _fake_mnist(directory, names=STANDARD_NAMES, n_train=6, n_test=4, rng_seed=0):
    """Write a tiny MNIST-like directory (5x4 images, labels 0..4)."""
    rng = np.random.default_rng(rng_seed)
    arrays = {
        "train_x": rng.integers(0, 256, size=(n_train, 5, 4), dtype=np.uint8),
        "train_y": np.array([0, 1, 4, 2, 1, 0][:n_train], dtype=np.uint8),
        "test_x": rng.integers(0, 256, size=(n_test, 5, 4), dtype=np.uint8),
        "test_y": np.array([3, 0, 1, 2][:n_test], dtype=np.uint8),
    }
    arrays["train_x"][0, 0, :2] = [0, 255]
    directory.mkdir(exist_ok=True)
    for name, key in zip(names, ("train_x", "train_y", "test_x", "test_y"), strict=True):
        write_idx(directory / name, arrays[key], gzip=name.endswith(".gz"))
    return arrays


@pytest.mark.parametrize("names", [STANDARD_NAMES, DOTTED_NAMES])
def test_load_idx_fake_mnist(tmp_path, names):
    directory = tmp_path / "fake-mnist"
    arrays = _fake_mnist(directory, names)
    ds = load_idx(directory)
    assert isinstance(ds, Dataset) and ds.name == "fake-mnist"
    assert ds.x_train.shape == (6, 5, 4, 1) and ds.x_test.shape == (4, 5, 4, 1)
    assert ds.x_train.dtype == np.float32 and ds.y_train.dtype == np.int64
    assert ds.input_shape == (5, 4, 1)
    assert ds.num_classes == 5
    assert ds.x_train.min() == 0 and ds.x_train.max() == 1
    np.testing.assert_allclose(ds.x_train[..., 0], arrays["train_x"] / 255, rtol=1e-6)
    np.testing.assert_allclose(ds.x_test[..., 0], arrays["test_x"] / 255, rtol=1e-6)
    np.testing.assert_array_equal(ds.y_train, arrays["train_y"])
    np.testing.assert_array_equal(ds.y_test, arrays["test_y"])
    via_spec = load_dataset(f"idx:{directory}")
    np.testing.assert_array_equal(via_spec.x_test, ds.x_test)


def test_load_idx_gzip_variant_of_standard_names(tmp_path):
    names = tuple(name + ".gz" for name in STANDARD_NAMES)
    arrays = _fake_mnist(tmp_path / "gz", names)
    np.testing.assert_array_equal(load_idx(tmp_path / "gz").y_train, arrays["train_y"])


def test_load_idx_missing_file(tmp_path):
    directory = tmp_path / "mnist"
    _fake_mnist(directory)
    (directory / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match=r"load_idx: no test labels file in .*mnist"):
        load_idx(directory)


def test_load_idx_missing_directory(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"load_idx: directory .*absent.* does not exist"):
        load_idx(tmp_path / "absent")
    with pytest.raises(TypeError, match=r"load_idx: 'directory' must be a str or os.PathLike"):
        load_idx(42)


def test_load_idx_count_mismatch(tmp_path):
    directory = tmp_path / "mnist"
    _fake_mnist(directory)
    write_idx(directory / "train-labels-idx1-ubyte", np.zeros(5, np.uint8))
    pattern = r"load_idx: .*holds 6 images but .*train-labels-idx1-ubyte.* holds 5 labels"
    with pytest.raises(ValueError, match=pattern):
        load_idx(directory)


def test_load_idx_corrupted_file_names_the_file(tmp_path):
    directory = tmp_path / "mnist"
    _fake_mnist(directory)
    path = directory / "t10k-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(ValueError, match=r"read_idx: .*t10k-images-idx3-ubyte.* truncated"):
        load_idx(directory)


@pytest.mark.parametrize(
    ("name", "array", "pattern"),
    [
        ("train-images-idx3-ubyte", np.zeros((6, 5, 4), np.float32), "must hold uint8 images"),
        ("train-images-idx3-ubyte", np.zeros((6, 20), np.uint8), "must hold uint8 images"),
        ("t10k-labels-idx1-ubyte", np.zeros((4, 1), np.uint8), "1-D array of integer labels"),
        ("t10k-labels-idx1-ubyte", np.zeros(4, np.float32), "1-D array of integer labels"),
        ("t10k-labels-idx1-ubyte", np.array([0, -1, 2, 1], np.int8), "negative label"),
        ("t10k-images-idx3-ubyte", np.zeros((4, 4, 5), np.uint8), "have shape"),
    ],
)
def test_load_idx_bad_contents(tmp_path, name, array, pattern):
    directory = tmp_path / "mnist"
    _fake_mnist(directory)
    write_idx(directory / name, array)
    with pytest.raises(ValueError, match=f"load_idx: .*{pattern}"):
        load_idx(directory)


# ---------------------------------------------------------------- load_dataset


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
        "Dataset(name='tiny', train=3, test=2, input_shape=(2, 1), num_classes=3, "
        "dtype=float32)"
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


# ---------------------------------------------------------------- batching


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize(("n", "batch_size"), [(103, 10), (100, 10), (5, 8), (1, 1), (0, 4)])
def test_batches_cover_each_example_once(n, batch_size, drop_last):
    x = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    y = np.arange(n) * 3
    seen, sizes = [], []
    for xb, yb in batches(x, y, batch_size, rng=5, drop_last=drop_last):
        np.testing.assert_array_equal(xb[:, 0], 2 * yb / 3)
        seen.append(yb // 3)
        sizes.append(len(yb))
    assert len(sizes) == num_batches(n, batch_size, drop_last)
    seen = np.concatenate(seen) if seen else np.zeros(0, int)
    if drop_last:
        assert all(size == batch_size for size in sizes)
        assert len(seen) == (n // batch_size) * batch_size
        assert len(np.unique(seen)) == len(seen)
    else:
        assert sizes[:-1] == [batch_size] * (len(sizes) - 1)
        np.testing.assert_array_equal(np.sort(seen), np.arange(n))


def test_batches_shuffle_is_seeded():
    x = np.arange(50)

    def order(rng):
        return np.concatenate(list(batches(x, batch_size=7, rng=rng)))

    np.testing.assert_array_equal(order(3), order(3))
    np.testing.assert_array_equal(order(np.random.default_rng(3)), order(3))
    assert not np.array_equal(order(3), order(4))
    assert not np.array_equal(order(3), x)
    generator = np.random.default_rng(0)
    assert not np.array_equal(order(generator), order(generator))  # the generator advances


def test_batches_without_shuffle_are_ordered_views():
    x = np.arange(24, dtype=np.float64).reshape(12, 2)
    parts = list(batches(x, batch_size=5, shuffle=False))
    assert [len(p) for p in parts] == [5, 5, 2]
    np.testing.assert_array_equal(np.concatenate(parts), x)
    assert all(np.shares_memory(p, x) for p in parts)


def test_batches_default_rng_leaves_global_state_unchanged():
    before = _global_states()
    parts = list(batches(np.arange(20), batch_size=6))
    _assert_same_states(before, _global_states())
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(20))


def test_batches_keeps_dtypes_and_trailing_shape():
    x = np.zeros((9, 4, 4, 1), np.float32)
    y = np.zeros(9, np.int64)
    for xb, yb in batches(x, y, 4, rng=0):
        assert xb.dtype == np.float32 and xb.shape[1:] == (4, 4, 1) and yb.dtype == np.int64
    assert [b.shape for b in batches([[1, 2], [3, 4], [5, 6]], batch_size=2, shuffle=False)] == [
        (2, 2),
        (1, 2),
    ]


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "pattern"),
    [
        ((np.zeros(4),), {"batch_size": 0}, ValueError, "'batch_size' must be an int >= 1"),
        ((np.zeros(4),), {"batch_size": 2.5}, TypeError, "'batch_size' must be an int >= 1"),
        ((np.zeros(4),), {"batch_size": True}, TypeError, "'batch_size' must be an int >= 1"),
        ((np.zeros(4), np.zeros(3)), {}, ValueError, "4 in 'x' and 3 in 'y'"),
        ((np.float32(1),), {}, ValueError, "'x' must have a leading example axis"),
        (("abc",), {}, TypeError, "'x' must be an array"),
        ((np.zeros(4), 7), {}, TypeError, "'y' must be an array"),
        ((np.zeros(4),), {"rng": -1}, ValueError, "'rng' must be an int seed >= 0"),
        ((np.zeros(4),), {"rng": "seed"}, TypeError, "'rng' must be a numpy.random.Generator"),
        ((np.zeros(4),), {"shuffle": 1}, TypeError, "'shuffle' must be a bool"),
        ((np.zeros(4),), {"drop_last": None}, TypeError, "'drop_last' must be a bool"),
    ],
)
def test_batches_bad_inputs_fail_at_call_time(args, kwargs, error, pattern):
    with pytest.raises(error, match=f"batches: .*{pattern}"):
        batches(*args, **kwargs)  # no next(): validation is eager


@pytest.mark.parametrize(
    ("args", "error", "pattern"),
    [
        ((-1, 4), ValueError, "'n' must be an int >= 0"),
        ((1.5, 4), TypeError, "'n' must be an int >= 0"),
        ((10, 0), ValueError, "'batch_size' must be an int >= 1"),
        ((10, 3, "no"), TypeError, "'drop_last' must be a bool"),
    ],
)
def test_num_batches_bad_inputs(args, error, pattern):
    with pytest.raises(error, match=f"num_batches: .*{pattern}"):
        num_batches(*args)


def test_num_batches_values():
    assert num_batches(10, 3) == 4 and num_batches(10, 3, drop_last=True) == 3
    assert num_batches(9, 3) == 3 == num_batches(9, 3, True)
    assert num_batches(0, 5) == 0 and num_batches(2, 5, True) == 0
