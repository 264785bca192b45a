"""Validation and geometry of convolution arguments (shared with the reference twins)."""

from __future__ import annotations

from dataclasses import dataclass

from ..._checks import float_array, int_tuple, positive_int, same_dtype, upstream_grad
from .cache import Cache, check_cache
from .windows import (
    WindowAxis,
    WindowGeometry,
    check_not_empty,
    check_output_size,
    parse_padding,
    window_axes,
)

LAYOUTS = {1: "(N, L, C)", 2: "(N, H, W, C)", 3: "(N, D, H, W, C)"}
WEIGHT_LAYOUTS = {
    (1, False): "(K, C_in // groups, C_out)",
    (2, False): "(KH, KW, C_in // groups, C_out)",
    (1, True): "(K, C_out // groups, C_in)",
    (2, True): "(KH, KW, C_out // groups, C_in)",
    (3, False): "(KD, KH, KW, C_in // groups, C_out)",
    (3, True): "(KD, KH, KW, C_out // groups, C_in)",
}


@dataclass(frozen=True)
class ConvCall(Cache):
    """A validated convolution call (also the op's cache; ``op`` names the forward).

    ``axes`` always describe the *forward convolution* that relates the
    larger-channel-count side ``x_conv`` (N, *S, C_x) to ``y_conv`` (N, *O, C_y)
    through ``w`` (*K, C_x // groups, C_y). For a transposed convolution the
    op's input is ``y_conv`` and its output is ``x_conv``.
    """

    x: object
    w: object
    b: object
    axes: tuple[WindowAxis, ...]
    groups: int
    transposed: bool

    @property
    def conv_input_shape(self):
        """Shape of the forward convolution's input (the conv-transpose output)."""
        n = self.x.shape[0]
        channels = self.w.shape[-2] * self.groups
        return (n, *(a.size_in for a in self.axes), channels)

    @property
    def output_shape(self):
        """Shape of the op's output (and of the ``dy`` its backward takes)."""
        if self.transposed:
            return self.conv_input_shape
        return (self.x.shape[0], *(a.size_out for a in self.axes), self.w.shape[-1])


def open_conv_cache(op, forward, dy, cache):
    """``(call, dy)`` for a convolution backward: the cache ``forward`` returned, and
    ``dy`` checked against its output's shape and dtype."""
    call = check_cache(op, cache, forward, ConvCall)
    return call, upstream_grad(op, dy, call.output_shape, call.x.dtype)


def _check_common(op, x, w, b, nd, transposed, groups):
    x = check_not_empty(op, "x", float_array(op, "x", x, nd + 2, LAYOUTS[nd]), LAYOUTS[nd])
    layout = WEIGHT_LAYOUTS[nd, transposed]
    w = check_not_empty(op, "w", float_array(op, "w", w, nd + 2, layout), layout, first=0)
    if b is not None:
        b = float_array(op, "b", b, 1, "(C_out,)")
    same_dtype(op, x=x, w=w, b=b)
    groups = positive_int(op, "groups", groups)
    channels = x.shape[-1]
    # Conv: x has C_in, w's last axis is C_out. Conv-transpose: the roles swap.
    group_axis_name = "C_in" if transposed else "C_out"
    if transposed:
        if w.shape[-1] != channels:
            raise ValueError(
                f"{op}: 'w' of shape {tuple(w.shape)} expects C_in = {w.shape[-1]} input "
                f"channels (its last axis) but 'x' has {channels}"
            )
    elif channels % groups:
        raise ValueError(
            f"{op}: input channels ({channels}) must be divisible by groups ({groups})"
        )
    elif w.shape[-2] * groups != channels:
        raise ValueError(
            f"{op}: 'w' of shape {tuple(w.shape)} expects C_in // groups = {w.shape[-2]} "
            f"input channels per group, but 'x' has {channels} channels in {groups} "
            f"group(s) ({channels // groups} per group)"
        )
    if w.shape[-1] % groups:
        raise ValueError(
            f"{op}: {group_axis_name} = {w.shape[-1]} (last axis of 'w') must be divisible "
            f"by groups ({groups})"
        )
    out_channels = w.shape[-2] * groups if transposed else w.shape[-1]
    if b is not None and b.shape != (out_channels,):
        raise ValueError(
            f"{op}: 'b' must have shape ({out_channels},) to match the output channels; "
            f"received shape {tuple(b.shape)}"
        )
    return x, w, b, groups


def conv_window(op, spatial, kernel, stride, padding, dilation) -> WindowGeometry:
    """Geometry of a convolution over the spatial sizes ``spatial`` with kernel ``kernel``
    (validated ints); ``stride``, ``padding`` and ``dilation`` as the user gave them."""
    nd = len(spatial)
    stride = int_tuple(op, "stride", stride, nd)
    dilation = int_tuple(op, "dilation", dilation, nd)
    strings = ("valid", "same", "causal") if nd == 1 else ("valid", "same")
    pads = parse_padding(op, padding, nd, kernel, stride, dilation, spatial, strings)
    return WindowGeometry(window_axes(op, spatial, kernel, stride, dilation, pads), pads)


def conv_transpose_window(op, spatial, kernel, stride, padding, output_padding,
                          dilation) -> WindowGeometry:
    """Geometry of a transposed convolution whose input has the spatial sizes
    ``spatial``; its axes describe the adjoint convolution.

    Output size per axis (PyTorch): ``(in - 1) * stride - pad_before - pad_after
    + dilation * (kernel - 1) + 1 + output_padding``; the output padding goes after.
    """
    nd = len(spatial)
    stride = int_tuple(op, "stride", stride, nd)
    dilation = int_tuple(op, "dilation", dilation, nd)
    output_padding = int_tuple(op, "output_padding", output_padding, nd, minimum=0)
    for i, (op_pad, s, d) in enumerate(zip(output_padding, stride, dilation)):
        if op_pad >= max(s, d):
            raise ValueError(
                f"{op}: 'output_padding' along spatial axis {i} must be smaller than either "
                f"stride ({s}) or dilation ({d}); received {op_pad}"
            )
    # "same" for a transposed convolution: output = input * stride (TensorFlow).
    scaled = tuple(size * s for size, s in zip(spatial, stride))
    pads = parse_padding(op, padding, nd, kernel, stride, dilation, scaled)
    axes = []
    for i, (size, k, s, d, (before, after), extra) in enumerate(
        zip(spatial, kernel, stride, dilation, pads, output_padding)
    ):
        span = (k - 1) * d + 1
        size_out = (size - 1) * s - before - after + span + extra
        check_output_size(
            op, i, size_out,
            f"(input {size} - 1) * stride {s} + kernel span {span} + output_padding {extra} "
            f"is not larger than the padding {(before, after)}",
        )
        axes.append(WindowAxis(size_out, k, s, d, before, size))
    return WindowGeometry(tuple(axes), pads, transposed=True)


def prepare_conv(op, nd, x, w, b, stride, padding, dilation, groups) -> ConvCall:
    """Validate a conv{nd}d call and compute its geometry."""
    x, w, b, groups = _check_common(op, x, w, b, nd, False, groups)
    geometry = conv_window(op, tuple(x.shape[1:-1]), tuple(w.shape[:nd]), stride, padding,
                           dilation)
    return ConvCall(op, x, w, b, geometry.axes, groups, transposed=False)


def prepare_conv_transpose(
    op, nd, x, w, b, stride, padding, output_padding, dilation, groups
) -> ConvCall:
    """Validate a conv_transpose{nd}d call; its axes describe the adjoint convolution."""
    x, w, b, groups = _check_common(op, x, w, b, nd, True, groups)
    geometry = conv_transpose_window(op, tuple(x.shape[1:-1]), tuple(w.shape[:nd]), stride,
                                     padding, output_padding, dilation)
    return ConvCall(op, x, w, b, geometry.axes, groups, transposed=True)
