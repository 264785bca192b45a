"""The safetensors file format, read and written with NumPy alone (no pickle).

Layout: an 8-byte little-endian header length, a JSON header mapping each tensor
name to ``{"dtype", "shape", "data_offsets"}`` (plus an optional ``__metadata__``
dict of strings), then the raw little-endian C-order bytes of every tensor.
"""

from __future__ import annotations

import json
import math
import os
import struct
import tempfile

import numpy as np

from .._checks import describe, is_int
from .._device import to_host

DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
    "I32": np.int32, "I16": np.int16, "I8": np.int8, "U64": np.uint64, "U32": np.uint32,
    "U16": np.uint16, "U8": np.uint8, "BOOL": np.bool_,
}
CODES = {np.dtype(v): k for k, v in DTYPES.items()}
ENTRY_KEYS = frozenset({"dtype", "shape", "data_offsets"})
MAX_HEADER = 100_000_000  # bytes: the reference implementation's limit
MAX_DIMS = 64  # NumPy's limit
MAX_BYTES = np.iinfo(np.intp).max  # the largest array NumPy can describe


def write(path, tensors: dict, metadata: dict | None = None):
    """Write ``tensors`` (name -> array) atomically: a temporary file, then a rename.
    ``metadata`` maps strings to strings, as the format requires."""
    header, chunks, offset = {}, [], 0
    for name, array in tensors.items():
        if not isinstance(name, str) or name == "__metadata__":
            raise TypeError(f"safetensors: tensor names must be strings other than "
                            f"'__metadata__'; received {describe(name)}")
        array = np.asarray(to_host(array))  # a GPU array is written from a host copy
        native = array.dtype.newbyteorder("=")
        if native not in CODES:
            raise TypeError(f"safetensors: tensor {name!r} has unsupported dtype {array.dtype}")
        # Contiguous little-endian bytes; transposed views are copied, not mis-written.
        data = np.ascontiguousarray(array, dtype=native.newbyteorder("<")).tobytes()
        header[name] = {"dtype": CODES[native], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    if metadata:
        for key, value in metadata.items():
            if not (isinstance(key, str) and isinstance(value, str)):
                raise TypeError(f"safetensors: 'metadata' must map strings to strings; entry "
                                f"{key!r} is {describe(value)}")
        header["__metadata__"] = dict(metadata)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".safetensors", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(struct.pack("<Q", len(encoded)))
            out.write(encoded)
            for chunk in chunks:
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would survive the rename
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def loads_unique(text, where):
    """``json.loads`` where a key repeated in one object (the last would silently win) is a
    ValueError naming ``where`` and the key."""

    def unique(pairs):
        seen = {}
        for key, value in pairs:
            if key in seen:
                raise ValueError(f"{where}: the key {key!r} appears twice in one object")
            seen[key] = value
        return seen

    return json.loads(text, object_pairs_hook=unique)


def _parse_header(where, raw):
    """The JSON header as a dict."""
    try:
        header = loads_unique(raw.decode(), f"{where} has a corrupted header")
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        message = str(error)
        if not message.startswith(where):
            message = f"{where} has a corrupted header: {message}"
        raise ValueError(message) from None
    if not isinstance(header, dict):
        raise ValueError(f"{where} has a corrupted header: not a JSON object")
    return header


def _metadata(where, metadata):
    """``__metadata__``: absent, null or an object mapping strings to strings."""
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise ValueError(f"{where}: '__metadata__' must be an object of strings; received "
                         f"{describe(metadata)}")
    for key, value in metadata.items():
        if not isinstance(value, str):
            raise ValueError(f"{where}: '__metadata__' entry {key!r} must be a string; "
                             f"received {describe(value)}")
    return metadata


def _entry(where, name, info):
    """``(dtype, shape, (begin, end))`` of one header entry, every field checked."""
    bad = f"{where}: tensor {name!r} has a malformed entry"
    if not isinstance(info, dict):
        raise ValueError(f"{bad}: expected an object with {sorted(ENTRY_KEYS)}; received "
                         f"{describe(info)}")
    if set(info) != ENTRY_KEYS:
        raise ValueError(f"{bad}: missing keys {sorted(ENTRY_KEYS - set(info))}, unexpected "
                         f"keys {sorted(set(info) - ENTRY_KEYS)}")
    code, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if not isinstance(code, str) or code not in DTYPES:
        raise ValueError(f"{bad}: 'dtype' must be one of {sorted(DTYPES)}; received {code!r}")
    if (not isinstance(shape, list) or len(shape) > MAX_DIMS
            or not all(is_int(d) and d >= 0 for d in shape)):
        raise ValueError(f"{bad}: 'shape' must be a list of at most {MAX_DIMS} integers >= 0; "
                         f"received {shape!r}")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(
            is_int(v) and v >= 0 for v in offsets):
        raise ValueError(f"{bad}: 'data_offsets' must be a list [begin, end] of two integers "
                         f">= 0; received {offsets!r}")
    dtype = np.dtype(DTYPES[code]).newbyteorder("<")
    # Python integers: a product such as 2**32 * 2**32 cannot wrap around to 0.
    if math.prod(max(d, 1) for d in shape) * dtype.itemsize > MAX_BYTES:
        raise ValueError(f"{bad}: 'shape' {shape} describes more than {MAX_BYTES} bytes")
    return dtype, tuple(shape), tuple(offsets)


def read(path):
    """``(tensors, metadata)`` from a safetensors file; a truncated, corrupted or malformed
    file raises a ValueError that names the file, the tensor or field and what is wrong."""
    with open(path, "rb") as f:
        blob = f.read()
    where = f"safetensors file {str(path)!r}"
    if len(blob) < 8:
        raise ValueError(f"{where} is truncated: {len(blob)} bytes, no header length")
    (size,) = struct.unpack("<Q", blob[:8])
    if size > len(blob) - 8:
        raise ValueError(f"{where} is truncated or corrupted: header of {size} bytes but only "
                         f"{len(blob) - 8} follow")
    if size > MAX_HEADER:
        raise ValueError(f"{where} is corrupted: a header of {size} bytes exceeds the format's "
                         f"limit of {MAX_HEADER}")
    header = _parse_header(where, blob[8:8 + size])
    metadata = _metadata(where, header.pop("__metadata__", None))
    data = memoryview(blob)[8 + size:]
    tensors, spans = {}, []
    for name, info in header.items():
        dtype, shape, (start, end) = _entry(where, name, info)
        expected = math.prod(shape) * dtype.itemsize
        if not start <= end <= len(data) or end - start != expected:
            raise ValueError(f"{where} is truncated or corrupted: tensor {name!r} needs bytes "
                             f"[{start}, {end}) ({expected} expected) of {len(data)}")
        spans.append((start, end))
        array = np.frombuffer(data[start:end], dtype=dtype).reshape(shape)
        tensors[name] = array.astype(dtype.newbyteorder("="), copy=True)
    position = 0
    for start, end in sorted(spans):
        if start != position:
            raise ValueError(f"{where} is corrupted: tensor data overlaps or leaves a gap at "
                             f"byte {position}")
        position = end
    if position != len(data):
        raise ValueError(f"{where} is corrupted: {len(data) - position} bytes after the last "
                         f"tensor")
    return tensors, metadata
