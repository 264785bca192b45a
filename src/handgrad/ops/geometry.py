"""Public geometry and validation helpers, for the code above the kernels (layers,
converters) that needs the kernels' own rules without calling a kernel.

Window ops (convolution, pooling) are described per spatial axis by a
:class:`WindowAxis` ``(size_in, kernel, stride, dilation, pad_before, size_out)``:
output ``o`` and kernel tap ``k`` read the padded input at
``o*stride + k*dilation - pad_before``; ``pad_after`` (a property) is the padding
after the input that the windows cover, negative when trailing inputs are read by
no window. A :class:`WindowGeometry` holds one axis per spatial axis and the user's
padding resolved to ``(before, after)`` pairs (``"same"``, ``"causal"`` computed).

Sizes are spatial only: ``input_size`` is ``(L,)`` or ``(H, W)`` (any number of axes),
without the batch and channel axes. ``op`` names the caller in error messages, which
are ``ValueError``/``TypeError`` naming the argument and the received value, exactly
as the kernels raise them.

Validators (``op`` first, as the kernels call them):

- ``parse_padding(op, padding, n, kernel, stride, dilation, size_in, strings)``:
  per-axis ``(before, after)`` pairs from an int, ints, pairs or a string.
- ``resolve_count_include_pad(op, padding, count_include_pad)``: whether average pooling
  counts the padding (None: not for ``"same"``, yes otherwise).
- ``check_normalized_shape(op, normalized_shape)``: an int or tuple of ints as a tuple.
- ``check_lengths(op, lengths, n, steps)``: sequence lengths as int64 (N,) in [1, T].
- ``check_ids(op, ids, num_embeddings)``: integer ids in [0, num_embeddings).
- ``check_padding_idx(op, padding_idx, num_embeddings)``: None or an int in [-V, V),
  returned in [0, V).
- ``check_max_norm(op, max_norm, norm_type)`` and ``embedding_renorm_(weight, ids,
  max_norm, norm_type)``: an Embedding's ``max_norm`` checked, and the looked-up rows
  renormalized in place (as torch's ``embedding_renorm_``).
- ``EMBEDDING_BAG_MODES``: an EmbeddingBag's reductions (``"sum"``, ``"mean"``, ``"max"``).
- ``adaptive_output_sizes(op, output_size, input_size)``: an adaptive pooling's output
  sizes (None keeps an axis); ``adaptive_bins(size_in, size_out)``: PyTorch's
  ``(start, end)`` bins of one axis.
- ``fractional_pool_config(op, nd, kernel_size, output_size, output_ratio)`` and
  ``fractional_output_sizes(op, input_size, kernel_size, output_size, output_ratio)``: a
  fractional max pooling's arguments checked, and its (kernel, output sizes).
- ``unpool_output_shape(op, input_size, kernel_size, stride, padding, output_size)``: a
  max unpooling's spatial output sizes.
- ``RECURRENT_GATES``: gate blocks per recurrent cell (``{"rnn": 1, "lstm": 4, "gru": 3}``);
  the weights of a cell with G gates and hidden size H have G*H columns.
"""

from __future__ import annotations

from .._checks import describe, int_tuple, is_int
from ._args.adaptive import adaptive_bins, adaptive_output_sizes
from ._args.conv import conv_transpose_window, conv_window
from ._args.fractional import fractional_output_sizes, fractional_pool_config
from ._args.norm import check_normalized_shape
from ._args.pool import pool_window, resolve_count_include_pad
from ._args.recurrent import GATES as RECURRENT_GATES
from ._args.recurrent import check_lengths
from ._args.unpool import unpool_output_shape
from ._args.windows import WindowAxis, WindowGeometry, parse_padding
from .embedding import check_ids, check_max_norm, check_padding_idx, embedding_renorm_
from .embedding_bag import EMBEDDING_BAG_MODES

__all__ = [
    "EMBEDDING_BAG_MODES",
    "RECURRENT_GATES",
    "WindowAxis",
    "WindowGeometry",
    "adaptive_bins",
    "adaptive_output_sizes",
    "check_ids",
    "check_lengths",
    "check_max_norm",
    "check_normalized_shape",
    "check_padding_idx",
    "conv_geometry",
    "conv_transpose_geometry",
    "embedding_renorm_",
    "fractional_output_sizes",
    "fractional_pool_config",
    "parse_padding",
    "pool_geometry",
    "resolve_count_include_pad",
    "unpool_output_shape",
]


def _spatial(op, input_size):
    """``input_size`` as a non-empty tuple of ints >= 1."""
    if is_int(input_size):
        input_size = (input_size,)
    if not isinstance(input_size, (tuple, list)) or not input_size:
        raise TypeError(f"{op}: 'input_size' must be a non-empty tuple of spatial sizes; "
                        f"received {describe(input_size)}")
    return int_tuple(op, "input_size", tuple(input_size), len(input_size))


def conv_geometry(input_size, kernel_size, *, stride=1, padding=0, dilation=1,
                  op="conv_geometry") -> WindowGeometry:
    """Geometry of a convolution (as :func:`handgrad.ops.conv2d` computes it) over an
    input of spatial size ``input_size`` with a kernel of ``kernel_size`` taps per axis.

    ``padding``: an int, a tuple of ints, ``(before, after)`` pairs, ``"valid"``,
    ``"same"`` or (1-D) ``"causal"``. Per axis, the output size is
    ``floor((in + before + after - dilation*(kernel - 1) - 1) / stride) + 1``.
    """
    spatial = _spatial(op, input_size)
    kernel = int_tuple(op, "kernel_size", kernel_size, len(spatial))
    return conv_window(op, spatial, kernel, stride, padding, dilation)


def conv_transpose_geometry(input_size, kernel_size, *, stride=1, padding=0, output_padding=0,
                            dilation=1, op="conv_transpose_geometry") -> WindowGeometry:
    """Geometry of a transposed convolution (as :func:`handgrad.ops.conv_transpose2d`)
    whose input has spatial size ``input_size``.

    The axes describe the adjoint convolution (its ``size_in`` is this op's output).
    Per axis, the output size is
    ``(in - 1)*stride - before - after + dilation*(kernel - 1) + 1 + output_padding``,
    and ``pad_after`` of the adjoint is ``after - output_padding``.
    """
    spatial = _spatial(op, input_size)
    kernel = int_tuple(op, "kernel_size", kernel_size, len(spatial))
    return conv_transpose_window(op, spatial, kernel, stride, padding, output_padding, dilation)


def pool_geometry(input_size, kernel_size, *, stride=None, padding=0, dilation=1,
                  ceil_mode=False, op="pool_geometry") -> WindowGeometry:
    """Geometry of a max or average pooling (as :func:`handgrad.ops.max_pool2d`) over an
    input of spatial size ``input_size``; ``stride=None`` means ``stride = kernel_size``.

    Numeric padding may be at most half the kernel on each side. Per axis, the output
    size is PyTorch's, rounded up with ``ceil_mode`` (but no window starts in the
    trailing padding).
    """
    return pool_window(op, _spatial(op, input_size), kernel_size, stride, padding, dilation,
                       ceil_mode)
