"""IDX files, the format MNIST (and Fashion-MNIST, KMNIST, EMNIST) ships in.

An IDX file is a 4-byte magic number ``0x00 0x00 <dtype> <ndim>``, then
``ndim`` big-endian ``uint32`` dimensions, then the data, big-endian, in
row-major order. Type codes: ``0x08`` ubyte, ``0x09`` byte, ``0x0B`` short,
``0x0C`` int, ``0x0D`` float, ``0x0E`` double. Files may be gzip-compressed;
compression is detected from the gzip magic bytes ``1f 8b``, not the name.
"""

from __future__ import annotations

import gzip as gzip_module
import math
import os
import zlib
from pathlib import Path

import numpy as np

from .._checks import describe, is_int
from .dataset import Dataset

MAX_CLASSES = 2**16  # the most classes load_idx derives from the labels alone

_CODE_TO_DTYPE = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_KIND_TO_CODE = {(dt.kind, dt.itemsize): code for code, dt in _CODE_TO_DTYPE.items()}
_GZIP_MAGIC = b"\x1f\x8b"

# File names tried in order for each role; each is also tried with a ".gz" suffix.
_MNIST_FILES = {
    "train images": ("train-images-idx3-ubyte", "train-images.idx3-ubyte"),
    "train labels": ("train-labels-idx1-ubyte", "train-labels.idx1-ubyte"),
    "test images": ("t10k-images-idx3-ubyte", "t10k-images.idx3-ubyte"),
    "test labels": ("t10k-labels-idx1-ubyte", "t10k-labels.idx1-ubyte"),
}


def _as_path(op: str, path) -> Path:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{op}: 'path' must be a str or os.PathLike; received {describe(path)}")
    return Path(path)


def _read_bytes(op: str, path: Path) -> bytes:
    if not path.is_file():
        raise FileNotFoundError(f"{op}: IDX file {str(path)!r} does not exist")
    raw = path.read_bytes()
    if raw[:2] != _GZIP_MAGIC:
        return raw
    try:
        return gzip_module.decompress(raw)
    except (OSError, EOFError, zlib.error) as error:
        raise ValueError(
            f"{op}: {str(path)!r} starts with the gzip magic bytes but is not a valid gzip "
            f"stream (truncated or corrupted?): {error}"
        ) from error


def read_idx(path) -> np.ndarray:
    """Read an IDX file (plain or gzip) into a native-byte-order NumPy array.

    Returns an array of the stored shape and dtype (uint8, int8, int16, int32,
    float32 or float64). Raises ``FileNotFoundError`` for a missing file and
    ``ValueError`` naming the file for a bad magic number, an unknown type
    code, a truncated header or a data size that disagrees with the header.
    """
    op = "read_idx"
    path = _as_path(op, path)
    raw = _read_bytes(op, path)
    name = repr(str(path))
    if len(raw) < 4:
        raise ValueError(
            f"{op}: {name} is too short for an IDX header: {len(raw)} bytes, need at least 4"
        )
    if raw[0] != 0 or raw[1] != 0:
        raise ValueError(
            f"{op}: {name} has bad magic number 0x{raw[:4].hex()}; an IDX file starts with "
            "two zero bytes, a type code and the number of dimensions"
        )
    code, ndim = raw[2], raw[3]
    if code not in _CODE_TO_DTYPE:
        known = ", ".join(f"0x{c:02X}" for c in _CODE_TO_DTYPE)
        raise ValueError(f"{op}: {name} has unknown IDX type code 0x{code:02X}; expected {known}")
    if ndim == 0:
        raise ValueError(f"{op}: {name} declares 0 dimensions; expected at least 1")
    header_size = 4 + 4 * ndim
    if len(raw) < header_size:
        raise ValueError(
            f"{op}: {name} is truncated inside its header: {ndim} dimensions need "
            f"{header_size} header bytes, the file has {len(raw)}"
        )
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = _CODE_TO_DTYPE[code]
    expected = math.prod(shape) * dtype.itemsize  # Python ints: no int64 overflow
    actual = len(raw) - header_size
    if actual != expected:
        problem = "truncated" if actual < expected else "has trailing bytes"
        raise ValueError(
            f"{op}: {name} {problem}: the header declares shape {shape} of {dtype.name} "
            f"({expected} data bytes) but the file holds {actual} data bytes"
        )
    data = np.frombuffer(raw, dtype=dtype, offset=header_size).reshape(shape)
    return data.astype(dtype.newbyteorder("="), copy=True)


def write_idx(path, array, gzip: bool = False) -> None:
    """Write ``array`` (uint8, int8, int16, int32, float32 or float64, ndim 1 to
    255, every dimension < 2**32) as an IDX file; ``gzip=True`` compresses it.

    The dtype is never converted silently: cast first, e.g. labels with
    ``labels.astype(np.uint8)``.
    """
    op = "write_idx"
    path = _as_path(op, path)
    if not isinstance(gzip, (bool, np.bool_)):
        raise TypeError(f"{op}: 'gzip' must be a bool; received {describe(gzip)}")
    if not (hasattr(array, "dtype") and hasattr(array, "shape")):
        raise TypeError(f"{op}: 'array' must be a NumPy array; received {describe(array)}")
    array = np.asarray(array)
    code = _KIND_TO_CODE.get((array.dtype.kind, array.dtype.itemsize))
    if code is None:
        raise TypeError(
            f"{op}: 'array' must have dtype uint8, int8, int16, int32, float32 or float64 "
            f"(the IDX types); received dtype {array.dtype}; cast it explicitly"
        )
    if not 1 <= array.ndim <= 255:
        raise ValueError(
            f"{op}: 'array' must have between 1 and 255 dimensions; received {describe(array)}"
        )
    if any(d >= 2**32 for d in array.shape):
        raise ValueError(
            f"{op}: every dimension of 'array' must be < 2**32; received shape {array.shape}"
        )
    header = bytes([0, 0, code, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    payload = header + np.ascontiguousarray(array, dtype=_CODE_TO_DTYPE[code]).tobytes()
    if gzip:
        payload = gzip_module.compress(payload)
    path.write_bytes(payload)


def _find_file(directory: Path, role: str) -> Path:
    candidates = [n + suffix for n in _MNIST_FILES[role] for suffix in ("", ".gz")]
    for candidate in candidates:
        if (directory / candidate).is_file():
            return directory / candidate
    raise FileNotFoundError(
        f"load_idx: no {role} file in {str(directory)!r}; looked for " + ", ".join(candidates)
    )


def _read_split(directory: Path, split: str):
    """``(x, y, image_path, label_path)`` for ``split`` ("train" or "test") of an
    MNIST directory; refuses an empty split."""
    op = "load_idx"
    image_path = _find_file(directory, f"{split} images")
    label_path = _find_file(directory, f"{split} labels")
    images, labels = read_idx(image_path), read_idx(label_path)
    if images.dtype != np.uint8 or images.ndim not in (3, 4) or 0 in images.shape[1:]:
        raise ValueError(
            f"{op}: {str(image_path)!r} must hold uint8 images of shape (N, H, W) or "
            f"(N, H, W, C), every size >= 1; it holds {describe(images)}"
        )
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(
            f"{op}: {str(label_path)!r} must hold a 1-D array of integer labels; "
            f"it holds {describe(labels)}"
        )
    if images.shape[0] != labels.shape[0]:
        raise ValueError(
            f"{op}: {str(image_path)!r} holds {images.shape[0]} images but "
            f"{str(label_path)!r} holds {labels.shape[0]} labels"
        )
    if images.shape[0] == 0:
        raise ValueError(
            f"{op}: {str(image_path)!r} holds no {split} examples; a dataset needs at least "
            f"one training and one test example"
        )
    if images.ndim == 3:
        images = images[..., None]
    x = images.astype(np.float32)
    x *= np.float32(1 / 255)
    return x, labels.astype(np.int64), image_path, label_path


def _check_labels(op: str, labels, path: Path, num_classes, derived: bool):
    """Labels must be class indices in ``[0, num_classes)``."""
    low, high = int(labels.min()), int(labels.max())
    if low >= 0 and high < num_classes:
        return
    found = f"a negative label ({low})" if low < 0 else f"the label {high}"
    hint = (f"; pass num_classes to load_idx for more than {MAX_CLASSES} classes" if derived
            else "")
    raise ValueError(
        f"{op}: {str(path)!r} holds {found}; labels must be class indices in "
        f"[0, {num_classes}){hint}"
    )


def load_idx(directory, num_classes=None) -> Dataset:
    """Load an MNIST-style directory of IDX files as a :class:`Dataset`.

    Looks for ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
    ``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte`` (also the
    ``train-images.idx3-ubyte`` spelling, each optionally ending in ``.gz``).
    Images become ``(N, H, W, 1)`` float32 in ``[0, 1]``, labels int64. Labels
    must lie in ``[0, num_classes)``; ``num_classes=None`` means the largest
    label + 1, at most ``MAX_CLASSES``. Both splits must hold examples.
    """
    op = "load_idx"
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(
            f"{op}: 'directory' must be a str or os.PathLike; received {describe(directory)}"
        )
    if num_classes is not None and not (is_int(num_classes) and num_classes >= 1):
        raise ValueError(
            f"{op}: 'num_classes' must be None or an int >= 1; received {describe(num_classes)}"
        )
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"{op}: directory {str(directory)!r} does not exist")
    x_train, y_train, train_path, train_labels = _read_split(directory, "train")
    x_test, y_test, test_path, test_labels = _read_split(directory, "test")
    if x_train.shape[1:] != x_test.shape[1:]:
        raise ValueError(
            f"{op}: train images {str(train_path)!r} have shape {x_train.shape[1:]} but test "
            f"images {str(test_path)!r} have shape {x_test.shape[1:]}"
        )
    derived = num_classes is None
    limit = MAX_CLASSES if derived else int(num_classes)
    for labels, path in ((y_train, train_labels), (y_test, test_labels)):
        _check_labels(op, labels, path, limit, derived)
    if derived:
        num_classes = max(int(y_train.max()), int(y_test.max())) + 1
    name = directory.resolve().name or str(directory)
    return Dataset(x_train, y_train, x_test, y_test, int(num_classes), name)
