"""Validation of fractional max pooling (shared with the loop twins and the layers).

PyTorch's regions (aten's ``generate_intervals``), per spatial axis of size ``L`` pooled to
``out`` windows of ``k`` taps with a sample ``u`` in [0, 1), computed in the input's
dtype: ``alpha = (L - k) / (out - 1)``, window ``i < out - 1`` starts at
``int((i + u) * alpha) - int(u * alpha)``, the last one at ``L - k``.

The samples are PyTorch's ``_random_samples``, (N, C, nd): for 2-D, ``[..., 0]`` is the
width's and ``[..., 1]`` the height's sample (torch's order); for 3-D they follow
(D, H, W).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from ..._checks import array_module, as_generator, describe, float_array, int_tuple
from ..._device import like
from .adaptive import check_return_indices
from .conv import LAYOUTS
from .windows import check_not_empty

#: per rank, the column of the samples array that drives each spatial axis (torch's)
SAMPLE_COLUMNS = {2: (1, 0), 3: (0, 1, 2)}


@dataclass(frozen=True)
class FractionalCall:
    """A validated call: the op's name, x (N, *S, C), the kernel and output sizes per
    axis, the samples (N, C, nd) in x's dtype and whether indices are returned."""

    op: str
    x: object
    kernel: tuple
    out: tuple
    samples: object
    return_indices: bool

    def axis_samples(self, axis):
        """(N, C): the samples that place the windows of spatial axis ``axis``."""
        return self.samples[:, :, SAMPLE_COLUMNS[len(self.kernel)][axis]]


def _ratio(op, output_ratio, nd):
    given = (output_ratio,) * nd if isinstance(output_ratio, numbers.Real) else output_ratio
    if (not isinstance(given, (tuple, list)) or len(given) != nd or not all(
            isinstance(r, numbers.Real) and not isinstance(r, bool) and 0 < r < 1
            for r in given)):
        raise ValueError(f"{op}: 'output_ratio' must be a number in (0, 1) or a tuple of {nd} "
                         f"such numbers; received {output_ratio!r}")
    return tuple(float(r) for r in given)


def fractional_pool_config(op, nd, kernel_size, output_size=None, output_ratio=None):
    """``(kernel, output_size, output_ratio)`` checked, per axis (one of the last two is
    None): a positive kernel, and exactly one of a positive output size or a ratio in
    (0, 1)."""
    kernel = int_tuple(op, "kernel_size", kernel_size, nd)
    if (output_size is None) == (output_ratio is None):
        raise ValueError(f"{op}: give exactly one of 'output_size' and 'output_ratio'; "
                         f"received output_size={output_size!r}, "
                         f"output_ratio={output_ratio!r}")
    if output_ratio is not None:
        return kernel, None, _ratio(op, output_ratio, nd)
    return kernel, int_tuple(op, "output_size", output_size, nd), None


def fractional_output_sizes(op, input_size, kernel_size, output_size=None, output_ratio=None):
    """The output's spatial sizes: ``output_size``, or ``int(L * ratio)`` per axis;
    the windows must fit as PyTorch checks it: ``out + k - 1 <= L`` in 2-D, and
    ``out + k - 1 < L`` in 3-D (aten's 3-D check is strict)."""
    spatial = tuple(int(s) for s in input_size)
    kernel, sizes, ratio = fractional_pool_config(op, len(spatial), kernel_size, output_size,
                                                  output_ratio)
    if sizes is None:
        sizes = tuple(int(s * r) for s, r in zip(spatial, ratio))
    for axis, (s, k, o) in enumerate(zip(spatial, kernel, sizes)):
        if o < 1:
            raise ValueError(f"{op}: output_ratio {ratio} gives an empty output along spatial "
                             f"axis {axis} (input size {s}); use a larger ratio or input")
        need = o + k - 1 + (len(spatial) == 3)
        if need > s:
            rule = "output + kernel" if len(spatial) == 3 else "output + kernel - 1"
            raise ValueError(f"{op}: along spatial axis {axis}, {o} windows of kernel_size {k} "
                             f"need an input of at least {need} ({rule}, as PyTorch); "
                             f"received input size {s}")
    return kernel, sizes


def _samples(op, x, nd, samples, rng):
    """The given samples checked and cast to x's dtype, or new ones drawn from ``rng``."""
    shape = (x.shape[0], x.shape[-1], nd)
    if samples is None:  # drawn in float64, so a float32 call pools the same regions
        drawn = as_generator(op, "rng", rng).random(shape).astype(x.dtype)
        return like(np.minimum(drawn, np.nextafter(x.dtype.type(1), x.dtype.type(0))), x)
    if rng is not None:
        raise ValueError(f"{op}: give 'samples' or 'rng', not both; received rng="
                         f"{describe(rng)} with samples")
    samples = float_array(op, "samples", samples, 3, "(N, C, nd)")
    if samples.shape != shape:
        raise ValueError(f"{op}: 'samples' must have shape (N, C, {nd}) = {shape}; received "
                         f"{tuple(samples.shape)}")
    samples = samples.astype(x.dtype, copy=False)
    if samples.size and not bool(((samples >= 0) & (samples < 1)).all()):
        raise ValueError(f"{op}: 'samples' must lie in [0, 1); received values in "
                         f"[{samples.min()}, {samples.max()}]")
    return like(samples, x)


def prepare_fractional(op, nd, x, kernel_size, output_size, output_ratio, return_indices,
                       samples, rng) -> FractionalCall:
    """Validate a fractional_max_pool{nd}d call on x (N, *S, C)."""
    x = check_not_empty(op, "x", float_array(op, "x", x, nd + 2, LAYOUTS[nd]), LAYOUTS[nd])
    kernel, sizes = fractional_output_sizes(op, x.shape[1:-1], kernel_size, output_size,
                                            output_ratio)
    wanted = check_return_indices(op, return_indices)
    return FractionalCall(op, x, kernel, sizes, _samples(op, x, nd, samples, rng), wanted)


def interval_starts(u, size_in, size_out, kernel):
    """(N, C, size_out) int64 window starts of one axis from its samples ``u`` (N, C),
    computed in u's dtype as aten does."""
    xp = array_module(u)
    starts = xp.full((*u.shape, size_out), size_in - kernel, dtype=np.int64)
    if size_out > 1:
        real = u.dtype.type
        alpha = real(size_in - kernel) / real(size_out - 1)
        i = xp.arange(size_out - 1, dtype=u.dtype)
        starts[..., :-1] = (((i + u[..., None]) * alpha).astype(np.int64)
                            - (u * alpha).astype(np.int64)[..., None])
    return starts

