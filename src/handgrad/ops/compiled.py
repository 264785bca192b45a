"""Whether the optional compiled (numba) kernels run.

With ``numba`` installed (the ``fast`` extra) pooling, depthwise convolution and
col2im use compiled loops on NumPy arrays; ``HANDGRAD_NUMBA=0`` in the environment, or
``use_compiled_kernels(False)``, selects the plain NumPy code. Both compute the same
results.
"""

from __future__ import annotations

import contextlib

from ._engine import dispatch as engine

__all__ = ["compiled_kernels_available", "compiled_kernels_enabled", "use_compiled_kernels"]


def compiled_kernels_available() -> bool:
    """Whether numba is installed, so that the compiled kernels can run."""
    return engine.available()


def compiled_kernels_enabled(*arrays) -> bool:
    """Whether the compiled kernels run now (on NumPy inputs), for ``arrays`` if given
    (False when one of them is not a NumPy array, e.g. a CuPy one)."""
    return engine.available() and engine.enabled(*arrays)


@contextlib.contextmanager
def use_compiled_kernels(flag: bool):
    """Turn the compiled kernels on (if available) or off inside a ``with`` block."""
    with engine.use_compiled(flag):
        yield
