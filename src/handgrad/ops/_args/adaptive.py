"""Validation and bins of adaptive pooling (shared with the reference twins).

PyTorch's bins along an axis of size L pooled to ``out`` positions: output ``o`` reads
``[floor(o * L / out), ceil((o + 1) * L / out))``; neighbouring bins may overlap.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..._checks import float_array, is_int
from .conv import LAYOUTS
from .windows import check_not_empty


@dataclass(frozen=True)
class AdaptiveCall:
    """A validated adaptive pooling call: the op's name, the input and, per spatial
    axis, the (start, end) of every bin (plain int tuples)."""

    op: str
    x: object
    bins: tuple  # per axis: tuple of (start, end)

    @property
    def out_shape(self):
        return tuple(len(b) for b in self.bins)


def adaptive_bins(size_in, size_out):
    """PyTorch's adaptive bins: ``[(floor(o*L/out), ceil((o+1)*L/out)) for o]``."""
    return tuple((o * size_in // size_out, -(-(o + 1) * size_in // size_out))
                 for o in range(size_out))


def adaptive_output_sizes(op, output_size, spatial):
    """``output_size`` (a positive int, or a tuple of len(spatial) positive ints or None
    meaning the input's size) -> one int per spatial axis."""
    nd = len(spatial)
    given = (output_size,) * nd if is_int(output_size) else output_size
    if not isinstance(given, (tuple, list)) or len(given) != nd or not all(
            v is None or (is_int(v) and v > 0) for v in given):
        raise ValueError(f"{op}: 'output_size' must be a positive int or a tuple of {nd} "
                         f"positive ints or None (None keeps the input's size); received "
                         f"{output_size!r}")
    return tuple(size if v is None else int(v) for v, size in zip(given, spatial))


def prepare_adaptive(op, nd, x, output_size) -> AdaptiveCall:
    """Validate an adaptive pooling call on x (N, *S, C) with ``nd`` spatial axes."""
    x = check_not_empty(op, "x", float_array(op, "x", x, nd + 2, LAYOUTS[nd]), LAYOUTS[nd])
    spatial = tuple(x.shape[1:-1])
    sizes = adaptive_output_sizes(op, output_size, spatial)
    return AdaptiveCall(op, x, tuple(adaptive_bins(s, o) for s, o in zip(spatial, sizes)))


def check_return_indices(op, return_indices):
    if not isinstance(return_indices, bool):
        raise TypeError(f"{op}: 'return_indices' must be a bool; received {return_indices!r}")
    return return_indices
