"""The safetensors file format, read and written with NumPy alone (no pickle).

Layout: an 8-byte little-endian header length, a JSON header mapping each tensor
name to ``{"dtype", "shape", "data_offsets"}`` (plus an optional ``__metadata__``
dict of strings), then the raw little-endian C-order bytes of every tensor.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile

import numpy as np

DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "I64": np.int64,
    "I32": np.int32, "I16": np.int16, "I8": np.int8, "U64": np.uint64, "U32": np.uint32,
    "U16": np.uint16, "U8": np.uint8, "BOOL": np.bool_,
}
CODES = {np.dtype(v): k for k, v in DTYPES.items()}


def write(path, tensors: dict, metadata: dict | None = None):
    """Write ``tensors`` (name -> array) atomically: a temporary file, then a rename."""
    header, chunks, offset = {}, [], 0
    for name, array in tensors.items():
        array = np.asarray(array)
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
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
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


def read(path):
    """``(tensors, metadata)`` from a safetensors file; a truncated or corrupted file
    raises a ValueError that names the file and what is wrong."""
    with open(path, "rb") as f:
        blob = f.read()
    where = f"safetensors file {str(path)!r}"
    if len(blob) < 8:
        raise ValueError(f"{where} is truncated: {len(blob)} bytes, no header length")
    (size,) = struct.unpack("<Q", blob[:8])
    if size > len(blob) - 8:
        raise ValueError(f"{where} is truncated or corrupted: header of {size} bytes but only "
                         f"{len(blob) - 8} follow")
    try:
        header = json.loads(blob[8:8 + size].decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{where} has a corrupted header: {error}") from None
    if not isinstance(header, dict):
        raise ValueError(f"{where} has a corrupted header: not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    data = memoryview(blob)[8 + size:]
    tensors, spans = {}, []
    for name, info in header.items():
        try:
            dtype = np.dtype(DTYPES[info["dtype"]]).newbyteorder("<")
            shape = tuple(int(d) for d in info["shape"])
            start, end = (int(v) for v in info["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{where}: tensor {name!r} has a malformed entry {info!r}") from None
        expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        if not 0 <= start <= end <= len(data) or end - start != expected:
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
