"""Tests for handgrad.data's IDX reader/writer and load_idx (MNIST file format)."""

import gzip
import struct

import numpy as np
import pytest

from handgrad.data import Dataset, load_dataset, load_idx, read_idx, write_idx

from tolerances import assert_entries_close

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
        (gzip.compress(_valid_idx_bytes(), mtime=0)[:-6], "not a valid gzip stream"),
        (b"\x1f\x8b" + b"garbage" * 3, "not a valid gzip stream"),
        (gzip.compress(_valid_idx_bytes()[:-2], mtime=0), "truncated"),
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
    for got, pixels in ((ds.x_train, arrays["train_x"]), (ds.x_test, arrays["test_x"])):
        # one rounded division (at most two roundings, by way of float64), entry by entry
        assert_entries_close(got[..., 0], pixels / 255, dtype=np.float32, terms=2,
                             what="pixels")
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
