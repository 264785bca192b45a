"""TensorBoard's summary records, made with the ``tensorboard`` package's protocol buffers
(no TensorFlow): scalars, histograms and PNG images, and the grids of pictures that
:class:`~handgrad.training.TensorBoard` draws.

A scalar is a float64 tensor of the ``scalars`` plugin (so a value read back equals the
Python float logged); a histogram is a ``HistogramProto`` of 30 equal buckets over the
finite values; an image is a PNG, 8 bits per channel, gray or RGB.
"""

from __future__ import annotations

import math
import struct
import time
import zlib

import numpy as np

from .._device import to_host

BUCKETS = 30
INSTALL = 'pip install "handgrad[tensorboard]"  (or pip install tensorboard)'


def require(op):
    """The ``tensorboard`` modules used here, or an ImportError that says how to get
    them."""
    try:
        from tensorboard.compat.proto import (
            event_pb2,
            summary_pb2,
            tensor_pb2,
            tensor_shape_pb2,
            types_pb2,
        )
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError as error:
        raise ImportError(f"{op} writes its logs with the tensorboard package, which is not "
                          f"installed ({error}); {INSTALL}") from None
    return event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2, EventFileWriter


def host(array) -> np.ndarray:
    """``array`` as a NumPy array (a CuPy array is copied to the host)."""
    return np.asarray(to_host(array))


class Records:
    """Makes ``Summary.Value`` records and wraps them in ``Event`` records."""

    def __init__(self, op):
        (self.event_pb2, self.summary_pb2, self.tensor_pb2, self.tensor_shape_pb2,
         self.types_pb2, self.EventFileWriter) = require(op)
        plugin = self.summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
        self._scalar_metadata = self.summary_pb2.SummaryMetadata(plugin_data=plugin)

    def event(self, step, values):
        """An Event at ``step`` holding the Summary of ``values`` (None entries left out)."""
        summary = self.summary_pb2.Summary(value=[v for v in values if v is not None])
        return self.event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary)

    def scalar(self, tag, value):
        """``value`` (a float) as a float64 scalar tensor."""
        tensor = self.tensor_pb2.TensorProto(
            dtype=self.types_pb2.DT_DOUBLE, double_val=[float(value)],
            tensor_shape=self.tensor_shape_pb2.TensorShapeProto())
        return self.summary_pb2.Summary.Value(tag=tag, tensor=tensor,
                                              metadata=self._scalar_metadata)

    def histogram(self, tag, values):
        """The histogram of the finite entries of ``values`` (any shape); None when there
        are none. ``num`` is their count, the buckets' upper edges ``bucket_limit``."""
        flat = host(values).ravel()
        if not flat.size:
            return None
        low, high = float(flat.min()), float(flat.max())
        if not (math.isfinite(low) and math.isfinite(high)):  # NaN or inf among them
            flat = flat[np.isfinite(flat)]
            if not flat.size:
                return None
            low, high = float(flat.min()), float(flat.max())
        counts, edges = np.histogram(flat, BUCKETS, (low, high))  # low == high: +-0.5
        proto = self.summary_pb2.HistogramProto(
            min=low, max=high, num=float(flat.size), sum=float(flat.sum(dtype=np.float64)),
            sum_squares=float(np.dot(flat, flat)), bucket_limit=edges[1:].tolist(),
            bucket=counts.astype(np.float64).tolist())
        return self.summary_pb2.Summary.Value(tag=tag, histo=proto)

    def image(self, tag, pixels):
        """``pixels`` (H, W, C) in [0, 1], C 1 or 3, as a PNG image."""
        height, width, channels = pixels.shape
        image = self.summary_pb2.Summary.Image(
            height=height, width=width, colorspace=channels,
            encoded_image_string=png(np.round(pixels * 255.0).astype(np.uint8)))
        return self.summary_pb2.Summary.Value(tag=tag, image=image)


def png(pixels) -> bytes:
    """The PNG file of ``pixels``, uint8 (H, W, C) with C 1 (gray) or 3 (RGB)."""
    height, width, channels = pixels.shape
    rows = np.concatenate([np.zeros((height, 1), np.uint8),  # filter type 0 per row
                           pixels.reshape(height, width * channels)], axis=1)

    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", width, height, 8, {1: 0, 3: 2}[channels], 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(rows.tobytes())) + chunk(b"IEND", b""))


def grid(tiles, columns=None) -> np.ndarray:
    """Tiles (n, h, w, c) laid out row by row, ``columns`` per row (default
    ceil(sqrt(n))), one black pixel between them: (rows*h + rows-1, columns*w +
    columns-1, c)."""
    n, h, w, c = tiles.shape
    columns = columns or math.ceil(math.sqrt(n))
    rows = math.ceil(n / columns)
    out = np.zeros((rows * (h + 1) - 1, columns * (w + 1) - 1, c), tiles.dtype)
    for index, tile in enumerate(tiles):
        top, left = divmod(index, columns)
        out[top * (h + 1): top * (h + 1) + h, left * (w + 1): left * (w + 1) + w] = tile
    return out


def unit_range(values) -> np.ndarray:
    """``values`` in [0, 1]: as they are when already there, ``(v + 1) / 2`` when in
    [-1, 1] (a tanh output), else scaled from their minimum to their maximum."""
    values = host(values).astype(np.float64)
    low, high = float(values.min()), float(values.max())
    if low >= 0.0 and high <= 1.0:
        return values
    if low >= -1.0 and high <= 1.0:
        return (values + 1.0) / 2.0
    return (values - low) / (high - low) if high > low else np.zeros_like(values)


def as_tiles(examples) -> np.ndarray:
    """Examples (n, ...) as image tiles (n, h, w, c): (n, V) as V = s*s squares (else
    rows of V pixels), (n, H, W) gray, (n, H, W, C) RGB for C = 3, else its first channel;
    more axes are flattened."""
    examples = host(examples)
    n = len(examples)
    if examples.ndim == 4:
        return examples if examples.shape[3] in (1, 3) else examples[..., :1]
    if examples.ndim == 3:
        return examples[..., None]
    flat = examples.reshape(n, -1)
    side = math.isqrt(flat.shape[1])
    shape = (side, side) if side * side == flat.shape[1] else (1, flat.shape[1])
    return flat.reshape(n, *shape, 1)


def filter_tiles(kernel) -> np.ndarray:
    """A convolution kernel (*spatial, C_in, C_out) as tiles in [0, 1], 0.5 for a zero
    weight (scaled by the largest magnitude): one RGB tile per output channel when C_in
    is 3, else one gray tile per (output, input) channel pair; a 1-D kernel's taps run
    along a row."""
    kernel = host(kernel).astype(np.float64)
    *spatial, c_in, c_out = kernel.shape
    h, w = (1, spatial[0]) if len(spatial) == 1 else (spatial[0], math.prod(spatial[1:]))
    scale = float(np.abs(kernel).max())
    kernel = 0.5 + kernel / (2.0 * scale) if scale > 0 else np.full(kernel.shape, 0.5)
    per_output = np.moveaxis(kernel.reshape(h, w, c_in, c_out), 3, 0)  # (C_out, h, w, C_in)
    if c_in == 3:
        return per_output
    return np.moveaxis(per_output, 3, 1).reshape(c_out * c_in, h, w, 1)
