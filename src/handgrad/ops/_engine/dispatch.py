"""Optional compiled kernels for the memory-bound parts of convolution and pooling.

NumPy cannot fuse a gather, a comparison and a scatter into one pass, and those
passes (not the GEMMs) dominate pooling, depthwise convolution and col2im. When
`numba` is installed (the ``fast`` extra) and the inputs are NumPy arrays, these
loops are compiled; otherwise, or with the environment variable ``HANDGRAD_NUMBA=0``,
the pure-NumPy code runs. Both paths compute the same thing and are tested against
each other and against torch. Pooling and depthwise kernels run in parallel over the
batch, or serially while another thread is in a parallel kernel, so any number of
threads may call the ops at once; col2im is single-threaded (see ``kernels``).

Every kernel is written for 2-D channels-last data; 1-D data gets a unit height.
Geometry per axis: input size, output size, kernel, stride, dilation, padding
before -- output ``o`` and tap ``k`` read input ``o*stride + k*dilation - pad``.
"""

from __future__ import annotations

import contextlib
import os

import numpy as np

from .._args.windows import Axis

try:  # pragma: no cover - exercised when the optional dependency is present
    import numba
except ImportError:  # pragma: no cover
    numba = None

_state = {"enabled": numba is not None and os.environ.get("HANDGRAD_NUMBA", "1") != "0"}


def enabled(*arrays) -> bool:
    """Whether the compiled kernels apply to these arrays."""
    return _state["enabled"] and all(type(a) is np.ndarray for a in arrays if a is not None)


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


def geometry_2d(axes):
    """Flat int tuple (H, W, OH, OW, KH, KW, SH, SW, DH, DW, PH, PW) for 1-D or 2-D axes."""
    if len(axes) == 1:
        axes = (Axis(1, 1, 1, 1, 0, 1), axes[0])
    a, b = axes
    return (a.size_in, b.size_in, a.size_out, b.size_out, a.kernel, b.kernel, a.stride,
            b.stride, a.dilation, b.dilation, a.pad_before, b.pad_before)


def as_2d(x):
    """(N, L, C) -> (N, 1, L, C); 2-D data unchanged (views)."""
    return x.reshape(x.shape[0], 1, *x.shape[1:]) if x.ndim == 3 else x


if numba is not None:  # pragma: no branch
    from .kernels import build_kernels

    kernels = build_kernels(numba)
else:  # pragma: no cover
    kernels = None
