"""Sliding-window geometry shared by convolutions and pooling.

Along one spatial axis a window op is described by a :class:`WindowAxis`: input
size, kernel, stride, dilation, padding before, and the number of outputs.
Output ``o`` reads the (zero- or -inf-padded) input at positions
``o * stride + k * dilation - pad_before`` for ``k`` in ``range(kernel)``.
Everything else (PyTorch's output-size rules, ``ceil_mode``,
``output_padding``, ``"same"``) only decides ``pad_before`` and ``size_out``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from ..._checks import describe, is_int


@dataclass(frozen=True)
class WindowAxis:
    """Geometry of one spatial axis of a sliding-window op."""

    size_in: int
    kernel: int
    stride: int
    dilation: int
    pad_before: int
    size_out: int

    @property
    def extent(self) -> int:
        """Length of the padded input that the windows cover."""
        return (self.size_out - 1) * self.stride + (self.kernel - 1) * self.dilation + 1

    @property
    def pad_after(self) -> int:
        """Padding after the input (negative: trailing inputs no window reads)."""
        return self.extent - self.pad_before - self.size_in

    @property
    def padded_size(self) -> int:
        """Length of the input with its padding, long enough for every window (an input
        longer than the windows reach keeps its full length)."""
        return self.pad_before + self.size_in + max(self.pad_after, 0)

    def tap_slice(self, k: int) -> slice:
        """Positions in the padded input that kernel tap ``k`` reads, one per output."""
        start = k * self.dilation
        return slice(start, start + (self.size_out - 1) * self.stride + 1, self.stride)


@dataclass(frozen=True)
class WindowGeometry:
    """Resolved geometry of a convolution or pooling: one :class:`WindowAxis` per
    spatial axis and the user's padding as ``(before, after)`` pairs.

    The axes always describe a forward window op. For a transposed convolution they
    describe its adjoint convolution, whose input is the transposed convolution's
    output: ``input_size`` and ``output_size`` give the op's own view.
    """

    axes: tuple[WindowAxis, ...]
    padding: tuple[tuple[int, int], ...]
    transposed: bool = False

    @property
    def input_size(self) -> tuple[int, ...]:
        """Spatial size of the op's input."""
        return tuple(a.size_out if self.transposed else a.size_in for a in self.axes)

    @property
    def output_size(self) -> tuple[int, ...]:
        """Spatial size of the op's output."""
        return tuple(a.size_in if self.transposed else a.size_out for a in self.axes)

    @property
    def pads_begin(self) -> tuple[int, ...]:
        """Padding before the input, per axis (of the forward window op)."""
        return tuple(a.pad_before for a in self.axes)

    @property
    def pads_end(self) -> tuple[int, ...]:
        """Padding after the input that some window reads, per axis: ``max(pad_after, 0)``
        (of the forward window op)."""
        return tuple(max(a.pad_after, 0) for a in self.axes)


def parse_padding(op, padding, n, kernel, stride, dilation, size_in, strings=("valid", "same")):
    """Per-axis ``(before, after)`` padding from the user's ``padding`` argument.

    Accepts an int, a tuple of ``n`` ints, a tuple of ``n`` ``(before, after)``
    pairs, ``"valid"``, ``"same"`` (TensorFlow's rule: output = ceil(in /
    stride), the odd pixel after) and, where allowed, ``"causal"`` (all the
    padding before, 1-D only).
    """
    if isinstance(padding, str):
        if padding not in strings:
            allowed = ", ".join(repr(s) for s in strings)
            raise ValueError(
                f"{op}: 'padding' must be an int, a tuple, (before, after) pairs or one of "
                f"{allowed}; received {padding!r}"
            )
        if padding == "valid":
            return ((0, 0),) * n
        pads = []
        for i in range(n):
            span = (kernel[i] - 1) * dilation[i] + 1
            if padding == "causal":
                pads.append((span - 1, 0))
                continue
            out = -(-size_in[i] // stride[i])
            total = max((out - 1) * stride[i] + span - size_in[i], 0)
            pads.append((total // 2, total - total // 2))
        return tuple(pads)
    expected = f"an int >= 0, a tuple of {n} ints >= 0 or {n} (before, after) pairs"
    if is_int(padding):
        pairs = ((int(padding), int(padding)),) * n
    elif isinstance(padding, (tuple, list)) and len(padding) == n:
        pairs = []
        for p in padding:
            if is_int(p):
                pairs.append((int(p), int(p)))
            elif isinstance(p, (tuple, list)) and len(p) == 2 and all(is_int(v) for v in p):
                pairs.append((int(p[0]), int(p[1])))
            else:
                raise TypeError(f"{op}: 'padding' must be {expected}; received {padding!r}")
        pairs = tuple(pairs)
    else:
        raise TypeError(f"{op}: 'padding' must be {expected}; received {describe(padding)}")
    if any(v < 0 for pair in pairs for v in pair):
        raise ValueError(f"{op}: 'padding' must be {expected}; received {padding!r}")
    return pairs


def check_not_empty(op, name, array, layout, first=1):
    """Refuse an empty axis from ``first`` on: a window op's input may have N = 0 but no
    empty spatial axis or channel axis, and its weight no empty axis (as PyTorch)."""
    if 0 in array.shape[first:]:
        allowed = " (only N may be 0)" if first else ""
        raise ValueError(f"{op}: '{name}' {layout} must not have an empty axis{allowed}; "
                         f"received an array of shape {tuple(array.shape)}")
    return array


def check_output_size(op, axis_index, size_out, reason):
    """Raise a ValueError that says which axis is too small, and why."""
    if size_out < 1:
        raise ValueError(
            f"{op}: output size along spatial axis {axis_index} would be {size_out} < 1: {reason}"
        )


def window_axes(op, spatial_in, kernel, stride, dilation, pads, ceil_mode=False):
    """Axes of a convolution or pooling (PyTorch's output size)::

        out = floor((in + pads - span) / stride) + 1    (ceil with ``ceil_mode``)

    With ``ceil_mode`` the last window must start inside the input or the leading
    padding, so no window lies entirely in the trailing padding.
    """
    axes = []
    for i, (size, k, s, d, (before, after)) in enumerate(
        zip(spatial_in, kernel, stride, dilation, pads)
    ):
        span = (k - 1) * d + 1
        room = size + before + after - span
        size_out = (room + (s - 1 if ceil_mode else 0)) // s + 1
        if ceil_mode and (size_out - 1) * s >= size + before:
            size_out -= 1
        check_output_size(
            op, i, size_out,
            f"input size {size} padded by {(before, after)} is smaller than the dilated "
            f"kernel span {span}",
        )
        axes.append(WindowAxis(size, k, s, d, before, size_out))
    return tuple(axes)


def taps(axes):
    """Yield ``(tap_index, slices)`` for every kernel tap in row-major order."""
    ranges = [range(a.kernel) for a in axes]
    for index, offsets in enumerate(itertools.product(*ranges)):
        yield index, tuple(a.tap_slice(k) for a, k in zip(axes, offsets))


def pad_input(xp, x, axes, fill=0.0):
    """Pad (or crop) the spatial axes of ``x`` (N, *S, C) to the windows' extent."""
    widths = [(0, 0)] + [(a.pad_before, max(a.pad_after, 0)) for a in axes] + [(0, 0)]
    if any(w != (0, 0) for w in widths):
        x = xp.pad(x, widths, mode="constant", constant_values=fill)
    return x[(slice(None),) + tuple(slice(0, a.extent) for a in axes)]


def padded_zeros(xp, shape, axes, dtype):
    """A zero buffer large enough for both the input and every window, and the
    view of it that corresponds to the unpadded input."""
    full = [shape[0], *(a.padded_size for a in axes), shape[-1]]
    buffer = xp.zeros(full, dtype=dtype)
    inner = (slice(None),) + tuple(slice(a.pad_before, a.pad_before + a.size_in) for a in axes)
    return buffer, inner
