"""Optional compiled kernels for the memory-bound parts of convolution and pooling.

NumPy cannot fuse a gather, a comparison and a scatter into one pass, and those
passes (not the GEMMs) dominate pooling, depthwise convolution and col2im; convolutions
of narrow groups (or one narrow group), whose GEMMs are thin, sum in registers instead of im2col
+ GEMM (:mod:`.grouped_taps`, called by :mod:`.grouped_conv`). When
`numba` is installed (the ``fast`` extra) and the inputs are NumPy arrays, these
loops are compiled; otherwise, or with the environment variable ``HANDGRAD_NUMBA=0``,
the pure-NumPy code runs. Both paths compute the same thing and are tested against
each other and against torch.

A kernel in ``ops`` dispatches at its top (``if engine.covers(axes, x): return
engine.max_pool(x, axes)``) and then does its NumPy math; each function below is
one such compiled path and returns exactly what the NumPy code returns.

Threads: on a batch of 2 MB or more (the grouped loops: weighed by their multiply-adds,
:mod:`.grouped_conv`) the depthwise, grouped and pooling loops run their serial
twin (same loops, compiled with ``range``) on each half of the batch on the two NumPy
threads of :mod:`handgrad.ops._block_threads` (the loops release the GIL; this beat
numba's parallel launch). Otherwise the depthwise loops run in parallel on numba's
threads, and the pooling loops do for inputs of ``PARALLEL_POOL_BYTES`` or more (one
large image), else serially. A numba-parallel call runs under a launch lock: a call
that finds another thread inside a parallel kernel runs the serial twin instead, so any
number of threads may call the ops at once and none waits. col2im
is compiled single-threaded only, since it runs between BLAS calls whose threads it
would fight (see ``kernels``); :mod:`handgrad.ops._gemm_chunks` drives it (im2col stays
NumPy's ``take``, see :mod:`.gemm_conv`).

The pooling loops (:mod:`.pool_kernels`) are written for 3-D channels-last data, the
other kernels for 2-D; data of fewer spatial axes gets unit axes in front, and 3-D data
that a kernel does not take runs the NumPy code (callers dispatch with ``covers(axes,
...)``, pooling with ``most=3``).
Geometry per axis: input size, output size, kernel, stride, dilation, padding
before -- output ``o`` and tap ``k`` read input ``o*stride + k*dilation - pad``.
"""

from __future__ import annotations

import contextlib
import math
import os

import numpy as np

from .._args.windows import WindowAxis
from .._block_threads import MIN_HALF_BYTES, on_halves
from .._tile_pool import tiles

try:  # pragma: no cover - exercised when the optional dependency is present
    import numba
except ImportError:  # pragma: no cover
    numba = None

# Pooling's batch-parallel twin pays only on large inputs: a parallel launch costs 50-100
# us, and where the second core is busy with other work it adds a straggler, not speed.
# On a 2-core machine shared with other work, forward + backward of a 2x2 pooling took
# 1.25x the serial time at 4 MB of float32 input and 0.8-1.1x from 16 to 128 MB.
PARALLEL_POOL_BYTES = 16 << 20

_state = {"enabled": numba is not None and os.environ.get("HANDGRAD_NUMBA", "1") != "0"}


def enabled(*arrays) -> bool:
    """Whether the compiled kernels apply to these arrays."""
    return _state["enabled"] and all(type(a) is np.ndarray for a in arrays if a is not None)


def covers(axes, *arrays, most=2) -> bool:
    """Whether a compiled kernel applies to a window op with these ``axes``: the pooling
    kernels (``most=3``) take 1-D to 3-D data, the others 1-D and 2-D only (3-D data then
    takes the NumPy path)."""
    return len(axes) <= most and enabled(*arrays)


def available() -> bool:
    return numba is not None


@contextlib.contextmanager
def use_compiled(flag: bool):
    """Force the compiled kernels on (if available) or off inside a ``with`` block."""
    previous = _state["enabled"]
    _state["enabled"] = bool(flag) and numba is not None
    try:
        yield
    finally:
        _state["enabled"] = previous


def _axes_2d(axes):
    """1-D or 2-D axes as two (a unit axis in front of one)."""
    return (WindowAxis(1, 1, 1, 1, 0, 1), axes[0]) if len(axes) == 1 else tuple(axes)


def geometry_2d(axes):
    """Flat int tuple (H, W, OH, OW, KH, KW, SH, SW, DH, DW, PH, PW) for 1-D or 2-D axes."""
    a, b = _axes_2d(axes)
    return (a.size_in, b.size_in, a.size_out, b.size_out, a.kernel, b.kernel, a.stride,
            b.stride, a.dilation, b.dilation, a.pad_before, b.pad_before)


def geometry_3d(axes):
    """Flat int tuple (D, H, W, OD, OH, OW, KD, KH, KW, SD, SH, SW, DD, DH, DW, PD, PH,
    PW) for 1-D to 3-D axes (unit axes in front)."""
    axes = (WindowAxis(1, 1, 1, 1, 0, 1),) * (3 - len(axes)) + tuple(axes)
    return tuple(getattr(a, name) for name in ("size_in", "size_out", "kernel", "stride",
                                               "dilation", "pad_before") for a in axes)


def as_3d(x):
    """(N, *S, C) with 1 to 3 spatial axes -> (N, D, H, W, C) (a view)."""
    return x.reshape(x.shape[0], *(1,) * (5 - x.ndim), *x.shape[1:])


def as_2d(x):
    """(N, L, C) -> (N, 1, L, C); 2-D data unchanged (views)."""
    return x.reshape(x.shape[0], 1, *x.shape[1:]) if x.ndim == 3 else x


if numba is not None:  # pragma: no branch
    from . import register_taps, unrolled_taps
    from .kernels import build_kernels, sized

    kernels = build_kernels(numba)
else:  # pragma: no cover
    kernels = None


# ------------------------------------------------------------------ compiled paths
def _output(x, axes, channels, dtype):
    return np.empty((x.shape[0], *(a.size_out for a in axes), channels), dtype)


def _pool_kernel(name, x):
    """Pooling kernel ``name``: the batch-parallel one (:func:`.kernels.parallel_or_serial`)
    for inputs of ``PARALLEL_POOL_BYTES`` or more, else its serial twin."""
    return sized(getattr(kernels, name), x.nbytes, PARALLEL_POOL_BYTES)


def _run_pool(name, data, args_for):
    """Pooling kernel ``name`` on ``args_for(images)`` (its arguments for a slice of the
    batch): the serial twin on each half of a batch of 2 MB or more on the NumPy threads
    (:func:`.._block_threads.on_halves`); else :func:`_pool_kernel` on the whole batch."""
    whole, serial = _pool_kernel(name, data), getattr(kernels.serial, name)
    on_halves(data.shape[0], data.nbytes, lambda images: serial(*args_for(images)),
              lambda: whole(*args_for(slice(None))))


def max_pool(x, axes):
    """(y, index): the window maxima and the flat position (d*H + h)*W + w of each
    window's winner in its image (PyTorch's rule), for :func:`max_pool_backward`; int16
    where the image has at most 32767 positions (less memory to write and read back)."""
    positions = math.prod(a.size_in for a in axes)
    kind = np.int16 if positions <= np.iinfo(np.int16).max else np.int32
    y, index = _output(x, axes, x.shape[-1], x.dtype), _output(x, axes, x.shape[-1], kind)
    x3, g, y3, index3 = as_3d(x), geometry_3d(axes), as_3d(y), as_3d(index)
    _run_pool("max_pool", x, lambda images: (x3[images], g, y3[images], index3[images]))
    return y, index


def max_pool_backward(dy, index, x_shape, dtype):
    """dx: each dy added at its window's winner."""
    dx = np.empty(x_shape, dtype)
    flat = dx.reshape(dx.shape[0], math.prod(dx.shape[1:]))
    dy3, index3 = as_3d(dy), as_3d(index)
    _run_pool("max_pool_backward", dx,
              lambda images: (dy3[images], index3[images], flat[images]))
    return dx


def _reciprocal_3d(divisor, axes):
    """1 / divisor (1, *O, 1) as a full (OD, OH, OW) array (unit axes in front)."""
    out = tuple(a.size_out for a in axes)
    full = np.broadcast_to(1 / divisor.reshape(divisor.shape[1:-1]), out)
    return np.ascontiguousarray(full.reshape((1,) * (3 - len(out)) + out))


def avg_pool(x, axes, divisor):
    """y: the window sums times 1 / ``divisor`` (1, *O, 1)."""
    y = _output(x, axes, x.shape[-1], x.dtype)
    x3, g, scale, y3 = as_3d(x), geometry_3d(axes), _reciprocal_3d(divisor, axes), as_3d(y)
    _run_pool("avg_pool", x, lambda images: (x3[images], g, scale, y3[images]))
    return y


def avg_pool_backward(dy, axes, divisor, x_shape, dtype):
    """dx: dy / divisor added over every window that contains a position (stored once
    where the windows tile the input)."""
    dx = np.empty(x_shape, dtype)
    dy3, g, scale, dx3 = as_3d(dy), geometry_3d(axes), _reciprocal_3d(divisor, axes), as_3d(dx)
    tiled = tiles(axes)
    _run_pool("avg_pool_backward", dx,
              lambda images: (dy3[images], g, scale, dx3[images], tiled))
    return dx


def _per_output_channel(x, channels):
    """x (N, *S, C) with its channels repeated up to ``channels`` (a channel multiplier
    m = channels / C: output channel co reads input channel co // m), else x itself:
    the depthwise loops take one output channel per input channel."""
    mult = channels // x.shape[-1]
    return x if mult == 1 else np.repeat(x, mult, axis=-1)


def padded_image(axes, channels):
    """The shape of the register kernels' zero-padded scratch image (1-D or 2-D axes): the
    padded input as :func:`.._args.windows.padded_zeros` makes it, one image."""
    return (*(a.padded_size for a in _axes_2d(axes)), channels)


def depthwise(x, w, axes, b=None):
    """y (N, *O, C_y) of a depthwise convolution: x (N, *S, groups), w (*K, 1, C_y), plus
    the bias b (C_y,) when given. The loop that sums in registers (of up to 9 taps
    :mod:`.unrolled_taps`'s, its weights held along a row, else :mod:`.register_taps`'s),
    on half the batch per NumPy thread (a batch of 2 MB or more:
    :func:`.._block_threads.on_halves`), else on the whole batch; kernels over 25 taps and
    one image of 2 MB or more take the row loops (:func:`_takes_registers`), that image in
    parallel on numba's threads. Interleaved with torch, forward +
    backward of (32, 32, 32, 32), the row loops on the halves against the register loop:
    float32 3x3 2.78 -> 2.27 ms (torch 2.42), 5x5 5.20 -> 4.86 ms; float64 3x3 5.62 ->
    5.22 ms. The row loops on the halves had made float32 3x3 5.8-6.7 -> 4.2-4.3 ms against
    numba's parallel launch (waking its workers cost more than the second core gave back)."""
    y, x, y2, g, taps_w, bias = _forward_arrays(_per_output_channel(x, w.shape[-1]), w, b,
                                                 axes)
    if not _takes_registers(g, y):
        on_halves(y.shape[0], y.nbytes,
                  lambda images: kernels.serial.depthwise(x[images], taps_w, g, bias,
                                                          y2[images]),
                  lambda: kernels.depthwise(x, taps_w, g, bias, y2))
        return y
    kernel = (unrolled_taps.forward_kernel if unrolled_taps.takes_forward(g)
              else register_taps.depthwise_kernel)(g[4], g[5])
    _on_padded_halves(kernel, x, taps_w, g, bias, y2, axes)
    return y


def bias_array(b, channels, dtype):
    """The bias a compiled convolution adds: ``b`` contiguous in ``dtype``, zeros when
    None."""
    return np.zeros(channels, dtype) if b is None else np.ascontiguousarray(b, dtype)


def _forward_arrays(x, w, b, axes):
    """What a compiled convolution forward reads and writes: (y (N, *O, C_y), x and y as
    2-D maps (x C-contiguous), the geometry, the taps (prod(K) * Cg, C_y) and the bias
    (zeros when b is None), in x's dtype)."""
    y = _output(x, axes, w.shape[-1], x.dtype)
    taps_w = np.ascontiguousarray(w.reshape(-1, w.shape[-1]), x.dtype)
    return (y, np.ascontiguousarray(as_2d(x)), as_2d(y), geometry_2d(axes), taps_w,
            bias_array(b, w.shape[-1], x.dtype))


def _on_padded_halves(kernel, x, taps_w, g, bias, y2, axes):
    """A register forward ``kernel(x, taps_w, g, bias, y, pad)`` on half the batch per
    NumPy thread (:func:`.._block_threads.on_halves`), each half with a zero-padded
    scratch image of its own."""
    pad_shape = padded_image(axes, x.shape[-1])

    def run(images):
        kernel(x[images], taps_w, g, bias, y2[images], np.zeros(pad_shape, x.dtype))

    on_halves(y2.shape[0], y2.nbytes, run, lambda: run(slice(None)))


def _takes_registers(g, out):
    """Whether the register loops take a depthwise convolution of geometry ``g`` whose
    output (or dy) is ``out``: kernels of up to :data:`.register_taps.MAX_TAPS` taps, and
    not one image of 2 MB or more (numba's parallel row loops split that one)."""
    return (g[4] * g[5] <= register_taps.MAX_TAPS
            and not (out.shape[0] == 1 and out.nbytes >= 2 * MIN_HALF_BYTES))


def depthwise_weight_grad(x, dy, axes, w_shape):
    """dw (*K, 1, C_y) of a depthwise convolution alone (a network's first layer): the
    register loop's weight-gradient rows without dx (:func:`_register_backward`), else the
    row loop's (its dx, of zero weights, unused)."""
    zero_w = np.zeros(w_shape, dy.dtype)
    if _takes_registers(geometry_2d(axes), dy):
        return _register_backward(x, zero_w, dy, axes, with_dx=False)[1]
    return depthwise_gradients(x.shape, zero_w, dy, axes, x)[1]


def depthwise_gradients(x_shape, w, dy, axes, x=None):
    """(dx, dw) of a depthwise convolution in one pass; without ``x`` only dx is
    computed (dw is then zero). With ``x``, a register loop (:func:`_register_backward`)
    on each half of the batch (or the whole batch) where it applies
    (:func:`_takes_registers`); else the row loops in chunks (its halves on the NumPy
    threads, or one per numba thread). Each chunk has its own dw partial
    sums (its rows per tap and output column). Interleaved with torch, the backward of
    (32, 32, 32, 32) on the two threads: float32 3x3 1.88 -> 1.30 ms, 5x5 4.27 -> 3.14
    ms, float64 3x3 4.01 -> 3.46 ms (5x5 even) against the row loops."""
    if x is not None and _takes_registers(geometry_2d(axes), dy):
        return _register_backward(x, w, dy, axes)
    taps_w = w.reshape(-1, w.shape[-1])
    channels = dy.shape[-1]
    dx = np.empty((*x_shape[:-1], channels), dy.dtype)
    want_dw = x is not None
    dw_shape = (taps_w.shape[0], as_2d(dy).shape[2], channels) if want_dw else (0, 0, 0)
    source = as_2d(_per_output_channel(x, channels) if want_dw else dx)
    g, dy2, dx2 = geometry_2d(axes), as_2d(dy), as_2d(dx)

    def dw_rows(images, kernel, chunks):
        """The kernel on ``images`` in ``chunks``; returns its dw rows (chunks, T, OW, C)."""
        rows = np.empty((chunks, *dw_shape), dy.dtype)
        kernel(source[images], taps_w, dy2[images], g, dx2[images], rows, want_dw)
        return rows

    numba_chunks = min(dy.shape[0], numba.config.NUMBA_NUM_THREADS) or 1  # no pool launch
    parts = on_halves(dy.shape[0], dy.nbytes,
                      lambda images: dw_rows(images, kernels.serial.depthwise_backward, 1),
                      lambda: dw_rows(slice(None), kernels.depthwise_backward, numba_chunks))
    if channels != x_shape[-1]:  # the repeated input channels' gradients added up
        dx = dx.reshape(*x_shape, channels // x_shape[-1]).sum(axis=-1)
    dw = np.concatenate(parts).sum(axis=(0, 2)) if want_dw else np.zeros(taps_w.shape, dy.dtype)
    return dx, dw.reshape(w.shape)


def _register_backward(x, w, dy, axes, with_dx=True):
    """(dx or None, dw) by a register loop on the halves of the batch (each half its own
    padded scratch images and dw rows), the rows summed over the halves: a "same"
    convolution's one-pass loop (:mod:`.unrolled_taps`), else :mod:`.register_taps`'s, whose
    rows are also summed over the output columns. Without dx, the kernel gets empty dx
    arrays it does not touch."""
    channels, x_shape = dy.shape[-1], x.shape
    x = np.ascontiguousarray(as_2d(_per_output_channel(x, channels)))
    dy2, g = np.ascontiguousarray(as_2d(dy)), geometry_2d(axes)
    taps_w = np.ascontiguousarray(w.reshape(-1, channels), dy.dtype)
    pad_shape = padded_image(axes, channels)
    dx_pad_shape = pad_shape if with_dx else (0, 0, 0)
    dx = np.empty(x.shape if with_dx else (0, 0, 0, 0), dy.dtype)
    if unrolled_taps.takes(g):
        kernel, rows_shape = unrolled_taps.backward_kernel(g[4], g[5], with_dx), taps_w.shape
        taps_w = np.ascontiguousarray(taps_w[::-1])  # the flipped kernel's taps
    else:
        kernel = register_taps.backward_kernel(g[4], g[5], with_dx)
        rows_shape = (g[3], *taps_w.shape)

    def rows(images):
        part = np.zeros(rows_shape, dy.dtype)
        kernel(x[images], taps_w, dy2[images], g, dx[images], part,
               np.zeros(pad_shape, x.dtype), np.zeros(dx_pad_shape, x.dtype))
        return part

    parts = on_halves(dy.shape[0], dy.nbytes, rows, lambda: rows(slice(None)))
    dw = np.stack(parts).reshape(-1, *taps_w.shape).sum(axis=0).reshape(w.shape)
    if not with_dx:
        return None, dw
    dx = dx.reshape(*x_shape[:-1], channels)
    if channels != x_shape[-1]:  # the repeated input channels' gradients added up
        dx = dx.reshape(*x_shape, channels // x_shape[-1]).sum(axis=-1)
    return dx, dw
